"""Draw the docs' pictures into docs/img/: benchmark charts from benchmarks/results/*.json,
a diagram of the on-disk layout, and a batch of augmented images; and the save/open
tables of docs/persistence.md, from the same results file as their chart.

    python benchmarks/figures.py            # all of them
    python benchmarks/figures.py --only persist loader

``make bench`` reruns the benchmarks with ``--json benchmarks/results/NAME.json`` and
then this script, so the charts always show the latest committed numbers. Each chart
says where its numbers come from (the ``source`` field of its JSON). Needs matplotlib
(the ``bench`` extra); the augmented images also need Pillow. Output is deterministic
(no dates in the SVGs), so an unchanged result leaves the files unchanged.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout

from benchmarks._results import source_line  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
IMG = ROOT / "docs" / "img"

OURS = "#d9480f"  # tensorbox's bars
PEERS = "#868e96"
FLOOR = "#ced4da"


def _setup() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {
            "svg.hashsalt": "tensorbox",  # stable ids: an unchanged figure is an unchanged file
            "font.size": 10,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.titlesize": 10,
        }
    )
    return plt


def _save(fig: Any, name: str) -> Path:
    IMG.mkdir(parents=True, exist_ok=True)
    path = IMG / name
    meta = {"Date": None} if name.endswith(".svg") else {}
    fig.savefig(path, bbox_inches="tight", metadata=meta, dpi=110)
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return path


def _color(label: str) -> str:
    if label.startswith("tensorbox"):
        return OURS
    return FLOOR if "floor" in label else PEERS


def persist(plt: Any) -> None:
    """Save times (top) and open + read-all times (bottom), one panel per tree shape."""
    r = json.loads((RESULTS / "persist.json").read_text())
    layouts = r["layouts"]
    fig, axes = plt.subplots(2, len(layouts), figsize=(3.6 * len(layouts), 5.6))
    for row, (key, what) in enumerate(
        (("save_ms", "save, ms"), ("open_read_ms", "open + read every byte, ms"))
    ):
        series = {k: v for k, v in r[key].items() if any(x is not None for x in v)}
        labels = list(series)
        for col, layout in enumerate(layouts):
            ax = axes[row][col]
            vals = [series[k][col] or 0 for k in labels]
            y = range(len(labels))
            ax.barh(y, vals, color=[_color(k) for k in labels])
            ax.set_yticks(list(y), labels if col == 0 else [""] * len(labels))
            ax.invert_yaxis()
            for yi, v in zip(y, vals):
                ax.text(v, yi, f" {v:,.0f}", va="center", fontsize=8)
            ax.set_xlim(0, max(vals) * 1.25)
            ax.set_title(f"{layout}\n{what}" if row == 0 else what)
            ax.tick_params(axis="x", labelsize=8)
    fig.suptitle("Saving and loading a tree of tensors (lower is better)", fontsize=11)
    fig.text(0.01, -0.01, f"Source: {source_line(r)}", fontsize=7, color="#495057", wrap=True)
    fig.tight_layout()
    _save(fig, "persist.svg")
    plt.close(fig)
    write_tables("persist", r)


#: The pages whose tables are drawn here, from the results file their chart uses: the
#: tables go between the two marker lines of ``table_markers(NAME)`` on the page.
TABLE_PAGES = {"persist": ROOT / "docs" / "persistence.md", "dataload": ROOT / "docs" / "data.md"}


def table_markers(name: str) -> tuple[str, str]:
    return (
        f"<!-- tables: drawn by benchmarks/figures.py from benchmarks/results/{name}.json -->",
        "<!-- end of tables -->",
    )


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}" if v >= 10 else f"{v:.1f}"


def _rule(columns: int) -> str:
    return "|---" * columns + "|"


def persist_tables(r: dict[str, Any]) -> str:
    """The tables of docs/persistence.md, from the same results as the chart."""
    head = " | ".join(r["layouts"])
    lines = [f"| save, ms (median) | {head} |", _rule(len(r["layouts"]) + 1)]
    lines += [f"| {k} | {' | '.join(map(_ms, v))} |" for k, v in r["save_ms"].items()]
    lines += ["", f"| open (lazy) / open + read every byte, ms | {head} |"]
    lines.append(_rule(len(r["layouts"]) + 1))
    for k, lazy in r["open_ms"].items():
        full = r["open_read_ms"][k]
        if any(v is not None for v in (*lazy, *full)):
            cells = (f"{_ms(a)} / {_ms(b)}" for a, b in zip(lazy, full))
            lines.append(f"| {k} | {' | '.join(cells)} |")
    return "\n".join(lines)


def _x(a: float, b: float) -> str:
    q = a / b
    return f"{q:.0f}x" if q >= 10 else f"{q:.2f}x"


def dataload_tables(r: dict[str, Any]) -> str:
    """The tables of docs/data.md, from the same results as the loader chart."""
    ing, reads = r["ingest_images_per_s"], r["read_images_per_s"]
    lines = [
        "| images/s | per-image | tutorial | tensorbox | tensorbox / per-image "
        "| tensorbox / tutorial |",
        _rule(6),
        f"| ingestion (train, 256x256) | | {_ms(ing['tutorial'])} | {_ms(ing['tensorbox'])} "
        f"| | {_x(ing['tensorbox'], ing['tutorial'])} |",
        f"| ingestion, `draft=False` | | | {_ms(ing['exact'])} | "
        f"| {_x(ing['exact'], ing['tutorial'])} |",
    ]
    for kind, v in reads.items():
        lines.append(
            f"| {kind} pipeline | {_ms(v['per-image'])} | {_ms(v['tutorial'])} "
            f"| {_ms(v['tensorbox'])} | {_x(v['tensorbox'], v['per-image'])} "
            f"| {_x(v['tensorbox'], v['tutorial'])} |"
        )
    alone = r["loader_alone_images_per_s"]
    lines += ["", "| loader alone, images/s | " + " | ".join(alone) + " |", _rule(len(alone) + 1)]
    lines.append(
        "| uint8 [64, 3, 256, 256] batches | " + " | ".join(map(_ms, alone.values())) + " |"
    )
    return "\n".join(lines)


TABLES = {"persist": persist_tables, "dataload": dataload_tables}


def write_tables(name: str, r: dict[str, Any]) -> None:
    """Put the tables drawn from ``r`` between the markers of their page."""
    page = TABLE_PAGES[name]
    start_line, end_line = table_markers(name)
    text = page.read_text(encoding="utf-8")
    start = text.index(start_line) + len(start_line)
    end = text.index(end_line, start)
    new = f"{text[:start]}\n\n{TABLES[name](r)}\n\n{text[end:]}"
    if new != text:
        page.write_text(new, encoding="utf-8")


def loader(plt: Any) -> None:
    """Images per second through a whole training and validation input pipeline."""
    r = json.loads((RESULTS / "dataload.json").read_text())
    reads = r["read_images_per_s"]
    names = [
        ("per-image", "per-image (ImageFolder + DataLoader)"),
        ("tutorial", "tensordict tutorial"),
        ("tensorbox", "tensorbox BatchLoader"),
    ]
    fig, ax = plt.subplots(figsize=(7.2, 3.2))
    kinds = list(reads)
    width = 0.26
    for i, (key, label) in enumerate(names):
        xs = [k + (i - 1) * width for k in range(len(kinds))]
        vals = [reads[kind][key] for kind in kinds]
        ax.bar(
            xs, vals, width, label=label, color=OURS if key == "tensorbox" else [PEERS, FLOOR][i]
        )
        for x, v, kind in zip(xs, vals, kinds):
            note = f"{v:,.0f}"
            if key == "tensorbox":
                note += f"\n{v / reads[kind]['per-image']:.0f}x per-image"
            ax.text(x, v * 1.08, note, ha="center", va="bottom", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylim(50, 200_000)
    ax.set_xticks(range(len(kinds)), [f"{k} pipeline" for k in kinds])
    ax.set_ylabel("images / s (log scale)")
    ax.set_title("Feeding a model from an image folder (higher is better)")
    ax.legend(fontsize=8, frameon=False, loc="upper left", ncols=3)
    fig.text(0.01, -0.04, f"Source: {source_line(r)}", fontsize=7, color="#495057", wrap=True)
    _save(fig, "loader.svg")
    plt.close(fig)
    write_tables("dataload", r)


def ops(plt: Any) -> None:
    """Per operation: tensorbox's time over tensordict's (below 1: tensorbox is faster)."""
    r = json.loads((RESULTS / "ops.json").read_text())
    rows = [x for x in r["rows"] if x["tb_over_td"] is not None]
    fig, ax = plt.subplots(figsize=(7.6, 0.27 * len(rows) + 1.4))
    y = range(len(rows))
    ratios = [x["tb_over_td"] for x in rows]
    # Bars grow from 1 (parity) towards the ratio: left is faster, right slower.
    ax.barh(
        y,
        [v - 1 for v in ratios],
        left=1,
        color=[OURS if v <= 1 else PEERS for v in ratios],
        height=0.7,
    )
    ax.axvline(1.0, color="#212529", lw=0.8)
    ax.set_xscale("log")
    lo, hi = min(*ratios, 1.0), max(*ratios, 1.0)
    ax.set_xlim(lo / 2.2, hi * 2.2)
    ticks = [t for t in (0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10) if lo / 2.2 <= t <= hi * 2.2]
    ax.xaxis.set_major_locator(plt.matplotlib.ticker.FixedLocator(ticks))
    ax.xaxis.set_minor_formatter(plt.matplotlib.ticker.NullFormatter())
    ax.set_yticks(list(y), [x["op"] for x in rows], fontsize=8)
    ax.invert_yaxis()
    for yi, v, x in zip(y, ratios, rows):
        ax.text(
            v * (0.97 if v < 1 else 1.03),
            yi,
            f"{v:.2f}  ({x['tensorbox_us']:,.1f} / {x['tensordict_us']:,.1f} us)",
            va="center",
            ha="right" if v < 1 else "left",
            fontsize=7,
        )
    ax.xaxis.set_major_formatter(plt.matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.tick_params(axis="x", labelsize=8)
    ax.set_xlabel("tensorbox time / tensordict time (log scale; left of 1: tensorbox is faster)")
    s = r["summary"]["TensorDict rows"]
    ax.set_title(
        "Per-operation overhead against tensordict "
        f"(TensorDict rows: median {s['median_tb_over_td']:.2f}x, max {s['max_tb_over_td']:.2f}x)"
    )
    settings = r.get("settings", {})
    fig.text(
        0.01,
        -0.02,
        f"Source: {source_line(r)}; {settings.get('container', '')}, "
        f"{settings.get('clock', '')}, median of {settings.get('rounds', '?')} interleaved rounds, "
        "one torch thread",
        fontsize=7,
        color="#495057",
        wrap=True,
    )
    _save(fig, "ops.svg")
    plt.close(fig)


def layout(plt: Any) -> None:
    """A saved tree as a folder and the same tree as one archive."""
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    fig, ax = plt.subplots(figsize=(9, 4.4))
    ax.set_xlim(0, 100)
    ax.set_ylim(0, 52)
    ax.axis("off")

    def box(x: float, y: float, w: float, h: float, text: str, fc: str, **kw: Any) -> None:
        ax.add_patch(
            FancyBboxPatch(
                (x, y),
                w,
                h,
                boxstyle="round,pad=0.3,rounding_size=0.8",
                fc=fc,
                ec="#495057",
                lw=0.8,
            )
        )
        ax.text(x + 1, y + h / 2, text, va="center", fontsize=kw.get("fs", 8.5), family="monospace")

    ax.text(
        2,
        50,
        "TensorDict({'obs': [64, 3, 8, 8] float32, 'reward': [64],\n            'info': {'step': [64] int64}}, batch_size=[64])",
        fontsize=8.5,
        family="monospace",
        va="top",
    )
    ax.text(2, 40.5, 'td.memmap("run/")  a folder', fontsize=9.5, weight="bold")
    rows = [
        (0, "run/", "#e9ecef", ""),
        (1, "meta.json", "#fff3bf", "format, version, type, batch_size, entries"),
        (1, "obs.memmap", "#ffd8a8", "64*3*8*8 float32, raw little-endian"),
        (1, "reward.memmap", "#ffd8a8", "64 float32"),
        (1, "info/", "#e9ecef", ""),
        (2, "meta.json", "#fff3bf", "the sub-tree opens on its own"),
        (2, "step.memmap", "#ffd8a8", "64 int64"),
    ]
    for i, (depth, name, fc, note) in enumerate(rows):
        y = 35 - i * 5
        box(3 + depth * 4, y, 15, 3, name, fc)
        if note:
            ax.text(22.5 + depth * 4, y + 1.5, note, fontsize=7.5, va="center", color="#495057")
    ax.text(
        58, 40.5, 'td.memmap("run.tbx", archive=True)  one zip file', fontsize=9.5, weight="bold"
    )
    entries = [  # the leaves, then the meta.json files beside the index (one read of the tail)
        ("local header  obs.memmap", "#e9ecef", 1.6),
        ("  data, 64-byte aligned", "#ffd8a8", 5),
        ("local header  reward.memmap", "#e9ecef", 1.6),
        ("  data", "#ffd8a8", 2),
        ("info/step.memmap", "#ffd8a8", 2),
        ("info/meta.json, meta.json", "#fff3bf", 3),
        ("central directory (the index)", "#d0ebff", 3),
    ]
    y = 37
    for text, fc, h in entries:
        y -= h + 0.9
        ax.add_patch(
            FancyBboxPatch((60, y), 32, h, boxstyle="square,pad=0", fc=fc, ec="#495057", lw=0.8)
        )
        ax.text(61, y + h / 2, text, va="center", fontsize=8, family="monospace")
    ax.add_patch(
        FancyArrowPatch((50, 20), (58, 20), arrowstyle="<|-|>", mutation_scale=14, color="#495057")
    )
    ax.text(54, 17.5, "pack / unpack\nbyte for byte", ha="center", va="top", fontsize=8)
    ax.text(
        2,
        -1,
        "Both open lazily with TensorDict.load_memmap: every leaf is a memory map of its bytes "
        "(stored archive entries\nare mapped in place). A save writes a new generation beside "
        "the old one and swaps it in whole.",
        fontsize=8,
        color="#495057",
    )
    _save(fig, "layout.svg")
    plt.close(fig)


def augmented(plt: Any) -> None:
    """A batch from the augmentation tutorial: source images and what the model sees."""
    import torch

    from tensorbox.data import ingest_image_folder, make_image_folder
    from tensorbox.data.transforms import (
        ColorJitter,
        Compose,
        RandomHorizontalFlip,
        RandomResizedCrop,
    )

    with tempfile.TemporaryDirectory() as tmp:
        root = make_image_folder(
            Path(tmp, "imgs"),
            num_images=8,
            num_classes=8,
            min_size=200,
            max_size=320,
            num_workers=0,
        )
        data = ingest_image_folder(root, Path(tmp, "data"), size=128, num_workers=0, progress=False)
        images = data.images[:].clone()
        targets = data.targets[:].clone()
        del data
    g = torch.Generator().manual_seed(0)
    pipeline = Compose(
        RandomResizedCrop(128, scale=(0.25, 1.0)),
        RandomHorizontalFlip(),
        ColorJitter(brightness=0.4, contrast=0.4),
    )
    views = [pipeline(images, generator=g) for _ in range(2)]
    fig, axes = plt.subplots(3, 8, figsize=(10, 4.2))
    for row, (batch, title) in enumerate(
        ((images, "ingested"), (views[0], "view 1"), (views[1], "view 2"))
    ):
        for col in range(8):
            ax = axes[row][col]
            ax.imshow(batch[col].permute(1, 2, 0).numpy())
            ax.set_xticks([])
            ax.set_yticks([])
            if col == 0:
                ax.set_ylabel(title, fontsize=9)
            if row == 0:
                ax.set_title(f"class {int(targets[col])}", fontsize=8)
    fig.suptitle(
        "One uint8 batch [8, 3, 128, 128] and two random views (RandomResizedCrop, flip, ColorJitter),\n"
        "each made in a few batched torch calls",
        fontsize=9,
    )
    fig.tight_layout()
    _save(fig, "augmented.png")
    plt.close(fig)


FIGURES = {
    "ops": ops,
    "persist": persist,
    "loader": loader,
    "layout": layout,
    "augmented": augmented,
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", nargs="+", choices=sorted(FIGURES), help="draw only these")
    args = ap.parse_args(argv)
    plt = _setup()
    for name in args.only or FIGURES:
        FIGURES[name](plt)
    return 0


if __name__ == "__main__":
    sys.exit(main())
