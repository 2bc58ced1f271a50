"""Share TensorDicts and tensorclasses between processes with ``torch.distributed``.

``send``/``isend`` pair with ``recv``/``irecv`` (in place, same keys, dtypes and
shapes) or ``recv_structure`` (a new container). Collectives: ``broadcast_``,
``broadcast``, ``all_reduce_``, ``all_gather``. ``shard_indices`` gives each rank its
rows in ``DistributedSampler`` order. Guide and wire format: ``docs/distributed.md``.
After ``torch.distributed.init_process_group`` in each process::

    import tensorbox.distributed as tbd

    if rank == 0:
        tbd.send(td, dst=1)               # or: req = tbd.isend(td, 1); ...; req.wait()
    else:
        tbd.recv(like_td, src=0)          # writes into like_td's tensors
        td = tbd.recv_structure(src=0)    # or builds a new container

Leaves travel in sorted nested-key order, packed into one buffer, after a header
and, the first time a peer sees a structure, its JSON description: never pickle,
and no module named by a peer is ever imported.

The package is a face over four modules, one job each: :mod:`~tensorbox.distributed.wire`
(the bytes of a transfer), :mod:`~tensorbox.distributed.channel` (ordered streams per
peer), :mod:`~tensorbox.distributed.ops` (the transfers) and
:mod:`~tensorbox.distributed.sharding` (which rows a rank reads). The sizes
``FRAME_BYTES``, ``COLLECTIVE_FRAME_BYTES``, ``SEPARATE_BYTES``, ``CACHE_SIZE`` and
``MAX_JSON_BYTES`` are set here (the face passes a new value to ``wire``, where every
transfer reads it).

>>> shard_indices(10, rank=1, world_size=3).tolist(), shard_indices(10, 1, 3, drop_last=True).tolist()
([1, 4, 7, 0], [1, 4, 7])
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

from tensorbox import _face
from tensorbox.distributed import wire as _wire

# The sizes a user may set (``_KNOBS``, below) and the private names the tests reach.
from tensorbox.distributed.channel import _Channel as _Channel
from tensorbox.distributed.channel import _channel as _channel
from tensorbox.distributed.channel import _receive as _receive
from tensorbox.distributed.wire import _HEADER as _HEADER
from tensorbox.distributed.wire import _MAGIC as _MAGIC
from tensorbox.distributed.wire import _PER_LEAF as _PER_LEAF
from tensorbox.distributed.wire import _VERSION as _VERSION
from tensorbox.distributed.wire import CACHE_SIZE as CACHE_SIZE
from tensorbox.distributed.wire import COLLECTIVE_FRAME_BYTES as COLLECTIVE_FRAME_BYTES
from tensorbox.distributed.wire import FRAME_BYTES as FRAME_BYTES
from tensorbox.distributed.wire import MAX_JSON_BYTES as MAX_JSON_BYTES
from tensorbox.distributed.wire import SEPARATE_BYTES as SEPARATE_BYTES
from tensorbox.distributed.wire import _build as _build
from tensorbox.distributed.wire import _bytes as _bytes
from tensorbox.distributed.wire import _describe as _describe
from tensorbox.distributed.wire import _empty as _empty
from tensorbox.distributed.wire import _frame as _frame
from tensorbox.distributed.wire import _header as _header
from tensorbox.distributed.wire import _pack as _pack
from tensorbox.distributed.wire import _parse as _parse
from tensorbox.distributed.wire import _plan as _plan

# The public names, each listed once (``tensorbox/_face.py``).
if TYPE_CHECKING:
    from tensorbox.distributed.ops import Request as Request
    from tensorbox.distributed.ops import all_gather as all_gather
    from tensorbox.distributed.ops import all_reduce_ as all_reduce_
    from tensorbox.distributed.ops import broadcast as broadcast
    from tensorbox.distributed.ops import broadcast_ as broadcast_
    from tensorbox.distributed.ops import from_remote_init as from_remote_init
    from tensorbox.distributed.ops import init_remote as init_remote
    from tensorbox.distributed.ops import irecv as irecv
    from tensorbox.distributed.ops import isend as isend
    from tensorbox.distributed.ops import recv as recv
    from tensorbox.distributed.ops import recv_structure as recv_structure
    from tensorbox.distributed.ops import send as send
    from tensorbox.distributed.ops import send_structure as send_structure
    from tensorbox.distributed.sharding import shard_indices as shard_indices
    from tensorbox.distributed.wire import DistributedError as DistributedError
    from tensorbox.distributed.wire import StructureMismatchError as StructureMismatchError

__getattr__, __dir__, __all__ = _face.attach(__name__, __file__)

#: The sizes a user may set on this package; every transfer reads them from ``wire``.
_KNOBS = frozenset(
    ("CACHE_SIZE", "COLLECTIVE_FRAME_BYTES", "FRAME_BYTES", "MAX_JSON_BYTES", "SEPARATE_BYTES")
)


class _Face(types.ModuleType):
    """``tensorbox.distributed.SEPARATE_BYTES = n`` sets the size where it is read."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _KNOBS:
            setattr(_wire, name, value)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Face
