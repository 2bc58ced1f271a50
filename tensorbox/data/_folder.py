"""Scan a ``root/<class>/<image>`` folder the way ``torchvision.datasets.ImageFolder`` does.

Classes are the sorted names of the sub-folders of ``root``; images are found
recursively (following symlinks) in sorted order, kept when their lowercased name ends
with one of ``extensions``. The same ordering as torchvision matters: an ingested
dataset and a per-image ``ImageFolder`` then agree on which index is which image and
which class id is which class.

>>> import tempfile, pathlib
>>> root = pathlib.Path(tempfile.mkdtemp())
>>> for name in ("cat/b.JPG", "cat/a.png", "dog/x/c.jpeg", "dog/notes.txt"):
...     (root / name).parent.mkdir(parents=True, exist_ok=True)
...     (root / name).touch()
>>> index = scan_image_folder(root)
>>> index.classes
['cat', 'dog']
>>> [p.split("/")[-1] for p in index.paths], index.targets
(['a.png', 'b.JPG', 'c.jpeg'], [0, 0, 1])
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["IMG_EXTENSIONS", "FolderIndex", "scan_image_folder"]

# torchvision's list, so that both pick the same files out of a folder.
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


@dataclass(frozen=True)
class FolderIndex:
    """What a folder scan found: class names, and per image its path and class id.

    >>> from tensorbox.data import FolderIndex
    >>> index = FolderIndex("root", ["cat", "dog"], ["root/cat/1.png", "root/dog/2.png"], [0, 1])
    >>> len(index), index.classes[index.targets[1]]
    (2, 'dog')
    """

    root: str
    classes: list[str]
    paths: list[str]
    targets: list[int]

    def __len__(self) -> int:
        return len(self.paths)


def scan_image_folder(
    root: str | os.PathLike[str], extensions: Iterable[str] = IMG_EXTENSIONS
) -> FolderIndex:
    """Return the classes and images under ``root`` (see the module docstring).

    Raises ``FileNotFoundError`` when ``root`` is missing, has no class folder, or a
    class folder holds no image: an empty class would silently shift every class id.

    >>> import os, tempfile; from tensorbox.data import scan_image_folder
    >>> with tempfile.TemporaryDirectory() as root:
    ...     for name in ("cat/a.png", "cat/b.jpg", "dog/c.png", "dog/notes.txt"):
    ...         os.makedirs(os.path.dirname(f"{root}/{name}"), exist_ok=True)
    ...         open(f"{root}/{name}", "wb").close()
    ...     index = scan_image_folder(root)
    ...     index.classes, index.targets, [os.path.basename(p) for p in index.paths]
    (['cat', 'dog'], [0, 0, 1], ['a.png', 'b.jpg', 'c.png'])
    """
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"image folder {str(root)!r} does not exist or is not a folder")
    exts = tuple(e.lower() for e in extensions)
    classes = sorted(entry.name for entry in os.scandir(root) if entry.is_dir())
    if not classes:
        raise FileNotFoundError(
            f"image folder {str(root)!r} has no class sub-folder; expected root/<class>/<image>"
        )
    paths: list[str] = []
    targets: list[int] = []
    empty: list[str] = []
    for label, name in enumerate(classes):
        found = 0
        for dirpath, _, fnames in sorted(os.walk(root / name, followlinks=True)):
            for fname in sorted(fnames):
                if fname.lower().endswith(exts):
                    paths.append(os.path.join(dirpath, fname))
                    targets.append(label)
                    found += 1
        if not found:
            empty.append(name)
    if empty:
        raise FileNotFoundError(
            f"class folder(s) {empty!r} under {str(root)!r} hold no file ending in {exts!r}; "
            "remove them or pass the right extensions="
        )
    return FolderIndex(str(root), classes, paths, targets)
