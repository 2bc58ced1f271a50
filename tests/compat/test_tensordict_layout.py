"""``memmap(path, format="tensordict")``: trees in tensordict's own layout, which
tensordict's ``load_memmap`` reads back (the oracle, when installed) and which a
checked-in golden copy pins down when it is not. Write-through and ``extend_`` keep
the layout; what it cannot hold is refused with the key named."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorbox import NonTensorData, TensorDict, tensorclass

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "tensorbox_tensordict_layout"


@tensorclass
class Pair:
    x: torch.Tensor
    label: str = "l"


def sample() -> TensorDict:
    """The tree of the golden copy: every kind of entry the layout holds."""
    return TensorDict(
        {
            "a b/c": torch.arange(3),
            "Obs": torch.arange(6.0).reshape(3, 2),
            "bf": torch.ones(3, dtype=torch.bfloat16),
            "mask": torch.tensor([True, False, True]),
            "n": {"x": torch.zeros(3, 2), "deep": {"y": torch.full((3,), 7, dtype=torch.int16)}},
            "p": Pair(x=torch.ones(3), label="pair", batch_size=[3]),
            "s": "hi",
            "rows": NonTensorData(np.array(["r0", "r1", "r2"], dtype=object), stacked=True),
        },
        batch_size=[3],
    )


def _tensordict() -> Any:
    pytest.importorskip("tensordict")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import tensordict
    return tensordict


def _same_as_sample(t: Any) -> None:
    assert t["a b/c"].tolist() == [0, 1, 2] and t["Obs"].tolist() == [[0, 1], [2, 3], [4, 5]]
    assert t["bf"].dtype is torch.bfloat16 and t["mask"].tolist() == [True, False, True]
    assert t["n", "deep", "y"].tolist() == [7, 7, 7] and t["n", "x"].shape == (3, 2)
    assert t["p", "x"].tolist() == [1.0] * 3 and t["p", "label"] == "pair"
    assert t["s"] == "hi" and list(t["rows"]) == ["r0", "r1", "r2"]


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_the_layout_matches_the_golden_copy(tmp_path: Path) -> None:
    # a change of what is written shows here, with or without tensordict installed
    sample().memmap(tmp_path / "t", format="tensordict")
    assert _files(tmp_path / "t") == _files(GOLDEN)


def test_tensorbox_reads_it_back(tmp_path: Path) -> None:
    sample().memmap(tmp_path / "t", format="tensordict")
    back = TensorDict.load_memmap(tmp_path / "t")
    _same_as_sample(back)
    assert type(back["p"]) is TensorDict  # tensorclass nodes are TensorDict nodes there


def test_tensordict_reads_it(tmp_path: Path) -> None:
    tensordict = _tensordict()
    sample().memmap(tmp_path / "t", format="tensordict")
    for root in (tmp_path / "t", GOLDEN):
        _same_as_sample(tensordict.TensorDict.load_memmap(root))


KEYS = st.text(alphabet="ab_ /%.:-Z", min_size=1, max_size=5).filter(
    lambda k: k not in ("shape", "device") and not k.endswith(".memmap")
)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.dictionaries(
        KEYS,
        st.tuples(
            st.sampled_from([torch.float32, torch.int64, torch.bool, torch.float16]),
            st.sampled_from([(), (2,), (1, 3)]),
        ),
        min_size=1,
        max_size=5,
    ),
    st.integers(0, 3),
)
def test_any_tree_reads_back_in_tensordict(
    tmp_path_factory: pytest.TempPathFactory,
    leaves: dict[str, tuple[torch.dtype, tuple[int, ...]]],
    rows: int,
) -> None:
    tensordict = _tensordict()
    g = torch.Generator().manual_seed(0)
    td = TensorDict(
        {
            k: (torch.rand((rows, *shape), generator=g) * 10).to(dt)
            for k, (dt, shape) in leaves.items()
        },
        batch_size=[rows],
    )
    td["sub"] = td.clone()
    path = tmp_path_factory.mktemp("t") / "tree"
    td.memmap(path, format="tensordict")
    back = tensordict.TensorDict.load_memmap(path)
    assert back.batch_size == td.batch_size
    for key, leaf in td.items(True, True):
        assert back[key].dtype == leaf.dtype and torch.equal(
            back[key].as_subclass(torch.Tensor), leaf
        )


def test_write_through_and_extend_keep_the_layout(tmp_path: Path) -> None:
    t = TensorDict(a=torch.arange(3.0), n={"b": torch.zeros(3, 2)}, s="x", batch_size=[3])
    t = t.memmap(tmp_path / "t", format="tensordict")
    t[1] = {"a": torch.tensor(9.0), "s": "y"}  # a value per row: committed
    with t.unlock_():
        t["new"] = torch.ones(3)  # a new key: committed
    t.extend_(
        TensorDict(
            a=torch.ones(2), n={"b": torch.ones(2, 2)}, s="z", new=torch.zeros(2), batch_size=[2]
        )
    )
    meta = json.loads((tmp_path / "t" / "meta.json").read_text())
    assert meta["_class"] == "tensordict:TensorDict" and "format" not in meta
    assert meta["shape"] == [5] and meta["s"] == {"type": "NonTensorStack"}
    back = TensorDict.load_memmap(tmp_path / "t")
    assert back["a"].tolist() == [0.0, 9.0, 2.0, 1.0, 1.0] and back["s"] == [
        "x",
        "y",
        "x",
        "z",
        "z",
    ]
    try:
        tensordict = _tensordict()
    except pytest.skip.Exception:
        return
    theirs = tensordict.TensorDict.load_memmap(tmp_path / "t")
    assert theirs["new"].tolist() == [1.0, 1.0, 1.0, 0.0, 0.0] and list(theirs["s"])[1] == "y"


def test_what_the_layout_cannot_hold_is_refused(tmp_path: Path) -> None:
    with pytest.raises(
        ValueError, match=r"key 'shape' is the name of a field of tensordict's meta\.json"
    ):
        TensorDict(shape=torch.zeros(2), batch_size=[2]).memmap(tmp_path / "a", format="tensordict")
    clash = TensorDict({"x": torch.zeros(2), "x.memmap": {"y": torch.zeros(2)}}, batch_size=[2])
    with pytest.raises(ValueError, match=r"key 'x.memmap' gives the file name 'x.memmap'"):
        clash.memmap(tmp_path / "b", format="tensordict")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nt = torch.nested.nested_tensor([torch.ones(1), torch.ones(2)], layout=torch.jagged)
    with pytest.raises(
        TypeError, match="key 'j' is a jagged tensor, which this layout does not store"
    ):
        TensorDict(j=nt, batch_size=[2]).memmap(tmp_path / "c", format="tensordict")
    with pytest.raises(ValueError, match="nowhere to record checksums"):
        sample().memmap(tmp_path / "d", format="tensordict", checksum=True)
    with pytest.raises(ValueError, match="writes a folder"):
        sample().memmap(tmp_path / "e.tdz", format="tensordict")
    with pytest.raises(ValueError, match="format='zarr': expected 'tensorbox' or 'tensordict'"):
        sample().memmap(tmp_path / "f", format="zarr")
    assert not any((tmp_path / n).exists() for n in "abcdf")  # nothing half-written
    saved = TensorDict(a=torch.zeros(2), batch_size=[2]).memmap(tmp_path / "g", format="tensordict")
    with saved.unlock_(), pytest.raises(ValueError, match="key 'device' is the name of a field"):
        saved["device"] = torch.zeros(2)  # a commit that cannot be written: undone
    assert saved.get("device", None) is None
    assert TensorDict.load_memmap(tmp_path / "g").get("device", None) is None


def test_references_to_its_files_pickle_without_ids(tmp_path: Path) -> None:
    import io
    import pickle
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing  # registers torch's reductions

    t = TensorDict(a=torch.arange(3.0), batch_size=[3]).memmap(tmp_path / "t", format="tensordict")
    with t.unlock_():
        t["b"] = torch.ones(3)  # a commit: the files are those of the new tree
    buf = io.BytesIO()
    ForkingPickler(buf).dump(t)  # what DataLoader workers receive: references to the files
    back = pickle.loads(buf.getvalue())
    assert back["a"].tolist() == [0.0, 1.0, 2.0] and back["b"].tolist() == [1.0] * 3
