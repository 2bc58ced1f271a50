"""The command line as people expect it: ``--version``, ``--json``, a quiet closed pipe,
``pack``/``unpack`` refusing existing targets, ``--progress`` and its summary line."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tensorbox
from tensorbox import TensorDict
from tensorbox.cli import main
from tests.checkout import checkout_env


def _tree(path: Path) -> Path:
    TensorDict(
        {"obs": torch.zeros(4, 3), "info": {"id": torch.arange(4)}, "name": "run"}, batch_size=[4]
    ).memmap(path)
    return path


def _cli(*args: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tensorbox", *args],
        env=checkout_env(),
        capture_output=True,
        text=True,
        timeout=120,
        **kw,  # type: ignore[call-overload]
    )


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit, match="0"):
        main(["--version"])
    assert capsys.readouterr().out == f"tensorbox {tensorbox.__version__}\n"


def test_show_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _tree(tmp_path / "t")
    assert main(["show", "--json", str(path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["format"] == {"origin": "tensorbox", "version": 2} and doc["archive"] is False
    assert doc["type"] == "TensorDict" and doc["batch_size"] == [4] and doc["nbytes"] == 80
    assert doc["entries"]["obs"] == {
        "kind": "tensor",
        "dtype": "float32",
        "shape": [4, 3],
        "nbytes": 48,
        "file": "obs.memmap",
        "sha256": None,
    }
    info = doc["entries"]["info"]
    assert info["kind"] == "node" and info["entries"]["id"]["dtype"] == "int64"
    assert doc["entries"]["name"] == {"kind": "value", "value": "run"}
    # the archive form says so
    assert main(["pack", str(path), str(tmp_path / "t.tbx")]) == 0
    capsys.readouterr()
    assert main(["show", "--json", f"{tmp_path / 't.tbx'}::info"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["archive"] is True and list(doc["entries"]) == ["id"]


def test_verify_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _tree(tmp_path / "t")
    assert main(["verify", "--json", "--read", str(path)]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "ok": True,
        "path": str(path),
        "read": True,
        "nodes": 2,
        "tensors": 2,
        "nbytes": 80,
    }
    (path / "obs.memmap").write_bytes(bytes(10))
    assert main(["verify", "--json", str(path)]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False
    assert "obs.memmap is 10 bytes, but float32 of shape [4, 3] needs 48" in doc["damaged"]
    assert main(["verify", "--json", str(tmp_path / "nope")]) == 1
    assert "no saved tree at" in json.loads(capsys.readouterr().out)["error"]


def test_pack_and_unpack_refuse_existing_targets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _tree(tmp_path / "t")
    file = tmp_path / "t.tbx"
    file.write_bytes(b"mine")
    assert main(["pack", str(path), str(file)]) == 1
    assert "error: pack target" in capsys.readouterr().err and file.read_bytes() == b"mine"
    file.unlink()
    assert main(["pack", str(path), str(file)]) == 0
    assert main(["pack", str(path), str(file)]) == 1
    assert "exists; pass --force" in capsys.readouterr().err
    assert main(["pack", "--force", str(path), str(file)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t", "t.tbx"]  # no stage left
    file.write_bytes(b"mine")  # --force replaces any file, in one step
    assert main(["pack", "--force", str(path), str(file)]) == 0
    assert TensorDict.load_memmap(file)["obs"].shape == (4, 3)
    # unpack: a missing or empty folder is fine, a folder with anything in it is refused
    (tmp_path / "empty").mkdir()
    assert main(["unpack", str(file), str(tmp_path / "empty")]) == 0
    target = tmp_path / "u"
    target.mkdir()
    (target / "notes.txt").write_text("keep me")
    assert main(["unpack", str(file), str(target)]) == 1
    err = capsys.readouterr().err
    assert "error: cannot unpack into" in err
    assert "a folder is there and not empty. Pass force=True (--force)" in err
    assert sorted(p.name for p in target.iterdir()) == ["notes.txt"]
    # --force replaces the saved tree there and leaves other files alone
    assert main(["unpack", "--force", str(file), str(target)]) == 0
    assert (target / "notes.txt").read_text() == "keep me"
    assert TensorDict.load_memmap(target)["info", "id"].tolist() == [0, 1, 2, 3]


@pytest.mark.heavy
def test_closed_pipe_is_quiet(tmp_path: Path) -> None:
    path = tmp_path / "wide"
    TensorDict({f"k{i}": torch.zeros(2) for i in range(2000)}, batch_size=[2]).memmap(path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tensorbox", "show", str(path)],
        env=checkout_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    with proc, proc.stderr:
        first = proc.stdout.readline()
        proc.stdout.close()  # as `| head -1` does
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=120) == 141
    assert first.startswith(str(path).encode()) and err == ""


def test_progress_summary_and_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    path = _tree(tmp_path / "t")
    with caplog.at_level(logging.INFO, logger="tensorbox"):
        assert main(["pack", "--progress", str(path), str(tmp_path / "t.tbx")]) == 0
        assert main(["verify", "--read", "--no-progress", str(path)]) == 0
    err = capsys.readouterr().err
    # tqdm's bar (or the plain line without tqdm), then the summary that stays
    assert "pack: 80 B in 2 files, " in err and " s, " in err
    messages = [r.getMessage() for r in caplog.records if r.name == "tensorbox"]
    assert any(m.startswith("pack: 80 B in 2 files, ") for m in messages)
    assert any(m.startswith("verify: 80 B in 2 files, ") for m in messages)
    # without --progress and without a terminal: only the result line
    assert main(["unpack", str(tmp_path / "t.tbx"), str(tmp_path / "u")]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out.startswith("unpacked 4 files")


@pytest.mark.heavy
def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit, match="2"):
        main(["show"])
    assert "the following arguments are required: path" in capsys.readouterr().err
    proc = _cli("--help")
    assert proc.returncode == 0 and "exit status: 0 success, 1 damaged" in proc.stdout
