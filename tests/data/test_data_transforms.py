"""Batched transforms against per-image references (tensorbox.data.transforms)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from benchmarks.harness.reference import sample_resized_crop_box
from tensorbox.data import transforms as T

MEAN, STD = T.IMAGENET_MEAN, T.IMAGENET_STD


def _images(b=6, c=3, h=20, w=24, dtype=torch.uint8, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (b, c, h, w), generator=g, dtype=torch.uint8)
    return x if dtype == torch.uint8 else x.to(dtype) / 255


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


# --- Normalize ---------------------------------------------------------------------------


def test_normalize_uint8_matches_to_tensor_then_normalize():
    x = _images()
    ref = torch.stack(
        [
            (img.float() / 255 - torch.tensor(MEAN).view(3, 1, 1)) / torch.tensor(STD).view(3, 1, 1)
            for img in x
        ]
    )
    out = T.Normalize.imagenet()(x)
    assert out.dtype == torch.float32
    # The fused affine map rounds differently from three separate steps: a few ulps.
    torch.testing.assert_close(out, ref, atol=2e-6, rtol=1e-6)


def test_normalize_float_input_and_dtype():
    x = _images(dtype=torch.float32)
    ref = (x - torch.tensor(MEAN).view(3, 1, 1)) / torch.tensor(STD).view(3, 1, 1)
    torch.testing.assert_close(T.Normalize(MEAN, STD)(x), ref)
    half = T.Normalize(MEAN, STD, dtype=torch.float16)(_images())
    assert half.dtype == torch.float16


def test_normalize_writes_into_out_buffer_and_checks_it():
    x = _images()
    buf = torch.empty(x.shape)
    out = T.Normalize.imagenet()(x, out=buf)
    assert out.data_ptr() == buf.data_ptr()
    with pytest.raises(ValueError, match=r"out= must have shape \(6, 3, 20, 24\)"):
        T.Normalize.imagenet()(x, out=torch.empty(2, 3, 20, 24))


def test_normalize_rejects_bad_arguments():
    with pytest.raises(ValueError, match="mean and std must be non-empty and of equal length"):
        T.Normalize([0.5, 0.5], [0.2])
    with pytest.raises(ValueError, match=r"std must be positive, got \[0.0\]"):
        T.Normalize([0.5], [0.0])
    with pytest.raises(ValueError, match="dtype must be a floating dtype"):
        T.Normalize([0.5], [0.5], dtype=torch.int32)
    with pytest.raises(ValueError, match="3 channel statistics but the batch has 1 channels"):
        T.Normalize.imagenet()(_images(c=1))
    with pytest.raises(
        ValueError, match=r"expects a uint8 or floating batch, got dtype torch\.int64"
    ):
        T.Normalize.imagenet()(_images().long())


# --- crops and flips ---------------------------------------------------------------------


def test_random_crop_matches_per_image_crop_with_same_offsets():
    x = _images(h=20, w=24)
    crop = T.RandomCrop((12, 16))
    top, left = crop.sample_offsets(len(x), 20, 24, _gen(3))
    out = crop(x, generator=_gen(3))
    ref = torch.stack(
        [img[:, t : t + 12, le : le + 16] for img, t, le in zip(x, top.tolist(), left.tolist())]
    )
    assert torch.equal(out, ref)
    assert int(top.max()) <= 8 and int(left.max()) <= 8


def test_random_crop_offsets_cover_every_position():
    top, left = T.RandomCrop(4).sample_offsets(4000, 6, 7, _gen(0))
    assert sorted(set(top.tolist())) == [0, 1, 2]
    assert sorted(set(left.tolist())) == [0, 1, 2, 3]


def test_crop_batch_copy_and_gather_agree():
    x = _images(dtype=torch.float32)
    top, left = torch.tensor([0, 3, 1, 8, 2, 5]), torch.tensor([4, 0, 8, 1, 2, 7])
    a = T.crop_batch(x, top, left, (12, 16), method="copy")
    b = T.crop_batch(x, top, left, (12, 16), method="gather")
    assert torch.equal(a, b)


def test_center_crop_is_a_view_with_torchvision_rounding():
    x = _images(h=21, w=24)
    out = T.CenterCrop((10, 11))(x)
    # torchvision: top = round((21 - 10) / 2) = round(5.5) = 6, left = round(6.5) = 6.
    assert torch.equal(out, x[:, :, 6:16, 6:17])
    assert out.data_ptr() == x[:, :, 6:, 6:].data_ptr()


def test_crops_refuse_images_smaller_than_the_crop():
    with pytest.raises(
        ValueError, match=r"RandomCrop size \(30, 30\) is larger than the images \(20, 24\)"
    ):
        T.RandomCrop(30)(_images())
    with pytest.raises(ValueError, match=r"CenterCrop size \(21, 5\) is larger than the images"):
        T.CenterCrop((21, 5))(_images())
    with pytest.raises(
        ValueError,
        match=r"RandomCrop size must be a positive int or \(height, width\), got \(0, 3\)",
    ):
        T.RandomCrop((0, 3))


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_flip_matches_per_image_flip_with_same_mask(dtype):
    x = _images(b=16, dtype=dtype)
    flip = T.RandomHorizontalFlip()
    mask = flip.sample_mask(16, _gen(5))
    out = flip(x, generator=_gen(5))
    ref = torch.stack([img.flip(-1) if m else img for img, m in zip(x, mask.tolist())])
    assert torch.equal(out, ref)
    assert 0 < int(mask.sum()) < 16
    assert torch.equal(T.RandomHorizontalFlip(p=0.0)(x), x)
    assert torch.equal(T.RandomHorizontalFlip(p=1.0)(x), x.flip(-1))
    with pytest.raises(ValueError, match=r"p must be in \[0, 1\], got 1.5"):
        T.RandomHorizontalFlip(p=1.5)


# --- RandomResizedCrop -------------------------------------------------------------------


def test_resized_crop_boxes_are_valid_and_follow_the_distribution():
    boxes = T.sample_resized_crop_boxes(5000, 40, 60, generator=_gen(0))
    top, left, h, w = boxes.unbind(1)
    assert bool(((h > 0) & (w > 0) & (top >= 0) & (left >= 0)).all())
    assert bool(((top + h <= 40) & (left + w <= 60)).all())
    frac = (h * w).double() / (40 * 60)
    assert float(frac.min()) > 0.07 and float(frac.max()) <= 1.0
    # Same distribution as torchvision's sequential sampler (the per-image reference).
    g = _gen(1)
    ref = [sample_resized_crop_box(40, 60, generator=g) for _ in range(5000)]
    ref_frac = torch.tensor([bh * bw / (40 * 60) for _, _, bh, bw in ref])
    assert abs(float(frac.mean()) - float(ref_frac.mean())) < 0.015
    ref_aspect = torch.tensor([bw / bh for _, _, bh, bw in ref]).log().mean()
    assert abs(float((w / h).log().mean()) - float(ref_aspect)) < 0.02


def test_resized_crop_boxes_fall_back_to_a_ratio_clamped_centre_crop():
    # Ratio in [2, 3] never fits on a square image at full area: every try is rejected.
    boxes = T.sample_resized_crop_boxes(
        4, 30, 30, scale=(1.0, 1.0), ratio=(2.0, 3.0), generator=_gen(0)
    )
    assert boxes.tolist() == [[7, 0, 15, 30]] * 4  # w = 30, h = round(30 / 2), top = 15 // 2


def _per_image_resized_crop(x, boxes, size):
    """Reference: crop each image's box, then F.interpolate it alone."""
    outs = []
    for img, (t, le, h, w) in zip(x, boxes.tolist()):
        crop = img[None, :, t : t + h, le : le + w].float()
        outs.append(
            F.interpolate(crop, size=size, mode="bilinear", align_corners=False, antialias=False)[0]
        )
    return torch.stack(outs)


def test_random_resized_crop_matches_per_image_crop_and_resize_float():
    x = _images(b=12, h=40, w=52, dtype=torch.float32) * 255
    rrc = T.RandomResizedCrop((24, 20))
    boxes = rrc.sample_boxes(12, 40, 52, _gen(7))
    out = rrc(x, generator=_gen(7))
    ref = _per_image_resized_crop(x, boxes, (24, 20))
    # Stated tolerance: 3e-3 on a 0..255 scale (grid_sample's float32 coordinates).
    torch.testing.assert_close(out, ref, atol=3e-3, rtol=0)


def test_random_resized_crop_matches_per_image_reference_uint8():
    x = _images(b=12, h=40, w=52)
    rrc = T.RandomResizedCrop(16, scale=(0.2, 1.0))
    boxes = rrc.sample_boxes(12, 40, 52, _gen(1))
    out = rrc(x, generator=_gen(1))
    ref = _per_image_resized_crop(x, boxes, (16, 16)).round().clamp(0, 255).to(torch.uint8)
    assert out.dtype == torch.uint8
    # Stated tolerance: at most 1 grey level, where float noise crosses a .5 boundary.
    diff = (out.int() - ref.int()).abs()
    assert int(diff.max()) <= 1 and float((diff > 0).float().mean()) < 0.01


def test_random_resized_crop_full_box_is_identity():
    x = _images(h=16, w=16, dtype=torch.float32)
    out = T.resized_crop_batch(x, torch.tensor([[0, 0, 16, 16]] * len(x)), (16, 16))
    torch.testing.assert_close(out, x, atol=1e-5, rtol=0)


def test_random_resized_crop_rejects_bad_ranges():
    with pytest.raises(
        ValueError, match=r"scale must satisfy 0 < min <= max <= 1, got \(0.5, 0.1\)"
    ):
        T.RandomResizedCrop(8, scale=(0.5, 0.1))
    with pytest.raises(ValueError, match=r"ratio must satisfy 0 < min <= max, got \(0, 1\)"):
        T.RandomResizedCrop(8, ratio=(0, 1))


# --- ColorJitter -------------------------------------------------------------------------


def _per_image_jitter(img, fb, fc, bound):
    y = (img.double() * fb).clamp(0, bound)
    gray = 0.299 * y[0] + 0.587 * y[1] + 0.114 * y[2]
    return (fc * y + (1 - fc) * gray.mean()).clamp(0, bound)


def test_color_jitter_matches_per_image_reference():
    x = _images(b=8)
    jit = T.ColorJitter(brightness=0.4, contrast=0.4)
    factors = jit.sample_factors(8, _gen(2))
    assert bool(((factors >= 0.6) & (factors <= 1.4)).all())
    out = jit(x, generator=_gen(2))
    ref = torch.stack(
        [_per_image_jitter(i, fb, fc, 255) for i, (fb, fc) in zip(x, factors.tolist())]
    )
    assert out.dtype == torch.uint8
    assert int((out.int() - ref.round().int()).abs().max()) <= 1
    xf = x.float() / 255
    outf = jit(xf, generator=_gen(2))
    reff = torch.stack(
        [_per_image_jitter(i, fb, fc, 1.0) for i, (fb, fc) in zip(xf, factors.tolist())]
    )
    torch.testing.assert_close(outf, reff.float(), atol=1e-5, rtol=0)


def test_color_jitter_checks_arguments():
    with pytest.raises(ValueError, match=r"brightness must be >= 0, got -0\.1"):
        T.ColorJitter(brightness=-0.1)
    with pytest.raises(
        ValueError, match=r"expects 1 \(gray\) or 3 \(RGB\) channels, got shape \(6, 2, 20, 24\)"
    ):
        T.ColorJitter(contrast=0.2)(_images(c=2))


# --- shapes, generators, composition -----------------------------------------------------


def test_leading_dims_and_single_images():
    x = _images(b=6).view(2, 3, 3, 20, 24)
    out = T.RandomCrop(8)(x, generator=_gen(0))
    assert out.shape == (2, 3, 3, 8, 8)
    assert T.CenterCrop(8)(x[0, 0]).shape == (3, 8, 8)
    with pytest.raises(
        ValueError, match=r"RandomCrop expects a tensor of shape \[..., C, H, W\], got \(20, 24\)"
    ):
        T.RandomCrop(8)(x[0, 0, 0])


def test_generators_make_results_reproducible():
    x = _images(b=16, h=32, w=32)
    pipe = T.Compose(
        T.RandomResizedCrop(16),
        T.RandomHorizontalFlip(),
        T.ColorJitter(0.3, 0.3),
        T.Normalize.imagenet(),
    )
    a, b = pipe(x, generator=_gen(11)), pipe(x, generator=_gen(11))
    assert torch.equal(a, b)
    assert not torch.equal(a, pipe(x, generator=_gen(12)))
    # A generator given at construction is used when none is passed at call time.
    c1 = T.RandomCrop(8, generator=_gen(4))(x)
    c2 = T.RandomCrop(8)(x, generator=_gen(4))
    assert torch.equal(c1, c2)


def test_compose_runs_plain_modules_too():
    pipe = T.Compose(T.CenterCrop(8), torch.nn.Flatten(1))
    assert pipe(_images()).shape == (6, 3 * 8 * 8)


def test_transforms_move_like_modules():
    norm = T.Normalize.imagenet().to(torch.float64)  # nn.Module.to must keep working
    assert norm(_images()).dtype == torch.float32
    pipe = T.Compose(T.RandomCrop(8), T.Normalize.imagenet()).to("cpu")
    assert pipe(_images(), generator=_gen(0)).shape == (6, 3, 8, 8)
