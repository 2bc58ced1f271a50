"""An append loop's progress: ``extend_`` reports its rows to a Progress counting rows."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest
import torch

from tensorbox import TensorDict
from tensorbox.progress import Progress, advance


def _rows(n: int) -> TensorDict:
    return TensorDict(x=torch.ones(n, 3), y={"z": torch.arange(n)}, batch_size=[n])


@pytest.mark.parametrize("saved", [False, True], ids=["in-memory", "saved-tree"])
def test_extend_reports_its_rows(tmp_path: Path, saved: bool) -> None:
    td = _rows(0)
    if saved:
        td = td.memmap(tmp_path / "t")
    out = io.StringIO()
    with Progress("append", total=60, unit="rows", progress=True, file=out, bar=False) as p:
        for n in (10, 20, 0, 30):
            td.extend_(_rows(n))
            assert p.done == td.batch_size[0]  # the bytes the saved tree wrote are not rows
    assert p.files == 0
    assert td.batch_size == torch.Size([60])
    assert out.getvalue().splitlines()[-1] == p.summary()
    assert p.summary().startswith("append: 60 rows, ")


def test_a_refused_append_counts_nothing() -> None:
    td = _rows(4)
    with Progress("append", unit="rows", progress=False) as p:
        with pytest.raises(TypeError, match=r"extend_: .* has dtype torch.float64 in rows"):
            td.extend_(
                TensorDict(
                    x=torch.ones(2, 3, dtype=torch.float64),
                    y={"z": torch.arange(2)},
                    batch_size=[2],
                )
            )
        td.extend_(_rows(2))
    assert p.done == 2


def test_a_progress_counts_only_its_unit(tmp_path: Path) -> None:
    with Progress("append", unit="rows", progress=False) as rows:
        _rows(8).memmap(tmp_path / "saved", progress=False)  # bytes: not rows
        advance(100)
    assert rows.done == 0
    with Progress("save", progress=False) as nbytes:
        _rows(8).extend_(_rows(2))  # rows: not bytes
        advance(100)
    assert nbytes.done == 100


def test_the_loop_summary_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    td = _rows(0)
    with (
        caplog.at_level(logging.INFO, logger="tensorbox"),
        Progress("append", total=5, unit="rows", progress=False),
    ):
        td.extend_(_rows(5))
    assert [r.getMessage().split(",")[0] for r in caplog.records] == ["append: 5 rows"]
