"""What tensordict's own guides do, with only the import changed (small data).

The batched-loading tutorial (a tensorclass of memory-mapped images filled batch by
batch, then read through a DataLoader with a collate module) and the saving guide
(a stacked tree holding a tensorclass with a ``data`` field, ``TensorDictBase``,
``print_directory_tree``, a million-row ``memmap_like``, ``state_dict`` of a
tensorclass). The code is written here from the guides' calls, on synthetic images.
``tests/compat/test_guides_differential.py`` runs the guides and their variations with
tensordict as the oracle, comparing the results.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from tensorbox import MemoryMappedTensor, TensorDict, TensorDictBase, tensorclass
from tensorbox.utils import print_directory_tree, strtobool


class _Photos(Dataset[tuple[torch.Tensor, int]]):
    """Stands for ``ImageFolder(..., transform=PILToTensor())``: uint8 images, labels."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        g = torch.Generator().manual_seed(i)
        return torch.randint(0, 256, (3, 16, 16), generator=g, dtype=torch.uint8), i % 2


@tensorclass
class Images:
    images: torch.Tensor
    targets: torch.Tensor

    @classmethod
    def from_dataset(cls, dataset: _Photos, batch: int = 4) -> Images:
        first = dataset[0][0]
        data = cls(
            images=MemoryMappedTensor.empty((len(dataset), *first.shape), dtype=torch.uint8),
            targets=MemoryMappedTensor.empty((len(dataset),), dtype=torch.int64),
            batch_size=[len(dataset)],
        )
        data.memmap_()  # locks it, and is_memmap() is True
        i = 0
        for image, target in DataLoader(dataset, batch_size=batch):
            n = image.shape[0]
            data[i : i + n] = cls(images=image, targets=target, batch_size=[n])
            i += n
        return data


class _Collate(nn.Module):
    def __init__(self, transform: nn.Module | None = None, device: str = "cpu") -> None:
        super().__init__()
        self.transform = transform
        self.device = torch.device(device)

    def __call__(self, x: Images) -> Images:
        out = x.pin_memory() if self.device.type == "cuda" else x
        out = out.to(self.device)
        if self.transform is not None:
            out.images = self.transform(out.images)
        return out


class _Flip(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flip(-1)


def test_the_batched_loading_tutorial_runs() -> None:
    assert strtobool(os.environ.get("RUN_ON_CLUSTER", "False")) == 0
    photos = _Photos(10)
    data = Images.from_dataset(photos)
    assert data.is_memmap() and data.is_locked
    assert torch.equal(data.images[7], photos[7][0]) and data.targets[7].item() == 1
    loader = DataLoader(data, batch_size=4, collate_fn=_Collate(_Flip()))
    batches = list(loader)
    assert [b.batch_size[0] for b in batches] == [4, 4, 2]
    assert torch.equal(batches[1].images[0], photos[4][0].flip(-1))


def test_strtobool_refuses_what_is_not_a_truth_value() -> None:
    assert [strtobool(v) for v in ("y", "ON", "1", "no", "F", "0")] == [1, 1, 1, 0, 0, 0]
    with pytest.raises(ValueError, match=r"strtobool: 'maybe' is not a truth value"):
        strtobool("maybe")


@tensorclass
class Record:
    data: torch.Tensor
    metadata: str


def test_the_saving_guide_stacked_tree(capsys: pytest.CaptureFixture[str]) -> None:
    td_list = [TensorDict({"item": i}, batch_size=[]) for i in range(4)]
    tc = Record(torch.randn(3), metadata="some text", batch_size=[])
    assert torch.equal(tc.data, tc.to_tensordict()["data"])  # the field, not leaves' .data
    data = TensorDict({"td_list": torch.stack(td_list), "tensorclass": tc}, [])
    with tempfile.TemporaryDirectory() as tempdir:
        data.memmap_(tempdir)
        loaded = TensorDictBase.load_memmap(tempdir)
        assert type(loaded) is TensorDict and isinstance(loaded, TensorDictBase)
        assert (loaded == data).all()
        text = print_directory_tree(tempdir)
    assert "Directory size:" in text and "    tensorclass/" in text
    assert capsys.readouterr().out.strip() == text
    assert not isinstance(tc, TensorDictBase)


def test_the_saving_guide_million_rows_take_no_disk(tmp_path: Path) -> None:
    datum = TensorDict({"image": torch.randint(255, (3, 64, 64)), "label": 0}, batch_size=[])
    data_disk = datum.expand(1_000_000).memmap_like(tmp_path / "data")
    data_disk[3] = datum
    image = tmp_path / "data" / "image.memmap"
    assert os.path.getsize(image) == 1_000_000 * 3 * 64 * 64 * 8
    assert os.stat(image).st_blocks * 512 < 64 << 20  # sparse: the one row written
    assert torch.equal(TensorDict.load_memmap(tmp_path / "data")["image"][3], datum["image"])


def test_the_saving_guide_state_dicts() -> None:
    td = TensorDict({"a": 1, "b": {"c": 2}}, [])
    sd = td.state_dict()
    assert list(sd) == ["a", "b.c"]
    td_zero = td.clone().zero_()
    td_zero.load_state_dict(sd)
    assert (td_zero == td).all()

    @tensorclass
    class Labeled:
        x: torch.Tensor
        label: str

    tc = Labeled(x=torch.randn(3), label="hello", batch_size=[])
    assert list(tc.state_dict()) == ["x"]
    tc.load_state_dict({"x": torch.ones(3)})
    assert tc.x.tolist() == [1.0, 1.0, 1.0]


def test_load_memmap_of_nothing_is_file_not_found(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"no saved tree at .*empty.*the folder is empty"):
        TensorDict.load_memmap(tmp_path / "empty")
    with pytest.raises(FileNotFoundError, match=r"no saved tree at .*missing"):
        TensorDictBase.load_memmap(tmp_path / "missing")
    with pytest.raises(TypeError, match=r"TensorDictBase is abstract"):
        TensorDictBase()


@pytest.mark.heavy
def test_tensordict_submodules_switch_by_the_package_name() -> None:
    """``from tensordict.X import Y`` becomes ``from tensorbox.X import Y`` for the
    submodules users import from; ``tensorbox.tensorclass`` stays the decorator."""
    import subprocess
    import sys

    code = (
        "import tensorbox\n"
        "from tensorbox.tensordict import TensorDict as A, TensorDictBase\n"
        "from tensorbox.base import TensorDictBase as B, is_tensor_collection\n"
        "from tensorbox.tensorclass import NonTensorData, TensorClass, tensorclass\n"
        "from tensorbox.memmap import MemoryMappedTensor as M\n"
        "from tensorbox.persistent import PersistentTensorDict as P\n"
        "from tensorbox.store import TensorDictStore as S\n"
        "from tensorbox.tensordict import stack\n"  # any public name, forwarded
        "import sys\n"
        "assert A is tensorbox.TensorDict and B is TensorDictBase is tensorbox.TensorDictBase\n"
        "assert M is tensorbox.MemoryMappedTensor and P is tensorbox.PersistentTensorDict\n"
        "assert S is tensorbox.TensorDictStore\n"
        "assert tensorbox.tensorclass is tensorclass and callable(tensorclass)\n"
        "assert stack is tensorbox.stack\n"
        "assert not {'h5py', 'zarr', 'pyarrow', 'redis'} & set(sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    import tensorbox.base

    with pytest.raises(AttributeError, match="has no attribute '_private'"):
        tensorbox.base._private  # noqa: B018
