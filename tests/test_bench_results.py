"""The benchmarks' JSON results and the charts drawn from them (benchmarks/figures.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import _results

ROOT = Path(__file__).resolve().parents[1]
RESULTS = sorted((ROOT / "benchmarks" / "results").glob("*.json"))


def test_a_run_records_script_date_machine_and_load(tmp_path: Path) -> None:
    r = _results.start("demo")
    r["rows"] = [{"op": "x", "us": 1.23456789}]
    _results.write(tmp_path / "out" / "demo.json", r)
    back = json.loads((tmp_path / "out" / "demo.json").read_text())
    assert back["benchmark"] == "demo" and back["rows"] == [{"op": "x", "us": 1.235}]
    assert set(back["machine"]["load_average"]) == {"start", "end"}
    assert {"cpus", "torch", "tensorbox", "python"} <= set(back["machine"])
    assert back["source"].startswith(back["script"]) and back["date"] in back["source"]
    assert "load average" in back["source"]
    assert not list((tmp_path / "out").glob("*.partial"))  # written by a rename


@pytest.mark.parametrize("path", RESULTS, ids=[p.stem for p in RESULTS])
def test_every_result_says_where_it_comes_from(path: Path) -> None:
    r = json.loads(path.read_text())
    assert r["benchmark"] == path.stem
    if "machine" in r:  # written by the script
        assert r["script"].startswith(f"benchmarks/{path.stem}.py")
        assert r["machine"]["load_average"]["start"]
    else:  # transcribed by hand: it must say so, and when the numbers were measured
        assert r["source"].startswith("NOT a fresh run") and r["date"]


def test_the_charts_draw_from_the_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("matplotlib")
    from benchmarks import figures

    monkeypatch.setattr(figures, "IMG", tmp_path / "img")
    # persist() also writes the page's tables: into a copy of the page, with them removed
    page = tmp_path / "persistence.md"
    text = figures.PERSIST_PAGE.read_text(encoding="utf-8")
    start = text.index(figures.TABLE_START) + len(figures.TABLE_START)
    page.write_text(text[:start] + "\n" + text[text.index(figures.TABLE_END) :])
    monkeypatch.setattr(figures, "PERSIST_PAGE", page)
    plt = figures._setup()
    for name in ("ops", "persist", "loader"):
        figures.FIGURES[name](plt)
    drawn = {p.name for p in (tmp_path / "img").iterdir()}
    assert drawn == {"ops.svg", "persist.svg", "loader.svg"}
    assert "Source: benchmarks/ops.py" in (tmp_path / "img" / "ops.svg").read_text()
    assert page.read_text(encoding="utf-8") == text


def test_the_persist_tables_are_the_charts_results() -> None:
    # docs/persistence.md's tables and its chart come from the same results file.
    from benchmarks import figures

    r = json.loads((ROOT / "benchmarks" / "results" / "persist.json").read_text())
    page = (ROOT / "docs" / "persistence.md").read_text(encoding="utf-8")
    block = page[page.index(figures.TABLE_START) : page.index(figures.TABLE_END)]
    assert figures.persist_tables(r) in block, "run `python benchmarks/figures.py --only persist`"
    # and the text's figures are the file's
    save = r["save_ms"]
    for label, col in (("tensorbox (num_threads=0)", 0), ("tensordict 0.15.3 memmap", 0)):
        assert f"{figures._ms(save[label][col])} ms" in page
