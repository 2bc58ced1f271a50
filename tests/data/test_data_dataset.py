"""TensorDicts and tensorclasses as map-style datasets for torch's DataLoader.

The core provides ``__getitems__`` and the collate registration; these tests check the
user-facing promise: no ``collate_fn``, batches of the user's class, and worker processes
(fork and spawn) that open the same files by name instead of receiving a copy.
"""

from __future__ import annotations

import pickle

import pytest
import torch
from torch.utils.data import DataLoader, get_worker_info

from tensorbox import TensorDict
from tensorbox.data._dataset import ImageFolderData

N = 64


def _images(n: int = N) -> torch.Tensor:
    return (
        torch.arange(n * 3 * 16 * 16, dtype=torch.int64)
        .remainder(251)
        .to(torch.uint8)
        .view(n, 3, 16, 16)
    )


@pytest.fixture
def saved(tmp_path) -> tuple[ImageFolderData, str]:
    data = ImageFolderData(
        images=_images(), targets=torch.arange(N), classes=["a", "b"], batch_size=[N]
    )
    path = str(tmp_path / "ds")
    data.memmap(path)
    return ImageFolderData.load_memmap(path), path


def _rows(batches) -> list[int]:
    return [r for b in batches for r in b.targets.tolist()]


def test_in_memory_tensordict_batches_with_one_fetch_per_batch(monkeypatch):
    td = TensorDict({"x": torch.arange(N).float(), "y": {"z": torch.arange(N)}}, batch_size=[N])
    calls = []
    real = TensorDict.__getitems__

    def counting(self, indices):
        calls.append(len(indices))
        return real(self, indices)

    monkeypatch.setattr(TensorDict, "__getitems__", counting)
    batches = list(DataLoader(td, batch_size=10, shuffle=True))
    assert calls == [10] * 6 + [4]  # one batched fetch per batch, no per-sample __getitem__
    assert all(type(b) is TensorDict for b in batches)
    rows = sorted(int(v) for b in batches for v in b["y", "z"])
    assert rows == list(range(N))
    assert all(torch.equal(b["x"], b["y", "z"].float()) for b in batches)


def test_memmapped_tensorclass_yields_its_class(saved):
    data, _ = saved
    batches = list(DataLoader(data, batch_size=16, shuffle=True))
    assert all(type(b) is ImageFolderData and b.batch_size == (16,) for b in batches)
    assert batches[0].classes == ["a", "b"]
    assert sorted(_rows(batches)) == list(range(N))
    for b in batches:
        assert torch.equal(b.images, _images()[b.targets])


def test_pickling_a_memmapped_dataset_sends_file_names_not_data(saved):
    data, path = saved
    blob = pickle.dumps(data)
    assert data.images.numel() == N * 3 * 16 * 16  # 48 KiB of pixels...
    assert len(blob) < 4096  # ...travel as a file reference of a few hundred bytes
    assert path.encode() in blob
    again = pickle.loads(blob)
    assert again.images.untyped_storage().filename == data.images.untyped_storage().filename
    assert torch.equal(again.images, data.images)


def _check_worker_maps_the_file(worker_id: int) -> None:
    """worker_init_fn: the worker's copy of the dataset is a mapping of the same file."""
    ds = get_worker_info().dataset
    name = ds.images.untyped_storage().filename
    expected = ds.classes[-1]  # the test stores the expected file name there
    if name != expected:
        raise AssertionError(f"worker {worker_id} reads {name!r}, expected {expected!r}")


@pytest.mark.heavy
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_workers_open_the_same_files_by_name(tmp_path, context):
    data = ImageFolderData(images=_images(), targets=torch.arange(N), classes=["a"], batch_size=[N])
    path = tmp_path / "ds"
    data.memmap(path)
    loaded = ImageFolderData.load_memmap(path)
    filename = loaded.images.untyped_storage().filename
    loaded = ImageFolderData(
        images=loaded.images, targets=loaded.targets, classes=[filename], batch_size=[N]
    )
    loader = DataLoader(
        loaded,
        batch_size=8,
        shuffle=True,
        # One spawned worker proves the by-name reopening as well as two, at half the
        # start-up cost (each spawned worker imports torch and this module again).
        num_workers=2 if context == "fork" else 1,
        multiprocessing_context=context,
        worker_init_fn=_check_worker_maps_the_file,
    )
    batches = list(loader)
    assert all(type(b) is ImageFolderData for b in batches)
    assert sorted(_rows(batches)) == list(range(N))
    for b in batches:
        assert torch.equal(b.images, _images()[b.targets])
