"""The core's ports (``tensorbox/_core/ports.py``) and the package face that binds them.

The core imports nothing above it (``tests/meta/test_layout.py``); what it needs from the
layers above it reaches through ports bound by the face. Here: every binding resolves to
an object that has every member of its port's protocol, and a port bound to nothing is
an error that says so.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tensorbox
from tensorbox import TensorDict
from tensorbox._core import ports

ROOT = Path(__file__).resolve().parents[2]

PROTOCOLS = {
    "persistence": ports.Persistence,
    "file_refs": ports.FileRefs,
    "backing": ports.Backing,
    "weights": ports.Weights,
    "distributed": ports.Distributed,
}


def test_the_face_binds_every_port_the_core_names() -> None:
    # the accessors' port names, read from ports.py: each is bound by the face
    text = (ROOT / "tensorbox" / "_core" / "ports.py").read_text(encoding="utf-8")
    import re

    named = set(re.findall(r'port\("([a-z_]+)"\)', text)) - {"no-such-port"}
    assert named <= set(tensorbox._PORTS), named - set(tensorbox._PORTS)
    assert set(PROTOCOLS) <= named


@pytest.mark.parametrize("name", sorted(PROTOCOLS))
def test_each_binding_meets_its_protocol(name: str) -> None:
    target = ports.port(name)
    proto = PROTOCOLS[name]
    members = [m for m, v in vars(proto).items() if callable(v) and not m.startswith("_")]
    assert members
    missing = sorted(m for m in members if not callable(getattr(target, m, None)))
    assert missing == [], f"{tensorbox._PORTS[name]} lacks {missing}"


@pytest.mark.parametrize("name", sorted(tensorbox._PORTS))
def test_each_binding_resolves(name: str) -> None:
    if name.startswith("format."):
        fmt = name.removeprefix("format.")
        module = ports.formats(fmt)
        assert any(hasattr(module, f"{way}_{fmt}") for way in ("from", "to")), name
    else:
        assert ports.port(name) is not None


def test_an_unbound_port_says_so() -> None:
    path = ports.unbind("weights")
    try:
        with pytest.raises(
            ports.PortUnboundError,
            match=r"the core's port 'weights' is bound to nothing: the package face",
        ):
            TensorDict.from_module(torch.nn.Linear(2, 2))
        with pytest.raises(LookupError, match=r"bind it with tensorbox\._core\.ports\.bind"):
            ports.weights()
    finally:
        assert path is not None
        ports.bind({"weights": path})
    assert TensorDict.from_module(torch.nn.Linear(2, 2))["weight"].shape == (2, 2)


def test_an_installed_backing_hook_takes_the_place_of_the_bound_one(tmp_path: Path) -> None:
    from tensorbox._core import backing

    calls: list[str] = []
    default = ports.backing()

    class Counting:
        def through(self, node, fn, *args):  # type: ignore[no-untyped-def]
            calls.append("through")
            return default.through(node, fn, *args)

        def write_rows(self, node, index, value):  # type: ignore[no-untyped-def]
            calls.append("rows")
            default.write_rows(node, index, value)

    saved = TensorDict(x=torch.zeros(2), batch_size=[2]).memmap(tmp_path / "t")
    backing.install(Counting())
    try:
        with saved.unlock_():
            saved["y"] = torch.ones(2)
        assert calls == ["through"]
        assert backing.hook() is not default
    finally:
        backing.install(default)
    assert sorted(TensorDict.load_memmap(tmp_path / "t").keys()) == ["x", "y"]


def test_the_core_alone_loads_the_face_first() -> None:
    # importing a core module runs the package face (its parent) first, so the ports are
    # bound before any core code runs, in a fresh process too
    code = (
        "from tensorbox._core.tensordict import TensorDict; import torch; "
        "td = TensorDict(a={'b': torch.zeros(1)}); print(type(td['a']).__name__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": ""},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "TensorDict"
