"""``TensorDictStore``: a container whose leaves live in a Redis server.

Processes on many machines that reach the same server share one container: one
writes ``store["obs"] = x`` and every other sees it; a handle pickles by
reference (the server's address and the store's id), so DataLoader workers and
``torch.distributed`` ranks attach to the same keys. Names and semantics follow
tensordict's ``tensordict.store.TensorDictStore``; any server that speaks the
Redis protocol (Redis, Valkey, Dragonfly, KeyDB) works through ``redis-py``,
which is the ``redis`` extra (``pip install tensorbox[redis]``).

Layout on the server, all under ``{prefix}:{<td_id>}:`` (the braces keep one
store in one cluster slot):

- ``meta``: a JSON object, ``{"format": "tensorbox.store", "version": 1,
  "batch_size": [...], "device": ..., "tensorclass": ...}``;
- ``index``: a hash from each entry's path (a JSON list of its keys) to its
  JSON header: ``{"kind": "tensor", "dtype": "float32", "shape": [...]}``,
  ``{"kind": "nontensor", "rows": false}`` or ``{"kind": "node",
  "batch_size": [...]}`` for a nested container;
- ``data:<path>``: the leaf's bytes, C order, little-endian as in memory; a
  non-tensor value is its JSON text. Nothing is pickled, so a store read from
  a server never runs code.

Every write of whole entries is one ``MULTI``/``EXEC`` transaction watched on
the index, so a reader sees an entry either before or after a write, never
half of it; row writes (``store[i] = row``) are ``SETRANGE`` calls in one
transaction as well. Reads check each leaf's size against its header before
anything is allocated, and name the key and the server's URL when the data
is not what the header promises.

>>> from tensorbox import TensorDictStore  # doctest: +SKIP
>>> store = TensorDictStore(batch_size=[100], port=6379)  # doctest: +SKIP
>>> store["obs"] = torch.randn(100, 84)  # doctest: +SKIP
>>> store[3:5]["obs"].shape  # only rows 3 and 4 are fetched  # doctest: +SKIP
torch.Size([2, 84])
"""

from typing import TYPE_CHECKING

from tensorbox import _face

# The public names, each listed once (``tensorbox/_face.py``).
if TYPE_CHECKING:
    from tensorbox._redis.stack import LazyStackedTensorDictStore as LazyStackedTensorDictStore
    from tensorbox._redis.store import TensorDictStore as TensorDictStore

__getattr__, __dir__, __all__ = _face.attach(__name__, __file__)
