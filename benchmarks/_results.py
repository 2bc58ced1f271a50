"""What every benchmark's ``--json`` file says about the run that made it.

A chart drawn from a JSON file names its source from these fields, so a reader can tell
a fresh run on a quiet machine from an old one on a busy machine::

    {"benchmark": "ops", "script": "benchmarks/ops.py --json ...", "date": "2026-11-25",
     "machine": {"cpus": 2, "load_average": {"start": [..], "end": [..]}, ...}, ...}

The load average (1, 5 and 15 minutes, from ``os.getloadavg``) is taken when the run
starts and when it ends: on a 2-core machine a load above 2 means other processes
shared the CPUs while it ran.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any


def _load() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # not every platform has one
        return []


def start(benchmark: str) -> dict[str, Any]:
    """The run's header, to be filled with results and handed to :func:`write`."""
    import torch

    import tensorbox

    peers: dict[str, str] = {}
    for name in ("tensordict", "safetensors"):
        try:
            module = __import__(name)
        except Exception:  # a peer that is missing or does not import is just absent
            continue
        peers[name] = str(getattr(module, "__version__", "?"))
    return {
        "benchmark": benchmark,
        "script": " ".join(["benchmarks/" + Path(sys.argv[0]).name, *sys.argv[1:]]),
        "date": datetime.date.today().isoformat(),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(terse=True),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "tensorbox": tensorbox.__version__,
            **peers,
            "load_average": {"start": _load()},
        },
    }


def source_line(r: dict[str, Any]) -> str:
    """One line for a chart's caption: script, date, CPUs and the load it ran under."""
    m = r.get("machine")
    if not m:  # an old hand-written file: its own source text
        return str(r.get("source", "unknown source"))
    load = m.get("load_average", {})
    seen = [x[0] for x in (load.get("start"), load.get("end")) if x]
    busy = f", load average {'-'.join(f'{x:.1f}' for x in seen)}" if seen else ""
    return (
        f"{r['script']}, {r['date']}, {m['cpus']} CPUs{busy}, "
        f"torch {m['torch']}, tensorbox {m['tensorbox']}"
        + (f", tensordict {m['tensordict']}" if "tensordict" in m else "")
    )


def _tidy(x: Any) -> Any:
    """Floats to four significant digits: medians are not more exact than that."""
    if isinstance(x, float):
        return float(f"{x:.4g}")
    if isinstance(x, dict):
        return {k: _tidy(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_tidy(v) for v in x]
    return x


def write(path: str | os.PathLike[str], r: dict[str, Any]) -> None:
    """Stamp the end-of-run load average and write ``r`` (atomically: a rename)."""
    r["machine"]["load_average"]["end"] = _load()
    r["source"] = source_line(r)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(json.dumps(_tidy(r), indent=1) + "\n")
    tmp.replace(path)
    print(f"wrote {path}")
