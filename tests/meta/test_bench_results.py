"""The benchmarks' JSON results and the charts drawn from them (benchmarks/figures.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import _results

ROOT = Path(__file__).resolve().parents[2]
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


@pytest.mark.heavy
def test_the_charts_draw_from_the_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("matplotlib")
    from benchmarks import figures

    monkeypatch.setattr(figures, "IMG", tmp_path / "img")
    # persist() and loader() also write their pages' tables: into copies of the pages,
    # with the tables taken out
    pages = {}
    for name, page in figures.TABLE_PAGES.items():
        start_line, end_line = figures.table_markers(name)
        text = page.read_text(encoding="utf-8")
        start = text.index(start_line) + len(start_line)
        copy = tmp_path / page.name
        copy.write_text(text[:start] + "\n" + text[text.index(end_line, start) :])
        monkeypatch.setitem(figures.TABLE_PAGES, name, copy)
        pages[copy] = text
    plt = figures._setup()
    for name in ("ops", "persist", "loader"):
        figures.FIGURES[name](plt)
    drawn = {p.name for p in (tmp_path / "img").iterdir()}
    assert drawn == {"ops.svg", "persist.svg", "loader.svg"}
    assert "Source: benchmarks/ops.py" in (tmp_path / "img" / "ops.svg").read_text()
    for copy, text in pages.items():
        assert copy.read_text(encoding="utf-8") == text, f"{copy.name}: run figures.py"


@pytest.mark.parametrize("name", ["persist", "dataload"])
def test_the_tables_are_the_charts_results(name: str) -> None:
    # A page's tables and its chart come from the same results file (no matplotlib
    # needed to check: the tables are text).
    from benchmarks import figures

    r = json.loads((ROOT / "benchmarks" / "results" / f"{name}.json").read_text())
    page = figures.TABLE_PAGES[name].read_text(encoding="utf-8")
    start_line, end_line = figures.table_markers(name)
    block = page[page.index(start_line) : page.index(end_line)]
    assert figures.TABLES[name](r) in block, "run `python benchmarks/figures.py`"
    assert f"benchmarks/results/{name}.json" in page and r["date"] in page


def test_the_save_text_quotes_the_results() -> None:
    from benchmarks import figures

    r = json.loads((ROOT / "benchmarks" / "results" / "persist.json").read_text())
    page = figures.TABLE_PAGES["persist"].read_text(encoding="utf-8")
    for label in ("tensorbox (default)", "tensordict 0.15.3 memmap"):
        for col in (0, 2):
            assert f"{figures._ms(r['save_ms'][label][col])} ms" in page, (label, col)
