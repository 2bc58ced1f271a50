"""tensordict's guides and what a user writes next, run with tensordict 0.15.3 and with
tensorbox (only the import changed), and the results compared.

Each scenario is a function of the package (``tensordict`` or ``tensorbox``) and a
folder; its result is reduced by :func:`summary` to plain data: classes, keys, batch
sizes, devices, dtypes, shapes, the bytes of every tensor, text values, and for an
error the built-in exception types it is. The two summaries must be equal (an error
of tensorbox may be a subclass of tensordict's). Complements
``tests/compat/test_tensordict_guides.py``, which runs the guides' code on tensorbox alone.
The scenarios are small: the whole file runs in seconds.
"""

from __future__ import annotations

import hashlib
import importlib
import pickle
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

tensordict = pytest.importorskip("tensordict")  # the oracle: the compat extra
tensorbox = importlib.import_module("tensorbox")


def summary(x: Any) -> Any:
    """Plain data that two equal results share, whichever package built them."""
    if isinstance(x, BaseException):
        return ("error", _builtin_types(type(x)))
    if isinstance(x, (list, tuple)) and not _is_coll(x):
        return [summary(v) for v in x]
    if isinstance(x, torch.Tensor):
        t = x.detach().cpu().contiguous()
        raw = t.reshape(-1).view(torch.uint8) if t.numel() else t.reshape(-1)
        digest = hashlib.sha256(raw.numpy().tobytes()).hexdigest()[:16]
        return ("tensor", str(t.dtype), tuple(t.shape), str(x.device), digest)
    if _is_coll(x):
        name = type(x).__name__
        td = x if name in ("TensorDict",) else x.to_tensordict()
        items = {}
        for k in sorted(td.keys()):
            items[k] = summary(td[k])
        return ("node", name, tuple(x.batch_size), str(x.device), items)
    return ("value", _plain(x))


def _is_coll(x: Any) -> bool:
    return bool(tensordict.is_tensor_collection(x) or tensorbox.is_tensor_collection(x))


def _plain(v: Any) -> Any:
    if isinstance(v, (list, tuple)):  # tensordict's LinkedList is a list
        return [_plain(i) for i in v]
    return v


def _builtin_types(cls: type) -> frozenset[str]:
    return frozenset(c.__name__ for c in cls.__mro__ if c.__module__ == "builtins")


def run(scenario: Callable[[ModuleType, Path], Any], tmp_path: Path) -> tuple[Any, Any]:
    out = []
    for lib in (tensordict, tensorbox):
        folder = tmp_path / lib.__name__
        folder.mkdir(parents=True)
        torch.manual_seed(0)  # the same random data for both
        try:
            result = scenario(lib, folder)
        except Exception as err:  # the error itself is a result to compare
            result = err
        out.append(summary(result))
    return out[0], out[1]


def check(scenario: Callable[[ModuleType, Path], Any], tmp_path: Path) -> None:
    theirs, ours = run(scenario, tmp_path)
    same(theirs, ours)


def same(theirs: Any, ours: Any) -> None:
    """Equal summaries; an error of tensorbox may be a subclass of tensordict's."""
    if isinstance(theirs, list) and isinstance(ours, list) and len(theirs) == len(ours):
        for a, b in zip(theirs, ours):
            same(a, b)
    elif theirs[0] == "error" and ours[0] == "error":
        assert theirs[1] <= ours[1], (theirs, ours)
    else:
        assert ours == theirs


# ---------------------------------------------------------------- the guides


def _photos(n: int) -> list[tuple[torch.Tensor, int]]:
    g = torch.Generator().manual_seed(0)
    return [
        (torch.randint(0, 256, (3, 8, 8), generator=g, dtype=torch.uint8), i % 3) for i in range(n)
    ]


def imagenet_tutorial(lib: ModuleType, path: Path) -> Any:
    @lib.tensorclass
    class ImageNetData:
        images: torch.Tensor
        targets: torch.Tensor

    photos = _photos(10)
    data = ImageNetData(
        images=lib.MemoryMappedTensor.empty((10, 3, 8, 8), dtype=torch.uint8),
        targets=lib.MemoryMappedTensor.empty((10,), dtype=torch.int64),
        batch_size=[10],
    )
    data = data.memmap_(path / "train")
    i = 0
    for image, target in DataLoader(photos, batch_size=4):
        n = image.shape[0]
        data[i : i + n] = ImageNetData(images=image, targets=target, batch_size=[n])
        i += n
    batches = list(DataLoader(data, batch_size=4, collate_fn=lambda x: x))
    loaded = ImageNetData.load_memmap(path / "train")
    return [data, loaded, *batches]


def memory_tutorial(lib: ModuleType, path: Path) -> Any:
    td = lib.TensorDict({"a": torch.randn(4, 3), "b": {"c": torch.arange(4)}}, batch_size=[4])
    shared = td.clone().share_memory_()
    mapped = td.memmap(path / "m")
    like = td.memmap_like(path / "like")
    like[1:3] = td[1:3]
    inplace = td.clone().memmap_(path / "inplace")
    return [shared.device, shared, mapped, like, inplace, lib.TensorDict.load_memmap(path / "like")]


def saving_guide(lib: ModuleType, path: Path) -> Any:
    @lib.tensorclass
    class Tc:
        data: torch.Tensor
        metadata: str

    td_list = [lib.TensorDict({"item": torch.tensor(i)}, batch_size=[]) for i in range(4)]
    tc = Tc(torch.arange(3.0), metadata="some text", batch_size=[])
    data = lib.TensorDict({"td_list": torch.stack(td_list), "tensorclass": tc}, [])
    data.memmap_(path / "t")
    loaded = lib.TensorDict.load_memmap(path / "t")
    loaded["new"] = torch.ones(())  # what a user writes next: a loaded tree is unlocked
    datum = lib.TensorDict({"image": torch.zeros(3, 4, 4, dtype=torch.uint8), "label": 0}, [])
    disk = datum.expand(100).memmap_like(path / "data")
    disk[3] = datum.apply(lambda t: t + 1)
    return [data, loaded, loaded.is_locked, disk[3], lib.TensorDict.load_memmap(path / "data")[3]]


# ---------------------------------------------------------------- what users write next


def dtypes(lib: ModuleType, path: Path) -> Any:
    td = lib.TensorDict(
        {
            "bf": torch.arange(6, dtype=torch.bfloat16).reshape(3, 2),
            "h": torch.ones(3, dtype=torch.float16),
            "b": torch.tensor([True, False, True]),
            "u8": torch.arange(3, dtype=torch.uint8),
            "i16": torch.arange(3, dtype=torch.int16),
            "f64": torch.rand(3, 2, dtype=torch.float64),
        },
        batch_size=[3],
    )
    return [td.memmap(path / "t"), lib.TensorDict.load_memmap(path / "t")]


def nested_tensorclasses_and_text(lib: ModuleType, path: Path) -> Any:
    @lib.tensorclass
    class Inner:
        x: torch.Tensor
        tag: str

    @lib.tensorclass
    class Outer:
        inner: Inner
        y: torch.Tensor

    o = Outer(inner=Inner(torch.ones(2, 3), "in", batch_size=[2]), y=torch.zeros(2), batch_size=[2])
    saved = o.memmap(path / "o")
    back = Outer.load_memmap(path / "o")
    return [saved, back, back.inner.tag, torch.stack([o[0], o[1]]), o.expand(3, 2)]


def text_after_stack_and_expand(lib: ModuleType, path: Path) -> Any:
    row = lib.TensorDict(a=torch.zeros(()), s="cats", batch_size=[])
    rows = torch.stack([row, lib.TensorDict(a=torch.ones(()), s="dogs", batch_size=[])])
    same = torch.stack([row.clone(), row.clone()])
    return [rows, same, row.expand(3), rows[1:], same[0], torch.cat([same, same])]


def two_batch_dims(lib: ModuleType, path: Path) -> Any:
    td = lib.TensorDict({"x": torch.arange(24.0).reshape(2, 3, 4)}, batch_size=[2, 3])
    saved = td.memmap(path / "t")
    back = lib.TensorDict.load_memmap(path / "t")
    return [saved, back[1], back[:, 0], back.reshape(6), back.permute(1, 0)]


def memmap_like_filled_by_slices(lib: ModuleType, path: Path) -> Any:
    src = lib.TensorDict(
        {"x": torch.arange(20.0).reshape(10, 2), "n": {"y": torch.arange(10)}}, [10]
    )
    out = src.memmap_like(path / "t")
    for start in range(0, 10, 4):
        out[start : start + 4] = src[start : start + 4]
    return [out, lib.TensorDict.load_memmap(path / "t")]


def r_plus_and_sub_folders(lib: ModuleType, path: Path) -> Any:
    src = lib.TensorDict({"x": torch.zeros(4), "n": {"y": torch.arange(4)}}, [4])
    src.memmap(path / "t")
    back = lib.TensorDict.load_memmap(path / "t", mode="r+")
    back["x"][1] = 5.0
    back["n", "y"][0] = 9
    sub = lib.TensorDict.load_memmap(path / "t" / "n")
    ro = lib.TensorDict.load_memmap(path / "t", mode="r")
    ro["x"][0] = -1.0  # copy-on-write: stays in memory
    cpu = lib.TensorDict.load_memmap(path / "t", device="cpu")
    cpu["x"][2] = 7.0  # device="cpu" keeps the mapping
    return [lib.TensorDict.load_memmap(path / "t"), sub, ro, cpu.device]


def masks(lib: ModuleType, path: Path) -> Any:
    td = lib.TensorDict({"x": torch.arange(6.0), "s": "t"}, [6]).memmap(path / "t")
    mask = torch.tensor([True, False, True, True, False, False])
    back = lib.TensorDict.load_memmap(path / "t")
    back[mask] = back[mask].apply(lambda t: t * 10)
    return [td[mask], back, lib.TensorDict.load_memmap(path / "t")]


class _Rows:
    def __init__(self, data: Any) -> None:
        self.data = data

    def __len__(self) -> int:
        return int(self.data.batch_size[0])

    def __getitem__(self, i: int) -> Any:
        return self.data[i]


def _stack(items: list[Any]) -> Any:
    return torch.stack(items)


def dataloader_workers(lib: ModuleType, path: Path) -> Any:
    td = lib.TensorDict({"x": torch.arange(12.0).reshape(6, 2), "y": torch.arange(6)}, [6])
    data = td.memmap(path / "t")
    loader = DataLoader(_Rows(data), batch_size=3, num_workers=2, collate_fn=_stack)
    return list(loader)


def pickling(lib: ModuleType, path: Path) -> Any:
    td = lib.TensorDict({"x": torch.arange(4.0), "s": "name", "n": {"y": torch.ones(4, 2)}}, [4])
    saved = td.memmap(path / "t")
    return [pickle.loads(pickle.dumps(td)), pickle.loads(pickle.dumps(saved))]


def errors(lib: ModuleType, path: Path) -> Any:
    out = []
    for bad in (
        lambda: lib.TensorDict(a=torch.zeros(2))[0],
        lambda: (
            lib.TensorDict(a=torch.zeros(3), batch_size=[3])
            .memmap(path / "t")
            .set("z", torch.zeros(3))
        ),
        lambda: lib.TensorDict(a=torch.zeros(3), batch_size=[3])["missing"],
        lambda: lib.TensorDict(a=torch.zeros(3), batch_size=[4]),
    ):
        try:
            bad()
            out.append("no error")
        except Exception as err:
            out.append(err)
    return out


SCENARIOS = [
    imagenet_tutorial,
    memory_tutorial,
    saving_guide,
    dtypes,
    nested_tensorclasses_and_text,
    text_after_stack_and_expand,
    two_batch_dims,
    memmap_like_filled_by_slices,
    r_plus_and_sub_folders,
    masks,
    dataloader_workers,
    pickling,
    errors,
]

# Left out of the quick loop (`make check`): they start worker processes.
HEAVY_SCENARIOS = {dataloader_workers}


@pytest.mark.parametrize(
    "scenario",
    [
        pytest.param(s, id=s.__name__, marks=[pytest.mark.heavy] if s in HEAVY_SCENARIOS else [])
        for s in SCENARIOS
    ],
)
def test_same_results_as_tensordict(
    scenario: Callable[[ModuleType, Path], Any], tmp_path: Path
) -> None:
    check(scenario, tmp_path)


def test_the_comparison_can_fail(tmp_path: Path) -> None:
    """A scenario whose results differ is caught: keys, devices, bytes, error types."""

    def differs(lib: ModuleType, path: Path) -> Any:
        td = lib.TensorDict(a=torch.zeros(2), batch_size=[2])
        return td.apply(lambda t: t + 1) if lib is tensorbox else td

    with pytest.raises(AssertionError):
        check(differs, tmp_path / "one")

    def error_types(lib: ModuleType, path: Path) -> Any:
        raise (KeyError if lib is tensorbox else RuntimeError)("x")

    with pytest.raises(AssertionError):
        check(error_types, tmp_path / "two")
