"""Private implementation of :mod:`tensorbox.buffer` (the public face).

- ``_plan``: which samples make batch ``g``, their random seeds, and how a producer
  computes a batch and writes it into a slot (shared by processes and inline mode);
- ``_slots``: the slot tree (one memory-mapped TensorDict with a leading slot dim);
- ``_worker``: the producer process's main loop;
- ``_runtime``: the parent's side of the producer processes (start, wait, shut down);
- ``_stats``: ``BufferStats``, rate meters and the progress display;
- ``_core``: ``AugmentBuffer``, the consumer.
"""
