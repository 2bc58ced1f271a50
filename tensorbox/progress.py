"""``tensorbox.progress``: a bar while long work runs, a summary line when it ends, the logger.

tensorbox reports through ``logging.getLogger("tensorbox")``. Like most libraries it
adds only a ``NullHandler``, so nothing prints unless the application configures
logging (``logging.basicConfig(level=logging.INFO)`` shows the summaries; warnings
reach stderr through Python's last-resort handler as usual).

Long operations (``pack``, ``unpack`` and ``verify --read`` on the command line, image
ingestion, image-folder generation) open a :class:`Progress`. It shows a bar on
stderr when asked (``progress=True``) or by default when stderr is a terminal and the
work is large (``progress=None``); tqdm draws it when installed (the ``progress``
extra), else a plain line every few seconds. When the work ends, a summary (amount,
files, time, rate) goes to the logger at INFO and, when the bar was shown, to stderr,
where it stays.

An append loop gets its bar the same way: ``extend_`` reports the rows it appends
(``unit="rows"``) to a Progress the loop opens, and the summary gives rows per second:

>>> import io, tempfile, torch
>>> from tensorbox import TensorDict
>>> log = TensorDict(x=torch.zeros(0, 4), batch_size=[0]).memmap(tempfile.mkdtemp())
>>> out = io.StringIO()
>>> with Progress("append", total=300, unit="rows", progress=True, file=out, bar=False) as p:
...     for _ in range(3):
...         _ = log.extend_(TensorDict(x=torch.ones(100, 4), batch_size=[100]))
>>> p.summary()  # doctest: +ELLIPSIS
'append: 300 rows, ... s, ... rows/s'

Code that does the work reports through :func:`advance`, a no-op unless a
:class:`Progress` is open in the calling context, so a hook is one line and costs
nothing when nobody watches:

>>> import io
>>> out = io.StringIO()
>>> with Progress("copy", total=3 << 20, progress=True, file=out, bar=False) as p:
...     for _ in range(3):
...         advance(1 << 20)
>>> p.summary()  # doctest: +ELLIPSIS
'copy: 3.0 MiB in 3 files, ... s, ...'
>>> out.getvalue().splitlines()[-1] == p.summary()
True
"""

from __future__ import annotations

import contextvars
import logging
import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import IO, Any

__all__ = ["Progress", "advance"]

logger = logging.getLogger("tensorbox")
logger.addHandler(logging.NullHandler())

# Work smaller than this finishes too fast for a bar to help (default progress=None).
LARGE_BYTES = 256 << 20
# A plain line (no tqdm) at most this often, in seconds.
_PLAIN_EVERY = 5.0
# The bar's status text at most this often (a refresh costs more than a small step).
_STATUS_EVERY = 0.5

_current: contextvars.ContextVar[Progress | None] = contextvars.ContextVar(
    "tensorbox_progress", default=None
)


def human_size(n: float) -> str:
    """``n`` bytes in binary units: ``human_size(1536) == '1.5 KiB'``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{int(n)} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError  # pragma: no cover


def advance(amount: int, files: int = 1, *, unit: str = "B") -> None:
    """Report ``amount`` done in ``files`` files to the open Progress, if it counts ``unit``.

    Bytes (``"B"``) by default; ``TensorDict.extend_`` reports its rows as ``unit="rows"``.
    A Progress that counts something else ignores the report, so a save inside an
    ingestion (images) or inside an append loop (rows) does not add its bytes there.

    >>> advance(1024)  # nobody watches: nothing happens
    >>> with Progress("copy", 2048, progress=False) as p:
    ...     advance(1024)
    ...     advance(5, unit="rows")  # not what this one counts
    >>> p.done
    2048
    """
    p = _current.get()
    if p is not None and p.unit == unit:
        p.update(amount, files)


class Progress:
    """A context manager around one long operation.

    ``desc`` names it (``"pack"``); ``total`` is the expected amount in ``unit``
    (``"B"`` for bytes, else a count such as ``"img"``), ``None`` when unknown.
    ``progress``: ``True`` shows a bar, ``False`` never, ``None`` (default) when
    stderr is a terminal and ``total`` is at least ``large`` (256 MiB for bytes; any
    amount for counts). ``bar=False`` forces the plain-line form (no tqdm);
    ``log=False`` keeps the summary out of the log (a quick inner step); ``initial``
    counts work done before (a resumed run; the rate leaves it out); ``status``, a
    function giving a short state (``"fill 3/8 wait 0.2s"``), shown beside the bar
    and on each plain line. While open, :func:`advance` calls in this context update it.

    >>> import io
    >>> with Progress("decode", 10, unit="img", progress=True, file=io.StringIO(), bar=False) as p:
    ...     p.update(10, files=0)
    >>> p.summary()  # doctest: +ELLIPSIS
    'decode: 10 img, ... s, ... img/s'
    """

    def __init__(
        self,
        desc: str,
        total: int | None = None,
        *,
        unit: str = "B",
        progress: bool | None = None,
        large: int | None = None,
        file: IO[str] | None = None,
        bar: bool = True,
        log: bool = True,
        initial: int = 0,
        status: Callable[[], str] | None = None,
    ) -> None:
        self.desc, self.total, self.unit, self.status = desc, total, unit, status
        self.done, self.files, self.initial = initial, 0, initial
        self.file = file if file is not None else sys.stderr
        if progress is None:
            threshold = (LARGE_BYTES if unit == "B" else 0) if large is None else large
            isatty = getattr(self.file, "isatty", None)
            progress = bool(isatty and isatty()) and (total is None or total >= threshold)
        self.shown, self.log = progress, log
        self._bar: Any = None
        if progress and bar:
            try:
                from tqdm.auto import tqdm  # a widget in a notebook
            except ImportError:  # the plain line below
                pass
            else:
                self._bar = tqdm(
                    total=total,
                    initial=initial,
                    desc=desc,
                    unit=unit,
                    unit_scale=unit == "B",
                    unit_divisor=1024,
                    leave=True,
                    file=self.file,
                    dynamic_ncols=True,
                )
        self._start = self._last = time.perf_counter()
        self._elapsed: float | None = None
        self._token: contextvars.Token[Progress | None] | None = None

    def __enter__(self) -> Progress:
        self._token = _current.set(self)
        logger.debug("%s: started (%s)", self.desc, self._amount(self.total) or "size unknown")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._token is not None:
            _current.reset(self._token)
            self._token = None
        self.close(ok=exc_type is None)

    def update(self, amount: int, files: int = 1) -> None:
        """Count ``amount`` more done, in ``files`` more files."""
        self.done += amount
        self.files += files
        if self._bar is not None:
            self._bar.update(amount)
            if self.status is not None:
                now = time.perf_counter()
                if now - self._last >= _STATUS_EVERY:
                    self._last = now
                    self._bar.set_postfix_str(self.status(), refresh=False)
        elif self.shown:
            now = time.perf_counter()
            if now - self._last >= _PLAIN_EVERY:
                self._last = now
                of = f" of {self._amount(self.total)}" if self.total else ""
                pct = f" ({100 * self.done / self.total:.0f}%)" if self.total else ""
                status = f" | {self.status()}" if self.status is not None else ""
                print(f"{self.desc}: {self._amount(self.done)}{of}{pct}{status}", file=self.file)

    def close(self, ok: bool = True) -> None:
        """End the bar and write the summary (once); a failure logs that it stopped."""
        if self._elapsed is not None:
            return
        self._elapsed = time.perf_counter() - self._start
        if ok and self.total is not None and self.done < self.total:
            # The work's inner steps did not all report (or the total was an estimate):
            # the work is done, so the bar ends full.
            if self._bar is not None:
                self._bar.update(self.total - self.done)
            self.done = self.total
        if self._bar is not None:
            self._bar.leave = ok  # a failed run's bar goes: the error message follows
            self._bar.close()
        if not self.log:
            return
        if not ok:
            logger.info(
                "%s: stopped after %s, %.1f s", self.desc, self._amount(self.done), self._elapsed
            )
            return
        line = self.summary()
        logger.info("%s", line)
        if self.shown:
            print(line, file=self.file)

    def summary(self) -> str:
        """``"pack: 626.0 MiB in 412 files, 3.2 s, 195.6 MiB/s"``."""
        secs = self._elapsed if self._elapsed is not None else time.perf_counter() - self._start
        rate = (self.done - self.initial) / secs if secs > 0 else 0.0
        files = f" in {self.files} file{'s' * (self.files != 1)}" if self.files else ""
        if self.unit == "B":
            speed = f"{human_size(rate)}/s"
        else:
            speed = f"{rate:.1f} {self.unit}/s"
        return f"{self.desc}: {self._amount(self.done)}{files}, {secs:.1f} s, {speed}"

    def _amount(self, n: int | None) -> str:
        if n is None:
            return ""
        return human_size(n) if self.unit == "B" else f"{n} {self.unit}"
