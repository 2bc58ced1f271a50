"""The container's transfers over ``torch.distributed``: the ``distributed`` port.

``send``/``recv``/``broadcast_``/``all_reduce_``/``all_gather``... reach
:mod:`tensorbox.distributed` through :func:`tensorbox._core.ports.distributed`.

>>> from tensorbox import TensorDict
>>> callable(TensorDict.send) and callable(TensorDict.all_gather)
True
"""

from __future__ import annotations

from typing import Any, Self

from tensorbox._core import ports as _ports
from tensorbox._core.methods.base import MixinBase

__all__ = ["DistributedMethods"]


class DistributedMethods(MixinBase):
    """Mixin of ``TensorCollection``: ``torch.distributed`` transfers (the distributed port)."""

    __slots__ = ()

    # -------------------------------------------------------- torch.distributed

    def send(self, dst: int, *, group: Any = None, tag: int = 0, packed: bool = True) -> None:
        """Send to rank ``dst``; the peer calls ``recv`` or ``from_remote_init``."""
        distributed = _ports.distributed()

        distributed.send(self, dst, group=group, tag=tag, packed=packed)

    def isend(self, dst: int, *, group: Any = None, tag: int = 0, packed: bool = True) -> Any:
        """Start a send; ``wait()`` on the returned Request."""
        distributed = _ports.distributed()

        return distributed.isend(self, dst, group=group, tag=tag, packed=packed)

    def recv(self, src: int, *, group: Any = None, tag: int = 0) -> Self:
        """Receive from rank ``src`` into these tensors, in place (same keys, dtypes, shapes)."""
        distributed = _ports.distributed()

        out: Self = distributed.recv(self, src, group=group, tag=tag)
        return out

    def irecv(self, src: int, *, group: Any = None, tag: int = 0) -> Any:
        """Start an in-place receive; ``wait()`` on the returned Request."""
        distributed = _ports.distributed()

        return distributed.irecv(self, src, group=group, tag=tag)

    @classmethod
    def from_remote_init(cls, src: int, *, group: Any = None, device: Any = None) -> Any:
        """A new container received from rank ``src``, whatever its structure."""
        distributed = _ports.distributed()

        return distributed.recv_structure(src, group=group, device=device)

    def broadcast_(self, src: int, *, group: Any = None) -> Self:
        """Copy rank ``src``'s container into this one on every rank, in place."""
        distributed = _ports.distributed()

        out: Self = distributed.broadcast_(self, src, group=group)
        return out

    def broadcast(self, src: int, *, group: Any = None) -> Self:
        """Rank ``src``'s container on every rank (built new where it is not ``self``)."""
        distributed = _ports.distributed()

        out: Self = distributed.broadcast(self, src, group=group)
        return out

    def all_reduce_(self, op: Any = None, *, group: Any = None, async_op: bool = False) -> Any:
        """Reduce every leaf over the group, in place (``op`` default SUM; AVG works on gloo)."""
        distributed = _ports.distributed()

        return distributed.all_reduce_(self, op, group=group, async_op=async_op)

    def all_gather(self, *, group: Any = None) -> Self:
        """Every rank's container stacked along a new first dim."""
        distributed = _ports.distributed()

        out: Self = distributed.all_gather(self, group=group)
        return out

    # ----------------------------------------------------------------------------
    # tensordict's compatibility names: other spellings of methods of this job, and
    # stand-ins kept so that code written for tensordict runs unchanged. New code and
    # the docs use the names above.

    init_remote = send  # tensordict's name for a send to a rank that knows no structure

    # tensordict's spelling: it reduces in place too (tensordict returns None, this returns self).
    all_reduce = all_reduce_
