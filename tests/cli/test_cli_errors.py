"""The command line's errors as a user meets them: one ``error:`` line that says what to
do, never a traceback (a missing extra included), ``--json`` printing JSON whatever
happens, and the ``tensorbox`` console script."""

from __future__ import annotations

import importlib
import json
import sys
import tomllib
from pathlib import Path

import pytest
import torch

from tensorbox import TensorDict
from tensorbox.cli import main

ROOT = Path(__file__).resolve().parents[2]
NO_S3FS = "error: 's3://bucket/t': s3:// URLs need the 's3fs' package: pip install 'tensorbox[s3]'"


@pytest.fixture
def no_s3fs(monkeypatch: pytest.MonkeyPatch) -> None:
    """An environment without the s3 extra: importing s3fs fails, as when not installed."""
    monkeypatch.setitem(sys.modules, "s3fs", None)


@pytest.mark.parametrize(
    "args",
    [["show", "s3://bucket/t"], ["verify", "--read", "s3://bucket/t"]],
)
def test_a_missing_extra_is_one_error_line(
    no_s3fs: None, args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(args) == 1
    out, err = capsys.readouterr()
    assert (out, err) == ("", NO_S3FS + "\n")


def test_unpack_from_a_url_without_its_extra(
    no_s3fs: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["unpack", "s3://bucket/t.tbx", str(tmp_path / "u")]) == 1
    assert capsys.readouterr().err == NO_S3FS.replace("/t'", "/t.tbx'") + "\n"
    assert not (tmp_path / "u").exists()


@pytest.mark.parametrize("command", ["show", "verify"])
def test_json_reports_a_missing_extra_as_json(
    no_s3fs: None, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command, "--json", "s3://bucket/t"]) == 1
    out, err = capsys.readouterr()
    assert err == ""
    assert json.loads(out) == {
        "ok": False,
        "path": "s3://bucket/t",
        "error": NO_S3FS.removeprefix("error: "),
    }


def test_bad_input_is_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "foo://x"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith("error: 'foo://x': unknown URL scheme 'foo'; tensorbox reads")


def test_json_always_prints_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def run(*args: str) -> tuple[int, dict[str, object]]:
        code = main(list(args))
        out, err = capsys.readouterr()
        assert err == "", args
        return code, json.loads(out)

    missing = str(tmp_path / "nope")
    code, doc = run("show", "--json", missing)
    assert code == 1 and doc == {
        "ok": False,
        "path": missing,
        "error": f"no saved tree at {missing!r}: not a directory",
    }
    path = tmp_path / "t"
    TensorDict({"x": torch.zeros(4, 2)}, batch_size=[4]).memmap(path)
    file = tmp_path / "t.tbx"
    code, doc = run("pack", "--json", str(path), str(file))
    assert code == 0 and doc == {
        "ok": True,
        "path": str(path),
        "file": str(file),
        "nodes": 1,
        "tensors": 1,
    }
    code, doc = run("pack", "--json", str(path), str(file))
    assert code == 1 and doc["ok"] is False
    assert str(doc["error"]).endswith("exists; pass --force to replace it, or choose another path")
    code, doc = run("unpack", "--json", str(file), str(tmp_path / "u"))
    assert code == 0 and doc == {
        "ok": True,
        "path": str(file),
        "dir": str(tmp_path / "u"),
        "nodes": 1,
        "files": 2,
    }
    (path / "meta.json").write_text("{")
    code, doc = run("verify", "--json", str(path))
    assert code == 1 and "meta.json is not valid JSON" in str(doc["damaged"])


def test_json_usage_errors_are_json(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit, match="2"):
        main(["verify", "--json"])
    out, err = capsys.readouterr()
    assert err == ""
    doc = json.loads(out)
    assert doc["ok"] is False
    assert doc["error"].startswith("usage: the following arguments are required: path (see ")
    # without --json, argparse's usage message as usual
    with pytest.raises(SystemExit, match="2"):
        main(["verify"])
    assert "error: the following arguments are required: path" in capsys.readouterr().err


def test_console_script(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "scripts"
    ]
    module, _, name = scripts["tensorbox"].partition(":")
    assert getattr(importlib.import_module(module), name) is main
    # run as the script pip writes (sys.argv[0] is its path): the usage says `tensorbox`
    monkeypatch.setattr(sys, "argv", ["/venv/bin/tensorbox", "--help"])
    with pytest.raises(SystemExit, match="0"):
        main()
    assert capsys.readouterr().out.startswith("usage: tensorbox [-h]")
