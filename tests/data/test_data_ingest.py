"""Image folder scan, decode and ingestion (tensorbox.data._folder/_decode/_ingest)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from benchmarks.harness.reference import reference_transform
from tensorbox.data import _ingest, make_image_folder
from tensorbox.data._dataset import ImageFolderData
from tensorbox.data._decode import ResizeSpec, decode_image
from tensorbox.data._folder import scan_image_folder
from tensorbox.data._ingest import ImageReadError, ingest_image_folder
from tensorbox.data._synth import synth_image
from tensorbox.errors import IncompleteTreeError

# Heavy: decodes in process pools. The quick loop (`make check`) leaves the module out without
# importing it (tests/conftest.py reads the line below from the source).
pytestmark = pytest.mark.heavy


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """10 small images in 3 classes: JPEGs, a PNG and a grayscale JPEG among them."""
    root = tmp_path_factory.mktemp("synth") / "imgs"
    return make_image_folder(
        root, num_images=10, num_classes=3, min_size=40, max_size=72, num_workers=0
    )


def _reference_rows(root: Path, kind: str, size: int, resize: int) -> torch.Tensor:
    """What the per-image torchvision-style pipeline gives, image by image."""
    t = reference_transform(kind, size=size, resize=resize)
    paths = scan_image_folder(root).paths
    return torch.stack([t(Image.open(p).convert("RGB")).contiguous() for p in paths])


# --- scan ---------------------------------------------------------------------------------


def test_scan_orders_like_image_folder_and_reports_problems(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist or is not a folder"):
        scan_image_folder(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="has no class sub-folder"):
        scan_image_folder(tmp_path)
    (tmp_path / "b").mkdir()
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.png").touch()
    with pytest.raises(FileNotFoundError, match=r"class folder\(s\) \['b'\] under .* hold no file"):
        scan_image_folder(tmp_path)
    (tmp_path / "b" / "y.JPEG").touch()
    idx = scan_image_folder(tmp_path)
    assert idx.classes == ["a", "b"] and idx.targets == [0, 1] and len(idx) == 2


# --- decode -------------------------------------------------------------------------------


def test_png_rows_equal_the_per_image_pipeline(tmp_path):
    img = synth_image(0, 1, 0, 70, 50)
    (tmp_path / "c").mkdir()
    img.save(tmp_path / "c" / "a.png")
    img.convert("L").save(tmp_path / "c" / "b.png")
    img.convert("P").save(tmp_path / "c" / "c.png")
    paths = scan_image_folder(tmp_path).paths
    squash = torch.stack([torch.from_numpy(decode_image(p, ResizeSpec((32, 32)))) for p in paths])
    assert torch.equal(squash, _reference_rows(tmp_path, "ingest", 32, 32))
    val = torch.stack([torch.from_numpy(decode_image(p, ResizeSpec((24, 24), 30))) for p in paths])
    assert torch.equal(val, _reference_rows(tmp_path, "val_ingest", 24, 30))


def test_jpeg_draft_decoding_stays_within_tolerance(tmp_path):
    path = tmp_path / "big.jpg"
    synth_image(0, 2, 1, 300, 240).save(path, quality=90)
    exact = decode_image(path, ResizeSpec((64, 64), draft=False)).astype(np.int16)
    ref = _reference_rows_one(path, 64)
    assert np.array_equal(exact, ref)  # without draft: what torchvision's pipeline gives
    fast = decode_image(path, ResizeSpec((64, 64))).astype(np.int16)
    diff = np.abs(fast - exact)
    # Stated tolerance of reduced-scale (DCT) decoding: mean error <= 3 grey levels.
    assert 0 < diff.mean() <= 3.0


def _reference_rows_one(path: Path, size: int) -> np.ndarray:
    t = reference_transform("ingest", resize=size)
    return t(Image.open(path).convert("RGB")).contiguous().numpy().astype(np.int16)


def test_resize_spec_checks_sizes():
    with pytest.raises(
        ValueError, match=r"shorter_side=20 is smaller than the crop size \(24, 24\)"
    ):
        ResizeSpec((24, 24), 20)
    with pytest.raises(ValueError, match=r"size must be positive \(H, W\), got \(0, 4\)"):
        ResizeSpec((0, 4))


# --- ingestion ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "workers,context",
    # spawn costs a torch import per worker (~5 s here); fork covers the same code.
    [(0, None), (2, "fork"), pytest.param(2, "spawn", marks=pytest.mark.slow)],
)
def test_ingest_writes_the_reference_rows(folder, tmp_path, workers, context):
    data = ingest_image_folder(
        folder,
        tmp_path / "ds",
        32,
        num_workers=workers,
        mp_context=context,
        draft=False,
        chunk_size=3,
    )
    assert isinstance(data, ImageFolderData)
    assert data.images.shape == (10, 3, 32, 32) and data.images.dtype == torch.uint8
    assert torch.equal(data.images, _reference_rows(folder, "ingest", 32, 32))
    assert data.targets.tolist() == scan_image_folder(folder).targets
    assert data.classes == ["class_00", "class_01", "class_02"]
    assert not (tmp_path / "ds" / _ingest.PROGRESS).exists()
    again = ImageFolderData.load_memmap(tmp_path / "ds")
    assert torch.equal(again.images, data.images)


def test_ingest_validation_geometry(folder, tmp_path):
    data = ingest_image_folder(
        folder, tmp_path / "val", 24, shorter_side=32, num_workers=0, draft=False
    )
    assert torch.equal(data.images, _reference_rows(folder, "val_ingest", 24, 32))


def _corrupt_copy(folder: Path, tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "src"
    shutil.copytree(folder, root)
    victim = Path(scan_image_folder(root).paths[4])
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 3])  # truncated: Pillow refuses to finish it
    return root, victim


def test_corrupt_image_raises_with_its_path_then_resumes(folder, tmp_path):
    root, victim = _corrupt_copy(folder, tmp_path)
    dest = tmp_path / "ds"
    with pytest.raises(
        ImageReadError, match=rf"could not read image '{victim}'.*row 4 of 10"
    ) as info:
        ingest_image_folder(root, dest, 32, num_workers=0, chunk_size=2, draft=False)
    assert info.value.path == str(victim)
    with pytest.raises(IncompleteTreeError):
        ImageFolderData.load_memmap(dest)  # never a half-filled dataset
    shutil.copy(folder / victim.relative_to(root), victim)  # repair the file, resume
    data = ingest_image_folder(root, dest, 32, num_workers=0, chunk_size=2, draft=False)
    assert torch.equal(data.images, _reference_rows(folder, "ingest", 32, 32))


def test_skipped_images_are_reported_and_left_out(folder, tmp_path):
    root, victim = _corrupt_copy(folder, tmp_path)
    with pytest.warns(
        UserWarning, match=rf"(?s)skipped 1 unreadable image\(s\) of 10.*{victim.name}"
    ):
        data = ingest_image_folder(
            root, tmp_path / "ds", 32, num_workers=2, on_error="skip", chunk_size=3, draft=False
        )
    ref = _reference_rows(folder, "ingest", 32, 32)
    keep = [i for i in range(10) if i != 4]
    assert torch.equal(data.images, ref[keep])  # rows after the bad one moved up, none zeroed
    assert data.targets.tolist() == [scan_image_folder(root).targets[i] for i in keep]
    assert (tmp_path / "ds" / "images.memmap").stat().st_size == 9 * 3 * 32 * 32


def test_a_folder_without_any_readable_image_is_an_error(tmp_path, caplog):
    (tmp_path / "src" / "a").mkdir(parents=True)
    for name in ("x.jpg", "y.png"):
        (tmp_path / "src" / "a" / name).write_bytes(b"not an image")
    with (
        caplog.at_level("WARNING", logger="tensorbox"),
        pytest.warns(UserWarning, match="skipped 2 unreadable"),
        pytest.raises(ValueError, match=r"no image under .* could be read \(2 tried"),
    ):
        ingest_image_folder(tmp_path / "src", tmp_path / "ds", 16, num_workers=0, on_error="skip")
    # the same report reaches the log, for runs whose record is a log file
    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["ingest_image_folder"]
    assert "skipped 2 unreadable image(s)" in caplog.records[0].getMessage()


def test_on_error_callable_decides(folder, tmp_path):
    root, victim = _corrupt_copy(folder, tmp_path)
    seen = []
    data = ingest_image_folder(
        root, tmp_path / "ds", 16, num_workers=0, on_error=lambda p, why: seen.append((p, why))
    )
    assert len(data) == 9 and seen[0][0] == str(victim) and "OSError" in seen[0][1]

    def stop(path, why):
        raise RuntimeError(f"refusing {path}")

    with pytest.raises(RuntimeError, match="refusing"):
        ingest_image_folder(root, tmp_path / "ds2", 16, num_workers=0, on_error=stop)


def test_interrupted_ingestion_resumes_where_it_stopped(folder, tmp_path, monkeypatch):
    dest = tmp_path / "ds"
    calls = []
    real = _ingest._decode_chunk

    def flaky(task):
        calls.append(task[0])
        if task[0] == 2 and len(calls) == 3:
            raise KeyboardInterrupt  # as if Ctrl-C arrived during the third chunk
        return real(task)

    monkeypatch.setattr(_ingest, "_decode_chunk", flaky)
    with pytest.raises(KeyboardInterrupt):
        ingest_image_folder(folder, dest, 32, num_workers=0, chunk_size=2, draft=False)
    assert [json.loads(x)["chunk"] for x in (dest / _ingest.PROGRESS).read_text().splitlines()] == [
        0,
        1,
    ]
    calls.clear()
    data = ingest_image_folder(folder, dest, 32, num_workers=0, chunk_size=2, draft=False)
    assert calls == [2, 3, 4]  # finished chunks were not decoded again
    assert torch.equal(data.images, _reference_rows(folder, "ingest", 32, 32))


def test_destination_rules(folder, tmp_path):
    dest = tmp_path / "ds"
    ingest_image_folder(folder, dest, 16, num_workers=0)
    with pytest.raises(FileExistsError, match="already holds a complete tree"):
        ingest_image_folder(folder, dest, 16, num_workers=0)
    assert len(ingest_image_folder(folder, dest, 8, num_workers=0, overwrite=True)) == 10
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="exists and is not an unfinished ingestion"):
        ingest_image_folder(folder, other, 16, num_workers=0)
    partial = tmp_path / "partial"
    (partial).mkdir()
    (partial / _ingest.MANIFEST).write_text(json.dumps({"size": [1, 1]}))
    with pytest.raises(
        FileExistsError, match=r"unfinished ingestion with different arguments.*'chunk_size'"
    ):
        ingest_image_folder(folder, partial, 16, num_workers=0)


def test_ingest_checks_its_arguments(folder, tmp_path):
    with pytest.raises(
        ValueError, match="on_error must be 'raise', 'skip' or a callable, got 'ignore'"
    ):
        ingest_image_folder(folder, tmp_path / "x", 16, on_error="ignore")
    with pytest.raises(ValueError, match="chunk_size must be >= 1, got 0"):
        ingest_image_folder(folder, tmp_path / "x", 16, chunk_size=0)


def test_synthetic_folder_is_cached_and_checked(tmp_path):
    root = make_image_folder(
        tmp_path / "s", num_images=3, num_classes=1, min_size=20, max_size=24, num_workers=0
    )
    stamp = (root / "class_00" / "00000.jpg").stat().st_mtime_ns
    assert make_image_folder(root, num_images=3, num_classes=1, min_size=20, max_size=24) == root
    assert (root / "class_00" / "00000.jpg").stat().st_mtime_ns == stamp
    with pytest.raises(FileExistsError, match="made with other parameters"):
        make_image_folder(root, num_images=4, num_classes=1, min_size=20, max_size=24)
    with pytest.raises(ValueError, match="sizes must satisfy 8 <= min_size <= max_size"):
        make_image_folder(tmp_path / "t", min_size=30, max_size=20)
