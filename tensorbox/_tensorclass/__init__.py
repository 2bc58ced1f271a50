"""Tensorclasses: typed dataclasses that behave like a TensorDict.

* ``decorator``: ``@tensorclass`` and ``is_tensorclass``;
* ``base``: the ``TensorClass`` base (fields, ``__setattr__``, dataclass support);
* ``build``: the generated ``__init__``, field properties, registration;
* ``fields``: ``field()``, collecting a class's fields, and what is refused;
* ``tensor_only``: the ``tensor_only=True`` option; ``from_dataclass``: from dataclasses.
"""

from tensorbox._tensorclass.base import TensorClass
from tensorbox._tensorclass.decorator import is_tensorclass, tensorclass
from tensorbox._tensorclass.fields import Field, field, fields
from tensorbox._tensorclass.from_dataclass import from_dataclass

__all__ = [
    "Field",
    "TensorClass",
    "field",
    "fields",
    "from_dataclass",
    "is_tensorclass",
    "tensorclass",
]
