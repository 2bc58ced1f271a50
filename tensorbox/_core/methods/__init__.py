"""The container's methods, one mixin per job; ``TensorCollection`` mixes them all in.

- ``entries.EntryMethods``: entries by key: reading and writing them.
- ``structure.StructureMethods``: the key structure: select, exclude, rename, flatten.
- ``leaves.LeafMethods``: every leaf: apply, to, clone, casts, detach, conversions.
- ``shape.ShapeMethods``: every batch-shape op.
- ``math.MathMethods``: operators, elementwise math, reductions.
- ``persistence.PersistenceMethods``, ``convert.ConvertMethods``,
  ``weights.WeightsMethods``, ``distributed.DistributedMethods``: saved trees, other
  formats, module weights, ``torch.distributed``, one port of ``_core/ports.py`` each
  (the core imports nothing above it).

A new method goes in the mixin of its job; tensordict's other names for a method sit in
a marked section at the end of the same class. ``base`` holds what the mixins share.
"""
