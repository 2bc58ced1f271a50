"""BatchLoader: order, read-time crop/flip/normalize, transforms, resume, shutdown."""

from __future__ import annotations

import re
import threading

import pytest
import torch

from tensorbox import TensorDict
from tensorbox.data import transforms as T
from tensorbox.data._dataset import ImageFolderData
from tensorbox.data._loader import BatchLoader
from tensorbox.data._read import gather_rows
from tensorbox.errors import TensorDictKeyError

N, C, H, W = 23, 3, 10, 12


def _data(n=N, h=H, w=W) -> TensorDict:
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (n, C, h, w), generator=g, dtype=torch.uint8)
    return TensorDict(
        {"images": images, "targets": torch.arange(n), "meta": {"id": torch.arange(n) * 10}},
        batch_size=[n],
    )


def _loader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("tensorbox-loader")]


def _snapshot(loader) -> list[dict]:
    """Every batch of one pass, cloned (buffers are reused)."""
    return [
        {k: v.clone() for k, v in b.items(include_nested=True, leaves_only=True)} for b in loader
    ]


# --- order and sizes ----------------------------------------------------------------------


@pytest.mark.parametrize("drop_last", [False, True])
def test_each_epoch_visits_every_row_once(drop_last):
    loader = BatchLoader(_data(), 5, seed=1, drop_last=drop_last)
    assert len(loader) == (4 if drop_last else 5)
    seen = []
    for batch in loader:
        rows = batch["targets"].tolist()
        assert rows == sorted(rows)  # sorted within a batch, for locality
        assert batch["meta", "id"].tolist() == [r * 10 for r in rows]
        seen += rows
    assert len(seen) == (20 if drop_last else N) and len(set(seen)) == len(seen)


def test_order_depends_on_seed_and_epoch_only():
    a, b = BatchLoader(_data(), 5, seed=3), BatchLoader(_data(), 5, seed=3)
    assert torch.equal(a.order(0), b.order(0))
    assert not torch.equal(a.order(0), a.order(1))
    assert not torch.equal(a.order(0), BatchLoader(_data(), 5, seed=4).order(0))
    first = [x["targets"] for x in _snapshot(a)]
    assert a.epoch == 1  # a finished pass moves to the next epoch
    a.set_epoch(0)
    assert all(torch.equal(x, y["targets"]) for x, y in zip(first, _snapshot(a)))
    ordered = BatchLoader(_data(), 5, shuffle=False)
    assert torch.cat([x["targets"] for x in _snapshot(ordered)]).tolist() == list(range(N))


# --- read-time crop, flip, normalize ------------------------------------------------------


def _windows(img: torch.Tensor, h: int, w: int):
    for t in range(img.shape[-2] - h + 1):
        for le in range(img.shape[-1] - w + 1):
            yield (t, le, False), img[:, t : t + h, le : le + w]
            yield (t, le, True), img[:, t : t + h, le : le + w].flip(-1)


def test_random_crop_and_flip_at_read_are_windows_of_the_source():
    data = _data()
    loader = BatchLoader(data, 8, seed=0, crop=(6, 7), flip=True)
    used = set()
    for _ in range(6):
        for batch in loader:
            for img, row in zip(batch["images"], batch["targets"].tolist()):
                match = [
                    key for key, win in _windows(data["images"][row], 6, 7) if torch.equal(win, img)
                ]
                assert match, f"row {row} is not a window of its source image"
                used.add(match[0])
    tops = {t for t, _, _ in used}
    flips = {f for _, _, f in used}
    assert tops == set(range(5)) and flips == {False, True}


def test_center_crop_at_read_matches_center_crop_transform():
    data = _data()
    batch = next(iter(BatchLoader(data, 8, shuffle=False, crop=(5, 8), crop_mode="center")))
    assert torch.equal(batch["images"], T.CenterCrop((5, 8))(data["images"][:8]))


def test_fused_normalize_matches_the_transform():
    data = _data()
    loader = BatchLoader(data, 8, seed=2, crop=6, flip=True, normalize="imagenet")
    plain = BatchLoader(data, 8, seed=2, crop=6, flip=True)
    for fused, raw in zip(_snapshot(loader), _snapshot(plain)):
        assert fused["images"].dtype == torch.float32
        torch.testing.assert_close(
            fused["images"], T.Normalize.imagenet()(raw["images"]), atol=2e-6, rtol=1e-6
        )


def test_transform_runs_after_crop_and_before_normalize_reproducibly():
    data = _data(h=16, w=16)
    make = lambda: BatchLoader(  # noqa: E731
        data,
        6,
        seed=5,
        crop=12,
        transform=T.Compose(T.RandomResizedCrop(8), T.ColorJitter(0.3, 0.3)),
        normalize=([0.5], [0.25]),
    )
    a, b = _snapshot(make()), _snapshot(make())
    assert a[0]["images"].shape == (6, 3, 8, 8) and a[0]["images"].dtype == torch.float32
    assert all(torch.equal(x["images"], y["images"]) for x, y in zip(a, b))


def test_plain_module_transforms_work_too():
    loader = BatchLoader(_data(), 4, transform=torch.nn.Flatten(1), seed=0)
    assert next(iter(loader))["images"].shape == (4, C * H * W)


# --- resume -------------------------------------------------------------------------------


@pytest.mark.parametrize("stop_after", [0, 2, 4])
def test_state_dict_resumes_with_the_same_batches(stop_after):
    def make():
        return BatchLoader(
            _data(h=16, w=16),
            5,
            seed=9,
            crop=10,
            flip=True,
            transform=T.RandomResizedCrop(8),
            normalize="imagenet",
        )

    full = _snapshot(make())
    loader = make()
    it = iter(loader)
    for _ in range(stop_after):
        next(it)
    state = loader.state_dict()
    it.close()
    fresh = make()
    fresh.load_state_dict(state)
    rest = _snapshot(fresh)
    assert len(rest) == len(full) - stop_after
    for got, want in zip(rest, full[stop_after:]):
        assert torch.equal(got["targets"], want["targets"]) and torch.equal(
            got["images"], want["images"]
        )
    assert fresh.state_dict()["epoch"] == 1 and fresh.state_dict()["batch"] == 0


def test_load_state_dict_refuses_a_different_setup():
    state = BatchLoader(_data(), 5, seed=0).state_dict()
    with pytest.raises(
        ValueError, match="state was saved with batch_size=5 but this loader has batch_size=4"
    ):
        BatchLoader(_data(), 4).load_state_dict(state)


# --- threads and buffers ------------------------------------------------------------------


def test_breaking_out_early_joins_the_threads():
    loader = BatchLoader(_data(), 2, num_threads=2, seed=0)
    for i, _ in enumerate(loader):
        if i == 1:
            break
    assert _loader_threads() == []
    it = iter(loader)
    next(it)
    assert _loader_threads()
    del it  # an abandoned iterator stops its threads too
    assert _loader_threads() == []
    it = iter(loader)
    next(it)
    iter(loader)  # a new pass closes the previous one
    assert len(_loader_threads()) <= 2


def test_reader_errors_reach_the_consumer_and_stop_the_threads():
    def boom(x):
        raise RuntimeError("transform failed")

    loader = BatchLoader(_data(), 4, transform=boom, seed=0)
    with pytest.raises(RuntimeError, match="transform failed") as info:
        list(loader)
    assert any("BatchLoader thread" in note for note in info.value.__notes__)
    assert _loader_threads() == []


def test_a_plain_loop_recycles_a_few_buffers():
    # Batch b is dropped when b + 1 arrives: prefetch + 1 batches in flight plus the one
    # the loop holds. Fewer distinct buffers than batches means reuse really happens.
    loader = BatchLoader(_data(), 2, shuffle=False, prefetch=1, num_threads=1)
    for _ in range(2):  # the pool outlives an epoch
        ptrs = [b["images"].data_ptr() for b in loader]
        assert len(ptrs) == 12 and len(set(ptrs)) <= 3
    fresh = BatchLoader(_data(), 2, shuffle=False, reuse_buffers=False)
    kept = list(fresh)
    assert len({b["images"].data_ptr() for b in kept}) == len(kept)
    assert torch.equal(torch.cat([b["images"] for b in kept]), _data()["images"])


_LOADER_SETTINGS = [
    {},
    {"crop": 6, "flip": True, "normalize": "imagenet"},  # fused read + normalise buffer
    {"normalize": "imagenet", "transform": T.RandomCrop(6)},  # raw buffer, then a transform
    {"num_threads": 1, "prefetch": 1},
    {"num_threads": 3, "prefetch": 5},
]


@pytest.mark.parametrize("settings", _LOADER_SETTINGS)
def test_list_of_batches_holds_every_row_once(settings):
    # Regression: buffers used to be reused by turn, so list(loader) held 4,000 rows of
    # which only 2,500 were distinct.
    data = _data()
    loader = BatchLoader(data, 2, seed=1, **settings)
    want = _snapshot(loader)  # cloned batch by batch: the reference
    for _ in range(2):  # the second pass finds the pool full of held slots
        loader.set_epoch(0)
        batches = list(loader)
        assert len(batches) == len(want) == 12
        targets = torch.cat([b["targets"] for b in batches])
        assert sorted(targets.tolist()) == list(range(N))
        for got, ref in zip(batches, want):
            assert all(torch.equal(got[k], v) for k, v in ref.items())
        assert torch.equal(torch.cat([b["meta", "id"] for b in batches]), targets * 10)
        if not settings:  # untransformed rows are the dataset's rows
            assert torch.equal(torch.cat([b["images"] for b in batches]), data["images"][targets])


def test_batches_held_across_iterations_never_change():
    loader = BatchLoader(_data(), 2, seed=0, crop=6, normalize="imagenet", prefetch=1)
    held, copies = [], []
    for epoch in range(3):
        for i, batch in enumerate(loader):
            if i % 3 == epoch:  # keep some, drop others: held and recycled slots mix
                held.append(batch)
                copies.append(batch.clone())
    it = iter(loader)
    image_view = next(it)["images"][0]  # only a view of the batch survives
    as_numpy = next(it)["targets"].numpy()  # only a numpy array does
    view_copy, numpy_copy = image_view.clone(), as_numpy.copy()
    for _ in it:
        pass
    list(loader)
    for got, ref in zip(held, copies, strict=True):
        assert (got == ref).all()
    assert torch.equal(image_view, view_copy) and (as_numpy == numpy_copy).all()


def test_output_keeps_the_dataset_class():
    data = ImageFolderData(
        images=_data()["images"], targets=torch.arange(N), classes=["a"], batch_size=[N]
    )
    batch = next(iter(BatchLoader(data, 4, crop=8, seed=0)))
    assert (
        type(batch) is ImageFolderData
        and batch.classes == ["a"]
        and batch.images.shape == (4, 3, 8, 8)
    )


def test_gather_rows_equals_index_select():
    src = torch.randn(40, 3, 32, 32)
    idx = torch.tensor([0, 1, 2, 9, 20, 21, 39])
    out = torch.empty(7, 3, 32, 32)
    assert torch.equal(gather_rows(src, idx, out), src[idx]) and gather_rows(src, idx, out) is out
    small = torch.arange(40)
    assert torch.equal(gather_rows(small, idx, torch.empty(7, dtype=torch.long)), small[idx])
    bf16 = torch.randn(40, 5).to(torch.bfloat16)  # no numpy dtype: the torch path
    assert torch.equal(gather_rows(bf16, idx, torch.empty(7, 5, dtype=torch.bfloat16)), bf16[idx])


# --- argument checks ----------------------------------------------------------------------


def test_loader_checks_its_arguments():
    with pytest.raises(ValueError, match="batch_size must be a positive int, got 0"):
        BatchLoader(_data(), 0)
    with pytest.raises(ValueError, match="crop_mode must be 'random' or 'center', got 'middle'"):
        BatchLoader(_data(), 4, crop_mode="middle")
    with pytest.raises(
        ValueError, match=r"flip must be a bool or a probability in \[0, 1\], got 2"
    ):
        BatchLoader(_data(), 4, flip=2)
    with pytest.raises(ValueError, match=r"crop \(11, 11\) is larger than the images \(10, 12\)"):
        BatchLoader(_data(), 4, crop=11)
    with pytest.raises(KeyError, match=r"image_key \('pixels',\) is not a tensor leaf"):
        BatchLoader(_data(), 4, crop=4, image_key="pixels")
    for bad in (3, ("meta", 3), ()):
        with pytest.raises(
            TensorDictKeyError, match=rf"key {re.escape(repr(bad))} is not a key: expected a str"
        ):
            BatchLoader(_data(), 4, image_key=bad)
    nested = TensorDict({"obs": {"pixels": _data()["images"]}}, batch_size=[N])
    first = next(iter(BatchLoader(nested, 4, image_key=("obs", ("pixels",)), crop=4)))
    assert first["obs", "pixels"].shape == (4, 3, 4, 4)
    with pytest.raises(
        ValueError, match="normalize must be None, 'imagenet', \\(mean, std\\) or a Normalize"
    ):
        BatchLoader(_data(), 4, normalize="cifar")
    with pytest.raises(
        TypeError, match="expected a TensorDict or a tensorclass instance, got Tensor"
    ):
        BatchLoader(torch.zeros(3), 4)
    with pytest.raises(ValueError, match="num_threads must be >= 1, got 0"):
        BatchLoader(_data(), 4, num_threads=0)
