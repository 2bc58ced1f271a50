"""``python -m tensorbox show / verify``."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tensorbox import TensorDict
from tensorbox.cli import main

DATA = Path(__file__).resolve().parents[1] / "fixtures"


def _tree(path: Path) -> Path:
    TensorDict(
        {"obs": torch.zeros(4, 3), "info": {"id": torch.arange(4)}, "name": "run"}, batch_size=[4]
    ).memmap(path)
    return path


def test_show(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", str(_tree(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "TensorDict batch_size=[4] device=None (format tensorbox v2)" in out
    assert "├── 'obs': float32 [4, 3] 48 B  [obs.memmap]" in out
    assert "├── 'info': TensorDict batch_size=[4]  [info/]" in out
    assert "│   └── 'id': int64 [4] 32 B  [id.memmap]" in out
    assert "└── 'name': value 'run'" in out
    assert out.rstrip().endswith("total: 80 B")


def test_show_a_tensordict_tree(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", str(DATA / "tensordict_0_15_tree")]) == 0
    out = capsys.readouterr().out
    assert "(format tensordict v1)" in out and "'weird key': float64 [3, 2] 48 B" in out


def test_verify_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", "--read", str(_tree(tmp_path))]) == 0
    assert capsys.readouterr().out == (
        "ok: 2 nodes, 2 tensors, 80 B\nnote: 2 of 2 tensors have no checksums recorded: "
        "bytes not verified (read to the end only; save with checksum=True to record them)\n"
    )


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (
            lambda p: (p / "obs.memmap").write_bytes(bytes(10)),
            r"obs.memmap is 10 bytes, but float32 of shape \[4, 3\] needs 48",
        ),
        (lambda p: (p / "info" / "id.memmap").unlink(), r"info/id.memmap is missing"),
        (lambda p: (p / "meta.json").unlink(), r"meta.json is missing: the save .* did not finish"),
        (lambda p: (p / "info" / "meta.json").write_text("{"), r"info/meta.json is not valid JSON"),
        (
            lambda p: _edit(p / "info" / "meta.json", batch_size=[5]),
            r"batch_size \[5\] does not start with its parent's \[4\]",
        ),
        (
            lambda p: _edit(p / "meta.json", version=9),
            "format version 9; this tensorbox reads versions 1, 2",
        ),
    ],
)
def test_verify_damaged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage, reason: str
) -> None:
    path = _tree(tmp_path)
    damage(path)
    assert main(["verify", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("damaged: ")
    assert re.search(reason, err), err


def _edit(meta: Path, **fields: object) -> None:
    doc = json.loads(meta.read_text())
    doc.update(fields)
    if "batch_size" in fields:
        doc["entries"] = {}
    meta.write_text(json.dumps(doc))


def test_verify_missing_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", str(tmp_path / "nope")]) == 1
    assert "error: no saved tree at" in capsys.readouterr().err


@pytest.mark.heavy
def test_as_a_program(tmp_path: Path) -> None:
    path = shutil.copytree(DATA / "tensordict_mmap_example", tmp_path / "t")
    assert main(["verify", str(path)]) == 0
    (path / "nested" / "int64.memmap").write_bytes(b"x")
    run = subprocess.run(
        [sys.executable, "-m", "tensorbox", "verify", str(path)], capture_output=True, text=True
    )
    assert run.returncode == 1 and run.stdout == ""
    assert "damaged: " in run.stderr and "int64.memmap is 1 bytes" in run.stderr


def test_show_escapes_names_and_values_from_the_tree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    evil = "\x1b[2K\rowned"
    TensorDict({"x": torch.zeros(2), evil: "\x1b]0;title\x07"}, [2]).memmap(tmp_path)
    meta = json.loads((tmp_path / "meta.json").read_text())
    meta["type"] = evil
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    assert main(["show", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\r" not in out and "\x07" not in out
    assert r"\x1b[2K\rowned batch_size=[2]" in out
    assert r"'\x1b[2K\rowned': value '\x1b]0;title\x07'" in out


@pytest.mark.parametrize(
    ("value", "shown"),
    [("[" * 1000 + "]" * 1000, "value [[[[[...]]]]]"), ("9" * 4000, "value 99999")],
)
def test_show_survives_deep_and_huge_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, shown: str
) -> None:
    TensorDict({"x": torch.zeros(2)}, [2]).memmap(tmp_path)
    text = (tmp_path / "meta.json").read_text().rstrip()
    assert text.endswith("}}")
    text = text[:-2] + f',\n"v": {{"kind": "json", "value": {value}}}}}}}'
    (tmp_path / "meta.json").write_text(text)
    assert main(["show", str(tmp_path)]) == 0
    assert f"'v': {shown}" in capsys.readouterr().out


def test_verify_does_not_block_on_a_fifo(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _tree(tmp_path)
    (tmp_path / "info" / "id.memmap").unlink()
    os.mkfifo(tmp_path / "info" / "id.memmap")
    assert main(["verify", "--read", str(tmp_path)]) == 1
    assert "id.memmap is not a regular file" in capsys.readouterr().err
