"""Shared code of the image benchmarks, the demo and the tutorials' comparisons.

- ``reference``: the per-image pipeline tensorbox is measured against (torchvision's
  ``ImageFolder`` and transforms when it imports, Pillow equivalents otherwise);
- ``td_tutorial``: tensordict's ImageNet tutorial path, rebuilt on tensordict's API
  (needs ``tensordict``, the ``bench`` extra);
- ``pipelines``: timing the pipelines the same way (warm-up, whole epochs, rates).

Not part of ``tensorbox``: nothing here is installed with the library.
"""
