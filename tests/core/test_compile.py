"""torch.compile sees through a TensorDict (it is a registered pytree node).

The default run compiles with ``backend="eager"`` (graph capture only: fast); the
inductor run, which generates and compiles kernels, is marked slow.
"""

from __future__ import annotations

import pytest
import torch

from tensorbox import TensorDict

# Heavy: runs torch.compile. The quick loop (`make check`) leaves the module out without importing
# it (tests/conftest.py reads the line below from the source).
pytestmark = pytest.mark.heavy


def step(td: TensorDict) -> TensorDict:
    obs = td["obs"]
    return TensorDict(
        {"out": obs * 2 + td["n", "bias"], "norm": {"sq": (obs**2).sum(-1)}},
        batch_size=td.batch_size,
    )


def make() -> TensorDict:
    return TensorDict(
        {"obs": torch.randn(4, 3), "n": {"bias": torch.ones(4, 3)}, "tag": "env"},
        batch_size=[4],
    )


def check(backend: str) -> None:
    torch._dynamo.reset()
    compiled = torch.compile(step, backend=backend, fullgraph=True)
    td = make()
    out = compiled(td)
    ref = step(td)
    assert isinstance(out, TensorDict) and out.batch_size == torch.Size([4])
    assert out.keys(True) == ref.keys(True)
    for key in ref.keys(True, True):
        torch.testing.assert_close(out[key], ref[key])
    # A second call with new values (same structure) reuses the graph and stays right.
    td2 = make()
    torch.testing.assert_close(compiled(td2)["out"], step(td2)["out"])


def test_compile_fullgraph_eager() -> None:
    check("eager")


@pytest.mark.slow
# Inductor's own import path calls a deprecated torch.jit API (torch 2.13): not ours.
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
def test_compile_fullgraph_inductor() -> None:
    check("inductor")


def test_compile_with_tensordict_methods() -> None:
    torch._dynamo.reset()

    def f(td: TensorDict) -> TensorDict:
        return td.apply(lambda t: t + 1)[1:]

    td = make()
    out = torch.compile(f, backend="eager")(td)
    assert out.batch_size == torch.Size([3])
    torch.testing.assert_close(out["obs"], td["obs"][1:] + 1)
    assert out["tag"] == "env"
