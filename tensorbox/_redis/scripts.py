"""The store's server-side steps: Lua scripts that check the store's generation and an
entry's header and length, then act, in one round trip and atomically (a script runs
alone on the server); and the bounded optimistic transaction for the rest.

Why scripts: a row write must never land in a leaf that has vanished (Redis's
``SETRANGE`` on a missing key creates it zero-filled) nor in a leaf another client
replaced meanwhile; checking first and writing after, from here, leaves a gap between
the two in which either can happen. A script closes the gap without an extra round trip.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from tensorbox._redis.wire import _FORMAT, _GEN, _RETRIES, _VERSION, _parse_meta, _redis, _Server
from tensorbox.errors import FormatError

# KEYS: meta, index. ARGV: the new metadata ('' to attach only), a new generation.
# Returns {meta or false, generation or false, 'created' | 'index' | nil}.
_OPEN = """
local m = redis.call('GET', KEYS[1])
local g = redis.call('HGET', KEYS[2], ARGV[3])
if m or ARGV[1] == '' then return {m, g} end
if redis.call('EXISTS', KEYS[2]) == 1 then return {m, g, 'index'} end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[3], ARGV[2])
return {ARGV[1], ARGV[2], 'created'}
"""

# A store written before generations existed gets one, unless its metadata changed since
# it was read. KEYS: meta, index. ARGV: the metadata read, the same with a generation,
# the generation, the field's name. Returns the generation now in force, or false.
_ADOPT = """
local g = redis.call('HGET', KEYS[2], ARGV[4])
if g then return g end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return false end
redis.call('HSET', KEYS[2], ARGV[4], ARGV[3])
redis.call('SET', KEYS[1], ARGV[2])
return ARGV[3]
"""

# Row writes into existing tensor leaves. KEYS: index, then one data key per leaf.
# ARGV: the generation, the field's name, then per leaf: its index field, its header as
# this handle knows it, its length in bytes, the number of ranges, then (offset, bytes)
# per range. Everything is checked before anything is written, so a refused write
# writes nothing. Returns {'ok'}, {'gen', found}, {'header', leaf} or {'length', leaf, n}.
_ROWS = """
local g = redis.call('HGET', KEYS[1], ARGV[2])
if g ~= ARGV[1] then return {'gen', g} end
local a = 3
for i = 2, #KEYS do
  if redis.call('HGET', KEYS[1], ARGV[a]) ~= ARGV[a + 1] then return {'header', i - 1} end
  local want = tonumber(ARGV[a + 2])
  local n = redis.call('STRLEN', KEYS[i])
  if n ~= want or (want == 0 and redis.call('EXISTS', KEYS[i]) == 0) then
    return {'length', i - 1, n}
  end
  a = a + 4 + 2 * tonumber(ARGV[a + 3])
end
a = 3
for i = 2, #KEYS do
  local runs = tonumber(ARGV[a + 3])
  a = a + 4
  for j = 1, runs do
    redis.call('SETRANGE', KEYS[i], tonumber(ARGV[a]), ARGV[a + 1])
    a = a + 2
  end
end
return {'ok'}
"""

# The state a transaction plans from, read under WATCH in one round trip. KEYS: index,
# then data keys. ARGV: 'len' (a tensor: its length and whether it exists) or 'get' (a
# non-tensor value: its text) per data key. Returns {index as HGETALL, per key...}.
_STATE = """
local out = {redis.call('HGETALL', KEYS[1])}
for i = 2, #KEYS do
  if ARGV[i - 1] == 'len' then
    out[i] = {redis.call('STRLEN', KEYS[i]), redis.call('EXISTS', KEYS[i])}
  else
    out[i] = {redis.call('GET', KEYS[i]) or 0}
  end
end
return out
"""

# Many byte ranges of one value as one reply (a batch of scattered rows): queued in a
# read's transaction, it spares a reply (and a +QUEUED) per range, and the ranges travel
# as one text argument (the client packs one argument, not two per range). KEYS: the
# value. ARGV: "first last first last ..." in bytes. Returns the ranges end to end.
_RANGES = """
local parts = {}
local first = nil
for x in string.gmatch(ARGV[1], '%d+') do
  if first then
    parts[#parts + 1] = redis.call('GETRANGE', KEYS[1], first, x)
    first = nil
  else
    first = x
  end
end
return table.concat(parts)
"""

_SOURCES = {"open": _OPEN, "adopt": _ADOPT, "rows": _ROWS, "state": _STATE, "ranges": _RANGES}
_SHAS = {k: hashlib.sha1(v.encode()).hexdigest() for k, v in _SOURCES.items()}


def run_script(on: Any, name: str, keys: Sequence[Any], args: Sequence[Any]) -> Any:
    """``EVALSHA`` of the script ``name`` on ``on`` (a client, or a pipeline that is
    watching: then it runs at once), loading it first where the server does not have
    it (a new or restarted server): one round trip when it has."""
    r = _redis()
    try:
        return on.evalsha(_SHAS[name], len(keys), *keys, *args)
    except r.exceptions.NoScriptError:
        return on.eval(_SOURCES[name], len(keys), *keys, *args)


def queue_script(pipe: Any, name: str, keys: Sequence[Any], args: Sequence[Any]) -> None:
    """Queue ``EVALSHA`` of ``name`` in a transaction; where the server lacks the script
    the transaction's ``NoScriptError`` is answered by ``load_script`` and a retry."""
    pipe.evalsha(_SHAS[name], len(keys), *keys, *args)


def load_script(server: _Server, name: str) -> None:
    """Load the script ``name`` into the server's cache (a new or restarted server)."""
    server.call("load a script", lambda: server.client.script_load(_SOURCES[name]))


def open_store(server: _Server, new_meta: dict[str, Any] | None) -> dict[str, Any] | None:
    """Read the store's metadata and generation (creating both when ``new_meta`` is given
    and the store does not exist), in one atomic round trip; set ``server.gen``.

    Returns the metadata, or None when there is no store (and ``new_meta`` is None).
    On an error, a client the handle owns is closed (its socket is not left to the GC)."""
    try:
        return _open_store(server, new_meta)
    except BaseException:
        if server.owns_client:
            server.client.close()
        raise


def _open_store(server: _Server, new_meta: dict[str, Any] | None) -> dict[str, Any] | None:
    gen = uuid.uuid4().hex
    text = "" if new_meta is None else json.dumps({**new_meta, "generation": gen})
    keys = [server.meta_key, server.index_key]
    for _ in range(_RETRIES):
        reply = server.call(
            "open the store", lambda: run_script(server.client, "open", keys, [text, gen, _GEN])
        )
        raw_meta, raw_gen = reply[0], reply[1]
        if len(reply) > 2 and reply[2] == b"index":
            raise FormatError(
                f"{server.where()}: the store's metadata {server.meta_key!r} is gone but its "
                f"index {server.index_key!r} is there (evicted under maxmemory?); the store "
                "is damaged, refusing to create a new one over it"
            )
        meta = _parse_meta(raw_meta, server)
        if meta is None:
            return None
        if "generation" not in meta:  # written before generations: adopt one
            adopt_args = [raw_meta, json.dumps({**meta, "generation": gen}), gen, _GEN]
            got = server.call(
                "record the store's generation",
                lambda a=adopt_args: run_script(server.client, "adopt", keys, a),  # type: ignore[misc]
            )
            if not got:
                continue  # the metadata changed meanwhile: read again
            server.gen = got.decode() if isinstance(got, bytes) else got
            return meta
        server.gen = str(meta["generation"])
        server.check_gen(raw_gen)
        return meta
    raise RuntimeError(f"{server.where()}: the store's metadata kept changing while opened")


def transaction(
    server: _Server,
    what: str,
    watch: Sequence[Any],
    read: Callable[[Any], Any],
    plan: Callable[[Any, Any], None],
) -> None:
    """Optimistic transaction: ``WATCH`` the keys ``watch``, ``read(pipe)`` the state (at
    once), then ``plan(pipe, state)`` queues the commands that ``EXEC`` runs unless a
    watched key changed meanwhile; then the whole of it runs again, at most ``_RETRIES``
    times. A connection lost on the way is a ``ConnectionError`` after those tries, never
    an endless retry (redis-py's own ``transaction()`` retries a lost connection forever)."""
    r = _redis()
    lost: Exception | None = None
    for _ in range(_RETRIES):
        try:
            with server.client.pipeline(transaction=True) as pipe:
                pipe.watch(*watch)  # type: ignore[no-untyped-call]
                state = read(pipe)
                pipe.multi()
                plan(pipe, state)
                pipe.execute()
            return
        except r.exceptions.WatchError as err:
            if "occurred while watching" in str(err):  # the connection, not a change
                lost = err
            continue
    if lost is not None:
        raise ConnectionError(
            f"{server.where()}: {what}: the connection to the server was lost on each of "
            f"{_RETRIES} tries ({lost}); the write may or may not have been applied"
        )
    raise RuntimeError(
        f"{server.where()}: {what}: the index kept changing under {_RETRIES} attempts"
    )


def new_meta(batch_size: Sequence[int], device: Any) -> dict[str, Any]:
    """A new store's metadata (its generation is added by ``open_store``)."""
    return {
        "format": _FORMAT,
        "version": _VERSION,
        "batch_size": list(batch_size),
        "device": None if device is None else str(device),
        "tensorclass": None,
    }
