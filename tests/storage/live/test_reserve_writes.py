"""Every in-place write into a sparse, memory-mapped tree reserves its bytes first: on a
full disk, ``set_``, ``update_``, ``load_state_dict`` and ``to_module(inplace=True)``
raise an ``OSError`` naming the key (never a SIGBUS), on a real 8 MiB tmpfs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tensorbox import TensorDict
from tensorbox.weights import from_module

MIB = 1 << 20


def _sparse(root: Path, **leaves: int) -> TensorDict:
    """A memmap_like tree of float32 leaves of ``n`` MiB each (sparse: no blocks yet)."""
    proto = TensorDict({k: torch.zeros(1, n * MIB // 4) for k, n in leaves.items()}, [1])
    return proto.expand(1).memmap_like(root)


def test_set_and_update_on_a_full_disk_raise_naming_the_key(small_tmpfs: Path) -> None:
    like = _sparse(small_tmpfs / "t", big=16)
    with pytest.raises(OSError, match=r"no space left on the device .* of key 'big'"):
        like.set_("big", torch.ones(1, 4 * MIB))
    with pytest.raises(OSError, match=r"no space left on the device .* of key 'big'"):
        like.update_({"big": torch.ones(1, 4 * MIB)})
    # nothing was written (read one page: a tmpfs fills a hole even on a read)
    assert not like["big"][0, :1024].any()


def test_load_state_dict_reserves_everything_before_copying(small_tmpfs: Path) -> None:
    like = _sparse(small_tmpfs / "t", a=1, b=16)
    state = {"a": torch.ones(1, MIB // 4), "b": torch.ones(1, 4 * MIB)}
    with pytest.raises(OSError, match=r"no space left on the device .* of key 'b'"):
        like.load_state_dict(state)
    assert not like["a"].any()  # 'a' fitted, but nothing is copied unless everything fits
    small = _sparse(small_tmpfs / "s", a=1)
    small.load_state_dict({"a": torch.ones(1, MIB // 4)})
    assert small["a"].all()


def test_to_module_inplace_into_mapped_weights(small_tmpfs: Path) -> None:
    net = torch.nn.Linear(1024, 4096)  # 16 MiB of weight: more than the disk holds
    mapped = from_module(net).memmap_like(small_tmpfs / "w")
    mapped.to_module(net)  # the module now holds the sparse, mapped tensors
    ones = from_module(torch.nn.Linear(1024, 4096)).apply(torch.ones_like)
    with pytest.raises(OSError, match=r"no space left on the device .* of key 'weight'"):
        ones.to_module(net, inplace=True)
    assert not net.weight.detach()[0].any()


def test_in_memory_writes_reserve_nothing() -> None:
    td = TensorDict(a=torch.zeros(3), batch_size=[3])
    a = td["a"]
    td.set_("a", torch.ones(3))
    td.update_({"a": torch.full((3,), 2.0)})
    assert td["a"] is a and a.tolist() == [2.0] * 3
