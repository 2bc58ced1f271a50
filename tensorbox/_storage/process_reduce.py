"""Sending file-backed tensors between processes: ``torch.multiprocessing`` reducers.

Torch shares a CPU tensor with another process through a file descriptor of its
storage, which a file mapping made by ``from_file`` does not keep. A tensor of a
mapped file goes instead as a :class:`~tensorbox._storage.fileref.FileRef`
(the receiver maps the same file), or, when its file was replaced since it was mapped
(a tree saved over), as its bytes inside the message. Every other tensor goes to
torch's own reducer, unchanged.

>>> import io, os, pickle, tempfile, torch
>>> from multiprocessing.reduction import ForkingPickler
>>> from tensorbox import TensorDict
>>> root = os.path.join(tempfile.mkdtemp(), "t")
>>> old = TensorDict({"a": torch.arange(3.0)}, [3]).memmap(root)
>>> _ = TensorDict({"a": torch.zeros(3)}, [3]).memmap(root)  # saved over
>>> buf = io.BytesIO()
>>> ForkingPickler(buf).dump(old["a"][1:])
>>> pickle.loads(buf.getvalue()).tolist()  # its own bytes, not the new file's
[1.0, 2.0]
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from tensorbox._core.encoding import DTYPES, dtype_name
from tensorbox._storage.fileref import _DTYPE_OK, FileRef, restore, shareable

__all__ = ["install"]


def _bytes_of(t: Tensor) -> tuple[bytes, str, tuple[int, ...]]:
    """``t``'s values as bytes (C order), for :func:`_from_bytes`."""
    from tensorbox._core.chunks import as_bytes

    flat = t.detach().resolve_conj().resolve_neg().contiguous()
    raw = bytes(as_bytes(flat)) if flat.numel() else b""
    return raw, dtype_name(t.dtype), tuple(t.shape)


def _from_bytes(raw: bytes, dtype: str, shape: tuple[int, ...]) -> Tensor:
    out = torch.empty(shape, dtype=DTYPES[dtype])
    if raw:
        out.view(-1).view(torch.uint8).numpy()[:] = memoryview(raw)
    return out


def _file_backed(t: Tensor) -> bool:
    storage = t.untyped_storage()
    return storage.filename is not None or getattr(storage, "_tbx_ro", None) is not None


def install() -> None:
    """Send file-backed tensors between processes by reference, even bare views.

    ``torch.multiprocessing`` (DataLoader workers, queues) shares CPU storages through
    file descriptors, which a file mapping made by ``from_file`` does not keep: a
    worker returning a view of a memory-mapped file fails with EBADF and the loader
    hangs. Tensors of a file-backed storage go as a :class:`FileRef` instead; every
    other tensor goes to torch's own reducer, unchanged.
    """
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing  # noqa: F401  (torch's reducers are registered on import)

    torch_reduce = ForkingPickler._extra_reducers.get(Tensor)  # type: ignore[attr-defined]
    if torch_reduce is None or getattr(torch_reduce, "_tbx", False):
        return

    def reduce(t: Tensor) -> Any:
        ref = shareable(t)
        if type(ref) is FileRef:
            return (restore, (ref,))
        if t.device.type == "cpu" and t.dtype in _DTYPE_OK and _file_backed(t):
            # A file mapping whose file was replaced since (a tree saved over): its name
            # leads elsewhere now, and torch would share the mapping by a descriptor it
            # does not have (EBADF, in a queue's feeder thread). Its bytes go in the
            # message itself: a copy in shared memory would have to outlive the send.
            return (_from_bytes, _bytes_of(t))
        return torch_reduce(t)

    reduce._tbx = True  # type: ignore[attr-defined]
    ForkingPickler.register(Tensor, reduce)
