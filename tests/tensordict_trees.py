"""Trees written by the real tensordict, for the reader's tests: a tensorclass inside a
TensorDict, a recursive tensorclass, lazy stacks (dense-able, ragged, nested).

``python -m tests.tensordict_trees DIR`` (with tensordict installed) rewrites the
checked-in copy ``tests/fixtures/tensordict_nested_trees`` that the tests use when
tensordict is not installed. The class names are unusual on purpose: the reader
matches an unregistered tensordict class to the one class registered under its name.
"""

from __future__ import annotations

import shutil
import sys
import warnings
from pathlib import Path
from typing import Any, Optional

import torch

NAMES = ("tc_in_td", "recursive", "lazy_same", "lazy_ragged", "lazy_in_td", "unknown_tc")


def write_trees(out: Path) -> None:
    """Write every tree of :data:`NAMES` under ``out`` with tensordict."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from tensordict import TensorDict, lazy_stack, tensorclass

    @tensorclass
    class LegacyLeafTC:
        y: torch.Tensor

    @tensorclass
    class LegacyNodeTC:
        x: torch.Tensor
        name: str = "n"
        child: Optional[LegacyNodeTC] = None  # noqa: UP045 - tensordict reads the annotation

    @tensorclass
    class LegacyNobodyTC:
        z: torch.Tensor

    shutil.rmtree(out, ignore_errors=True)
    leaf = LegacyLeafTC(y=torch.arange(6.0).reshape(3, 2), batch_size=[3])
    TensorDict(a=torch.arange(3), n=leaf, batch_size=[3]).memmap(out / "tc_in_td")
    kid = LegacyNodeTC(x=torch.ones(2), name="kid", batch_size=[2])
    root = LegacyNodeTC(x=torch.zeros(2), name="root", child=kid, batch_size=[2])
    root.memmap(out / "recursive")

    def el(v: float, n: int = 3) -> Any:
        return TensorDict(a=torch.full((n,), v), b={"c": torch.full((2,), v)})

    lazy_stack([el(0.0), el(1.0)]).memmap(out / "lazy_same")
    lazy_stack([el(0.0), el(1.0, 4)]).memmap(out / "lazy_ragged")
    TensorDict(s=lazy_stack([el(2.0), el(3.0)]), batch_size=[2]).memmap(out / "lazy_in_td")
    LegacyNobodyTC(z=torch.arange(4), batch_size=[4]).memmap(out / "unknown_tc")


if __name__ == "__main__":
    write_trees(Path(sys.argv[1]))
