"""Tutorial: a token dataset of variable-length sequences, grown on disk, trained from.

A generated corpus is "tokenised" chunk by chunk; each chunk's sequences are appended
with ``extend_`` to one memory-mapped tree whose ``tokens`` leaf is a jagged nested
tensor (``torch.nested``, ``layout=torch.jagged``): a values file and an offsets file,
no padding on disk. A tiny bag-of-embeddings classifier then trains from it through a
plain ``DataLoader`` whose collate function, ``ds.pad_rows``, reads each batch padded
to its own longest row. Run it::

    python tutorials/text.py           # 200,000 documents
    python tutorials/text.py --small   # 3,000 documents (CI: a few seconds)

Every step checks what it claims (``assert``), so the tutorial is also a test.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tensorbox import TensorDict

TOPICS = 4
WORDS_PER_TOPIC = 50
MAX_LEN = 400
MEAN_LEN = 40


def step(title: str) -> None:
    print(f"\n== {title}")


# ---------------------------------------------------------------- the corpus


def corpus(n: int, seed: int) -> Iterator[tuple[str, int]]:
    """Documents as text, with their topic: each topic favours its own words, and every
    document mixes in common ones. Lengths are skewed, as real text's: most documents
    are short (``MEAN_LEN`` words on average), a few long (up to ``MAX_LEN``), some empty."""
    g = torch.Generator().manual_seed(seed)
    common = [f"the{i}" for i in range(20)]
    for _ in range(n):
        topic = int(torch.randint(TOPICS, (), generator=g))
        length = min(MAX_LEN, int(torch.empty(()).exponential_(1 / MEAN_LEN, generator=g)))
        own = torch.randint(WORDS_PER_TOPIC, (length,), generator=g).tolist()
        mix = torch.rand(length, generator=g).tolist()
        pick = torch.randint(len(common), (length,), generator=g).tolist()
        words = [f"t{topic}w{o}" if m < 0.4 else common[p] for o, m, p in zip(own, mix, pick)]
        yield " ".join(words), topic


class Vocab:
    """Word -> id, grown as words are seen (id 0 is padding)."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def __call__(self, text: str) -> list[int]:
        return [self.ids.setdefault(w, len(self.ids) + 1) for w in text.split()]

    def __len__(self) -> int:
        return len(self.ids) + 1


def tokenised_chunks(n: int, chunk: int, vocab: Vocab) -> Iterator[TensorDict]:
    """The corpus as containers of ``chunk`` documents: the token ids as a jagged
    ``tokens`` leaf (one row per document, any length), the topic as ``label``."""
    rows: list[torch.Tensor] = []
    labels: list[int] = []
    for text, topic in corpus(n, seed=0):
        rows.append(torch.tensor(vocab(text), dtype=torch.int32))
        labels.append(topic)
        if len(rows) == chunk:
            yield _batch(rows, labels)
            rows, labels = [], []
    if rows:
        yield _batch(rows, labels)


def _batch(rows: list[torch.Tensor], labels: list[int]) -> TensorDict:
    tokens = torch.nested.nested_tensor(rows, layout=torch.jagged)  # values + offsets
    return TensorDict(tokens=tokens, label=torch.tensor(labels), batch_size=[len(rows)])


# ---------------------------------------------------------------- the model


class BagOfEmbeddings(nn.Module):
    """Mean of the token embeddings (padding excluded), then a linear layer."""

    def __init__(self, vocab: int, dim: int = 32) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim, padding_idx=0)
        self.head = nn.Linear(dim, TOPICS)

    def forward(self, padded: torch.Tensor) -> torch.Tensor:
        mask = (padded != 0).unsqueeze(-1)
        total = (self.emb(padded) * mask).sum(1)
        return self.head(total / mask.sum(1).clamp(min=1))


# ---------------------------------------------------------------- the tour


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", action="store_true", help="a small corpus (CI)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory(prefix="tensorbox-text-") as tmp:
        tour(Path(tmp), 3_000 if args.small else 200_000)


def tour(root: Path, n_docs: int) -> None:
    path = root / "tokens"
    vocab = Vocab()

    step(f"Tokenise {n_docs:,} documents, appending each chunk to one tree on disk")
    t0 = time.perf_counter()
    ds: TensorDict | None = None
    for rows in tokenised_chunks(n_docs, chunk=512, vocab=vocab):
        if ds is None:
            ds = rows.memmap(path)  # the first chunk makes the tree ...
        else:
            ds.extend_(rows)  # ... later ones grow it: rows written, then one commit
    assert ds is not None and ds.batch_size == (n_docs,)
    took = time.perf_counter() - t0
    print(f"{n_docs:,} documents, {len(vocab):,} words in the vocabulary, {took:.2f} s")

    step("Open it again: nothing is read until used")
    ds = TensorDict.load_memmap(path)
    tokens = ds["tokens"]
    assert tokens.is_nested and ds.batch_size == (n_docs,)
    again = next(tokenised_chunks(n_docs, chunk=n_docs, vocab=Vocab()))  # in one piece
    assert (ds == again).all(), "every row reads back as tokenised"
    lengths = tokens.offsets().diff()
    print(
        f"rows: {n_docs:,}, lengths {int(lengths.min())}..{int(lengths.max())}, "
        f"mean {lengths.float().mean():.1f} tokens"
    )
    on_disk = sum(f.stat().st_size for f in path.rglob("*.memmap"))
    padded = n_docs * int(lengths.max()) * tokens.values().element_size()
    print(
        f"on disk: {on_disk / 2**20:.2f} MiB (padded to the longest row: {padded / 2**20:.2f} MiB)"
    )

    step("Train from it: a plain DataLoader, each batch padded to its own longest row")
    torch.manual_seed(0)
    model = BagOfEmbeddings(len(vocab))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    # The loader hands out row numbers; ds.pad_rows gathers each batch's rows from the
    # files straight into a [64, longest in batch] tensor (one gather per leaf).
    # DataLoader(ds, batch_size=64) works too: its batches hold a jagged tokens leaf,
    # which batch.to_padded_tensor() pads, a little slower.
    loader = DataLoader(range(n_docs), batch_size=64, shuffle=True, collate_fn=ds.pad_rows)
    t0 = time.perf_counter()
    seen = 0
    for epoch in range(2):
        correct = total = 0
        for batch in loader:
            logits = model(batch["tokens"].long())  # padded with 0, the padding id
            loss = nn.functional.cross_entropy(logits, batch["label"])
            opt.zero_grad()
            loss.backward()
            opt.step()
            correct += int((logits.argmax(1) == batch["label"]).sum())
            total += len(batch["label"])
            seen += len(batch["label"])
        print(f"epoch {epoch}: loss {loss.item():.3f}, train accuracy {correct / total:.1%}")
    took = time.perf_counter() - t0
    print(f"{seen / took:,.0f} documents/s")
    assert correct / total > 0.6, "the topics are learnt (chance is 25%)"
    print(f"\ndone ({os.path.basename(path)}: {n_docs:,} rows)")


if __name__ == "__main__":
    main()
