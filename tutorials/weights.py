"""Tutorial: model weights as directory trees.

From a model to a TensorDict, onto the disk as one folder per submodule, back into
another model without a copy, part of it only, through a state dict, with tied
weights, and as a functional call. Run it::

    python tutorials/weights.py           # a 22M-parameter transformer
    python tutorials/weights.py --small   # a tiny one (CI: a few seconds)

Every step checks what it claims (``assert``), so the tutorial is also a test.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tensorbox.weights as tbnn
from tensorbox import TensorDict


def step(title: str) -> None:
    print(f"\n== {title}")


def make_model(small: bool, seed: int) -> nn.Transformer:
    torch.manual_seed(seed)
    d, heads, layers, ff = (32, 2, 1, 64) if small else (512, 8, 3, 2048)
    # batch_first=True also avoids a warning of nn.Transformer's default layout
    return nn.Transformer(d, heads, layers, layers, ff, batch_first=True).eval()


def outputs(model: nn.Transformer) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    d = model.d_model
    with torch.no_grad():
        return model(torch.randn(2, 7, d, generator=g), torch.randn(2, 5, d, generator=g))


def nbytes(td: TensorDict) -> int:
    return sum(t.nbytes for t in td.values(include_nested=True, leaves_only=True))


class TinyLM(nn.Module):
    """An embedding whose matrix is also the output head (tied weights)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(100, 16)
        self.norm = nn.LayerNorm(16)
        self.head = nn.Linear(16, 100, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.emb(x)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", action="store_true", help="tiny model (CI)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory(prefix="tensorbox-weights-") as tmp:
        tour(Path(tmp), args.small)


def tour(root: Path, small: bool) -> None:
    model = make_model(small, seed=0)
    expected = outputs(model)

    step("1. A module's weights as a TensorDict (same objects, nested keys)")
    weights = TensorDict.from_module(model)
    leaves = list(weights.keys(include_nested=True, leaves_only=True))
    print(f"{len(leaves)} tensors, {nbytes(weights) / 2**20:.1f} MiB; first keys: {leaves[:2]}")
    assert weights["encoder", "layers", "0", "linear1", "weight"] is (
        model.encoder.layers[0].linear1.weight
    )
    assert list(weights.state_dict()) == list(model.state_dict())  # the same keys, dotted

    step("2. Save: one folder per submodule, one raw file per tensor")
    t0 = time.perf_counter()
    weights.memmap(root / "model", num_threads=2)
    print(f"saved in {(time.perf_counter() - t0) * 1e3:.0f} ms to {root / 'model'}")
    if importlib.util.find_spec("tensorbox.__main__") is not None:
        shown = subprocess.run(
            [sys.executable, "-m", "tensorbox", "show", str(root / "model" / "encoder")],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parents[1],
        ).stdout.splitlines()
        print("$ python -m tensorbox show model/encoder")
        print("\n".join(shown[:12] + (["..."] if len(shown) > 13 else []) + shown[-1:]))

    step("3. Load into another model: map the files, swap them in (zero copy)")
    model2 = make_model(small, seed=1)
    t0 = time.perf_counter()
    previous = TensorDict.load_memmap(root / "model").to_module(model2)
    print(f"load_memmap + to_module: {(time.perf_counter() - t0) * 1e3:.1f} ms")
    w = model2.encoder.layers[0].linear1.weight
    print(f"model2 weight: {type(w).__name__}, requires_grad={w.requires_grad}")
    print(f"  its storage is the file {w.untyped_storage().filename}")
    assert torch.equal(outputs(model2), expected)
    previous.to_module(model2)  # what to_module returned puts the old weights back
    assert not torch.equal(outputs(model2), expected)

    step("4. Load only the encoder: open its folder, only its files are mapped")
    enc = TensorDict.load_memmap(root / "model" / "encoder")
    enc.to_module(model2.encoder)
    print(f"encoder: {nbytes(enc) / 2**20:.2f} of {nbytes(weights) / 2**20:.2f} MiB")
    assert torch.equal(
        model2.encoder.layers[0].linear1.weight, model.encoder.layers[0].linear1.weight
    )

    step("5. A functional call: swap for the duration of a with-block")
    noisy = weights.apply(lambda t: t.detach() + 0.01 * torch.randn_like(t))
    with noisy.to_module(model):
        inside = outputs(model)
    print(f"max change inside the block: {(inside - expected).abs().max():.3g}; after: restored")
    assert torch.equal(outputs(model), expected)

    step("6. Tied weights stay tied through the disk")
    lm = TinyLM()
    TensorDict.from_module(lm).memmap(root / "lm")
    lm2 = TinyLM()
    TensorDict.load_memmap(root / "lm").to_module(lm2)
    tokens = torch.tensor([[1, 2, 3]])
    assert lm2.emb.weight is lm2.head.weight and torch.equal(lm2(tokens), lm(tokens))
    print("lm2.emb.weight is lm2.head.weight:", lm2.emb.weight is lm2.head.weight)

    step("7. From a torch.save checkpoint to a tree, chunk by chunk")
    torch.save(model.state_dict(), root / "ckpt.pt")
    tree = TensorDict.from_module(model).memmap_like(root / "converted")  # sparse files
    tree.load_state_dict(torch.load(root / "ckpt.pt", mmap=True))  # slices of 32 MiB at most
    model3 = make_model(small, seed=3)
    model3.load_state_dict(TensorDict.load_memmap(root / "converted").state_dict())
    assert torch.equal(outputs(model3), expected)
    print(f"converted; chunk size {tbnn.CHUNK_BYTES >> 20} MiB; nn.Module accepts it back")

    step("8. Fine-tuning without touching the checkpoint: copy, not swap")
    model4 = make_model(small, seed=4)
    TensorDict.load_memmap(root / "model").to_module(model4, inplace=True)
    opt = torch.optim.SGD(model4.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(0)
    model4.train()
    loss = (
        model4(
            torch.randn(2, 7, model4.d_model, generator=g),
            torch.randn(2, 5, model4.d_model, generator=g),
        )
        .pow(2)
        .mean()
    )
    loss.backward()
    opt.step()
    on_disk = TensorDict.load_memmap(root / "model")["encoder", "layers", "0", "linear1", "weight"]
    assert torch.equal(on_disk, model.encoder.layers[0].linear1.weight)
    print("after an optimizer step on model4, the saved weights are unchanged")

    step("9. as_module=True: the weights as an nn.Module, for an optimizer")
    params = TensorDict.from_module(model, as_module=True)
    print(
        f"{type(params).__name__}: {sum(1 for _ in params.parameters())} parameters, the model's own"
    )
    assert params["decoder", "norm", "weight"] is model.decoder.norm.weight


if __name__ == "__main__":
    main()
