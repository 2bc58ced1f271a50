"""TensorDict's ``torch.distributed`` methods, each one line into ``tensorbox.distributed``.

They give tensordict's spelling (``td.send(dst)``, ``td.all_reduce_()``...) for the
functions of ``tensorbox.distributed``. They sit in this mixin so that ``_td.py``
stays short, and import the module when called, so ``import tensorbox`` does not
load the ``torch.distributed`` machinery.

>>> from tensorbox import TensorDict
>>> callable(TensorDict.all_gather) and callable(TensorDict.from_remote_init)
True
"""

from __future__ import annotations

from typing import Any, Self

__all__ = ["DistributedMethods"]


class DistributedMethods:
    """Mixin of ``TensorDict``: point-to-point and collective transport of a container."""

    __slots__ = ()

    def send(self, dst: int, *, group: Any = None, tag: int = 0, packed: bool = True) -> None:
        """Send to rank ``dst``; the peer calls ``recv`` or ``from_remote_init``."""
        from . import distributed

        distributed.send(self, dst, group=group, tag=tag, packed=packed)

    init_remote = send  # tensordict's name for a send to a rank that knows no structure

    def isend(self, dst: int, *, group: Any = None, tag: int = 0, packed: bool = True) -> Any:
        """Start a send; ``wait()`` on the returned Request."""
        from . import distributed

        return distributed.isend(self, dst, group=group, tag=tag, packed=packed)

    def recv(self, src: int, *, group: Any = None, tag: int = 0) -> Self:
        """Receive from rank ``src`` into these tensors, in place (same keys, dtypes, shapes)."""
        from . import distributed

        return distributed.recv(self, src, group=group, tag=tag)

    def irecv(self, src: int, *, group: Any = None, tag: int = 0) -> Any:
        """Start an in-place receive; ``wait()`` on the returned Request."""
        from . import distributed

        return distributed.irecv(self, src, group=group, tag=tag)

    @classmethod
    def from_remote_init(cls, src: int, *, group: Any = None, device: Any = None) -> Any:
        """A new container received from rank ``src``, whatever its structure."""
        from . import distributed

        return distributed.recv_structure(src, group=group, device=device)

    def broadcast_(self, src: int, *, group: Any = None) -> Self:
        """Copy rank ``src``'s container into this one on every rank, in place."""
        from . import distributed

        return distributed.broadcast_(self, src, group=group)

    def broadcast(self, src: int, *, group: Any = None) -> Self:
        """Rank ``src``'s container on every rank (built new where it is not ``self``)."""
        from . import distributed

        return distributed.broadcast(self, src, group=group)

    def all_reduce_(self, op: Any = None, *, group: Any = None, async_op: bool = False) -> Any:
        """Reduce every leaf over the group, in place (``op`` default SUM; AVG works on gloo)."""
        from . import distributed

        return distributed.all_reduce_(self, op, group=group, async_op=async_op)

    # tensordict's spelling: it reduces in place too (tensordict returns None, this returns self).
    all_reduce = all_reduce_

    def all_gather(self, *, group: Any = None) -> Self:
        """Every rank's container stacked along a new first dim."""
        from . import distributed

        return distributed.all_gather(self, group=group)
