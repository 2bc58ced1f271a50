"""Tensorclasses: typed dataclasses that behave like a TensorDict.

* ``decorator``: ``@tensorclass`` and ``is_tensorclass``;
* ``base``: the ``TensorClass`` base (fields, ``__setattr__``, dataclass support);
* ``build``: the generated ``__init__``, field properties, registration;
* ``fields``: ``field()``, collecting a class's fields, and what is refused.
"""

from .base import TensorClass
from .decorator import is_tensorclass, tensorclass
from .fields import Field, field, fields

__all__ = ["Field", "TensorClass", "field", "fields", "is_tensorclass", "tensorclass"]
