"""``import tensorbox`` loads none of the interop libraries; a missing one names its extra."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXTRAS = ("pyarrow", "pandas", "h5py", "zarr", "safetensors", "streaming")

_FRESH = textwrap.dedent(
    """
    import sys
    import tensorbox
    extras = {extras!r}
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in extras)
    assert not loaded, loaded
    assert "tensorbox.interop.arrow" not in sys.modules
    # the names are on the package face, loaded on first use
    assert tensorbox.from_arrow.__module__ == "tensorbox.interop.arrow"
    assert tensorbox.PersistentTensorDict.__module__ == "tensorbox.interop.hierarchical"
    assert "pyarrow" not in sys.modules  # defining the functions imports nothing either
    print("ok")
    """
).format(extras=EXTRAS)

_BLOCKED = textwrap.dedent(
    """
    import importlib.abc, sys

    class Refuse(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {blocked!r}:
                raise ImportError(f"{{name}} is blocked by the test")
            return None

    sys.meta_path.insert(0, Refuse())
    import torch
    from tensorbox import TensorDict
    td = TensorDict(a=torch.zeros(2), batch_size=[2])
    for call, extra in [(lambda: td.to_arrow(), "arrow"), (lambda: td.to_h5("x.h5"), "hdf5"),
                        (lambda: td.to_zarr("x.zarr"), "zarr"),
                        (lambda: td.to_mds(out="x"), "mds")]:
        try:
            call()
        except ImportError as err:
            assert f"pip install 'tensorbox[{{extra}}]'" in str(err), err
        else:
            raise AssertionError(extra)
    print("ok")
    """
).format(blocked=("pyarrow", "h5py", "zarr", "streaming"))


@pytest.mark.heavy
@pytest.mark.parametrize("script", [_FRESH, _BLOCKED], ids=["lazy", "missing"])
def test_import_tensorbox_loads_no_interop_library(script, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


def _streaming():
    """mosaicml-streaming, or a skip (a failure under ``make test-mds``, which exists to run it)."""
    try:
        import streaming
    except Exception as err:  # its import can fail in other ways (a torchvision mismatch)
        if os.environ.get("TENSORBOX_REQUIRE_MDS"):
            raise
        pytest.skip(f"mosaicml-streaming unusable here: {err}")
    return streaming


@pytest.mark.mds
def test_to_mds_round_trip(tmp_path):
    streaming = _streaming()
    import torch

    from tensorbox import TensorDict

    td = TensorDict({"a": torch.arange(3), "c": torch.ones(3, 2)}, [3])
    td.to_mds(out=str(tmp_path))
    ds = streaming.StreamingDataset(local=str(tmp_path), remote=None, batch_size=1)
    rows = [ds[i] for i in range(3)]
    assert [int(r["a"]) for r in rows] == [0, 1, 2]


@pytest.mark.mds
def test_to_mds_nested_keys_and_non_tensor_columns(tmp_path):
    streaming = _streaming()
    import numpy as np
    import torch

    from tensorbox import TensorDict

    td = TensorDict(
        {"obs": {"pixels": torch.arange(12, dtype=torch.uint8).reshape(3, 2, 2)},
         "reward": torch.tensor([0.5, 1.5, 2.5], dtype=torch.float64),
         "name": ["a", "bb", "ccc"]},
        [3],
    )  # fmt: skip
    td.to_mds(out=str(tmp_path / "out"))
    ds = streaming.StreamingDataset(local=str(tmp_path / "out"), remote=None, batch_size=1)
    rows = [ds[i] for i in range(len(ds))]
    assert [r["name"] for r in rows] == ["a", "bb", "ccc"]
    for i, r in enumerate(rows):
        assert np.array_equal(r["obs.pixels"], td["obs", "pixels"][i].numpy())
        assert r["reward"] == td["reward"][i].item()


@pytest.mark.mds
def test_to_mds_refuses_bool_leaves(tmp_path):
    _streaming()
    import torch

    from tensorbox import TensorDict

    td = TensorDict({"done": torch.tensor([True, False])}, [2])
    with pytest.raises(TypeError, match=r"to_mds: entry 'done' is bool, which MDS has no column"):
        td.to_mds(out=str(tmp_path / "out"))
