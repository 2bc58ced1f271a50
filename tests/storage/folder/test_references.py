"""References that survive rewrites: an archive rewritten in place is refused, not read
wrong; a tensor whose tree was saved over crosses processes with its bytes (pickle,
``ForkingPickler``, ``torch.multiprocessing`` queues, DataLoader workers)."""

from __future__ import annotations

import io
import os
import pickle
import shutil
from multiprocessing.reduction import ForkingPickler
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as tmp_mp
from torch.utils.data import DataLoader, Dataset

from tensorbox import FormatError, TensorDict
from tensorbox._storage.fileref import FileRef, shareable


def _archive(path: Path, v: float, n: int = 4) -> TensorDict:
    return TensorDict({"a": torch.full((n,), v), "b": torch.arange(n)}, [n]).memmap(
        path, archive=True
    )


def test_an_archive_rewritten_in_place_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "m.tbx"
    td = _archive(path, 1.0)
    ref = pickle.dumps(td["a"])
    assert pickle.loads(ref).tolist() == [1.0] * 4
    inode = path.stat().st_ino
    _archive(tmp_path / "other.tbx", 2.0)
    with open(tmp_path / "other.tbx", "rb") as src, open(path, "r+b") as dst:
        shutil.copyfileobj(src, dst)  # cp: same inode, other bytes
    assert path.stat().st_ino == inode
    with pytest.raises(FormatError, match=r"m\.tbx was rewritten in place after a tensor"):
        pickle.loads(ref)


def test_a_shrunk_archive_is_refused_before_mapping(tmp_path: Path) -> None:
    path = tmp_path / "m.tbx"
    td = _archive(path, 1.0, 4096)
    ref = shareable(td["a"])
    assert type(ref) is FileRef and ref.stamp is not None
    os.truncate(path, 100)  # the live mapping `td` would SIGBUS if read now: not read
    with pytest.raises(FormatError, match=r"m\.tbx was rewritten in place"):
        ref.open()


def _forking_round_trip(t: torch.Tensor) -> torch.Tensor:
    buf = io.BytesIO()
    ForkingPickler(buf, pickle.HIGHEST_PROTOCOL).dump(t)
    return pickle.loads(buf.getvalue())


@pytest.mark.parametrize("archive", [False, True])
def test_a_tensor_whose_tree_was_saved_over_pickles_with_its_bytes(
    tmp_path: Path, archive: bool
) -> None:
    root = tmp_path / ("t.tbx" if archive else "t")
    old = TensorDict({"a": torch.arange(4.0)}, [4]).memmap(root, archive=archive)
    TensorDict({"a": torch.zeros(4)}, [4]).memmap(root, archive=archive)  # saved over
    for t in (old["a"], old["a"][1:], old["a"].as_subclass(torch.Tensor)):
        want = t.tolist()
        assert pickle.loads(pickle.dumps(t)).tolist() == want
        assert _forking_round_trip(t).tolist() == want  # was: OSError EBADF
    assert pickle.loads(pickle.dumps(old))["a"].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_a_queue_carries_a_tensor_whose_tree_was_saved_over(tmp_path: Path) -> None:
    root = tmp_path / "t"
    old = TensorDict({"a": torch.arange(4.0)}, [4]).memmap(root)
    TensorDict({"a": torch.zeros(4)}, [4]).memmap(root)
    ctx = tmp_mp.get_context("spawn")
    q = ctx.Queue()
    q.put(old["a"][1:])  # pickled by the feeder thread: it used to die, the item lost
    assert q.get(timeout=60).tolist() == [1.0, 2.0, 3.0]
    q.close()
    q.join_thread()


class _Rows(Dataset):  # type: ignore[type-arg]
    def __init__(self, td: TensorDict) -> None:
        self.td = td

    def __len__(self) -> int:
        return self.td.batch_size[0]

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.td["a"][i : i + 1]  # a view of the mapping


@pytest.mark.parametrize("context", ["fork", pytest.param("spawn", marks=pytest.mark.heavy)])
def test_dataloader_workers_start_after_the_tree_was_saved_over(
    tmp_path: Path, context: str
) -> None:
    root = tmp_path / "t"
    old = TensorDict({"a": torch.arange(4.0)}, [4]).memmap(root)
    TensorDict({"a": torch.zeros(4)}, [4]).memmap(root)
    loader = DataLoader(_Rows(old), batch_size=None, num_workers=2, multiprocessing_context=context)
    got = sorted(float(x) for batch in loader for x in batch)
    assert got == [0.0, 1.0, 2.0, 3.0]


def test_r_plus_on_a_file_the_process_may_not_write_raises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tensorbox._storage import memmap_tensor as mt

    root = tmp_path / "t"
    TensorDict({"a": torch.arange(3.0)}, [3]).memmap(root)
    real = mt._from_file

    def refuse_shared(path: str, shared: bool, nbytes: int) -> object:
        if shared:  # what a file without write permission gives a non-root process
            raise RuntimeError("Permission denied")
        return real(path, shared, nbytes)

    monkeypatch.setattr(mt, "_from_file", refuse_shared)
    monkeypatch.setattr(mt.os, "access", lambda path, how: False)
    with pytest.raises(
        PermissionError, match=r"t/a\.memmap is not writable: open it with mode='r'"
    ):
        TensorDict.load_memmap(root, mode="r+")
    assert TensorDict.load_memmap(root)["a"].tolist() == [0.0, 1.0, 2.0]  # default: falls back
    assert TensorDict.load_memmap(root, mode="r")["a"].tolist() == [0.0, 1.0, 2.0]
