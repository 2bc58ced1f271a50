"""The storage layer: saved trees (folders, archives, remote objects), memory-mapped
tensors and their sharing between processes (see ``docs/design.md``)."""

# Tensors of mapped files cross process boundaries by reference (or by their bytes when
# their file was replaced): torch.multiprocessing's reducer is wrapped once, here, so
# that it holds wherever a MemoryMappedTensor can exist.
from tensorbox._storage import process_reduce as _process_reduce

_process_reduce.install()
# In-place copies into file-backed leaves (set_, update_) reserve their bytes first
# (on a sparse file, a full disk is then an OSError naming the key, never a SIGBUS):
# the core reaches ``reserve.reserve_leaf`` through its ``reserve`` port, bound by the
# package face.
