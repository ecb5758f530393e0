"""The run's progress on stderr, kept by the parent process.

On a terminal, one status line redrawn in place: the world size, the item
running (a cell, or a scenario), items done of all, a bar, the elapsed time
and an estimate of the time left; messages and the result table are printed
above it. Anywhere else (a pipe, a file, a CI log) nothing is redrawn: one
plain line per finished item, with the same count and estimate, and the
messages as plain lines.

The estimate of the time left is the mean time per finished item so far
times the items left, plus, for each world size not started yet, the mean
time a world size spent outside its items (spawning the ranks, setting up
the groups). Cells all aim at the same timed-block length, so it settles
after a few cells; scenarios and larger world sizes take longer than the
mean.
"""

from __future__ import annotations

import shutil
import sys
import time

from .config import human_bytes

SCENARIO_OPS = ("ddp_step", "infer_loop", "async_loop", "recreate")
SCENARIO_LABELS = {"ddp": "DDP step scenario", "infer": "inference-loop scenario", "async": "async-loop scenario",
                   "recreate": "group re-creation scenario"}


def clock_text(seconds: float | None) -> str:
    """mm:ss, or h:mm:ss from an hour on; --:-- when unknown."""
    if seconds is None or seconds != seconds:
        return "--:--"
    s = max(0, int(round(seconds)))
    h, m = s // 3600, s % 3600 // 60
    return f"{h}:{m:02d}:{s % 60:02d}" if h else f"{m:02d}:{s % 60:02d}"


def fmt_us(us) -> str:
    if us is None or us != us:
        return "-"
    if us >= 1e5:
        return f"{us / 1e3:.0f} ms"
    if us >= 1e3:
        return f"{us / 1e3:.2f} ms"
    return f"{us:.1f} us"


def cell_label(op: str, dtype: str, nominal: int) -> str:
    """What the status line says is running: 'all_reduce float32 64 KiB'."""
    if op == "barrier":
        return "barrier"
    return f"{op} {dtype} {human_bytes(nominal)}"


def summary(rows) -> str:
    """One finished cell (its rows, one per backend or fallback) in a line:
    each backend's time, and godist's speed relative to gloo when both ran."""
    r0 = rows[0]
    size = "" if r0["op"] == "barrier" else " " + human_bytes(int(r0["size_bytes"]))
    dt = "" if r0["dtype"] == "-" else " " + r0["dtype"]
    parts = []
    for r in rows:
        name = r["backend"] if r["variant"] == "native" or r["op"] in SCENARIO_OPS else \
            f"{r['backend']}({r['variant']})"
        part = f"{name} {r['status'].upper()}" if r["status"] != "ok" else f"{name} {fmt_us(r.get('time_us'))}"
        if r.get("wrong"):
            part += f" WRONG={r['wrong']}"
        parts.append(part)
    text = f"{r0['op']}{dt}{size}: " + ", ".join(parts)
    if r0.get("godist_speedup"):
        text += f", godist/{r0.get('ref_backend', 'gloo')} x{r0['godist_speedup']:.2f}"
    return text


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    """Progress of the whole run: ``total`` items (cells and scenarios over
    every world size). ``tty`` None: decided by the stream."""

    BAR = 20

    def __init__(self, total: int, worlds: int = 1, stream=None, tty: bool | None = None, clock=time.monotonic,
                 columns=None):
        self.stream = stream if stream is not None else sys.stderr
        self.tty = _isatty(self.stream) if tty is None else tty
        self.total, self.done = total, 0
        self.worlds, self.worlds_started = worlds, 0
        self.item_s = 0.0           # time spent in items, over finished world sizes
        self._items_t0 = None       # when the current world size's ranks were ready
        self._world_t0 = None       # when the current world size started
        self.clock = clock
        self.t0 = clock()
        self.P = None
        self.pending: list[str] = []
        self.last = ""
        self._columns = columns
        self._drawn = False
        self._last_draw = None

    # ----- numbers -------------------------------------------------------
    def elapsed(self) -> float:
        return self.clock() - self.t0

    def _item_time(self) -> float:
        now = self.clock()
        return self.item_s + (now - self._items_t0 if self._items_t0 is not None else 0.0)

    def eta(self) -> float | None:
        """Seconds left (see the module's docstring); None before the first item."""
        if not self.done:
            return None
        items = self._item_time()
        per_item = items / self.done
        left = per_item * max(0, self.total - self.done)
        finished = self.worlds_started - (1 if self.P is not None else 0)
        if finished < 1:
            return left
        overhead = (self.elapsed() - items - self._current_overhead()) / finished
        left += overhead * max(0, self.worlds - self.worlds_started)
        if self.P is not None and self._items_t0 is None:  # the current world size is still starting
            left += max(0.0, overhead - self._current_overhead())
        return left

    def _current_overhead(self) -> float:
        """Time the current world size has spent outside its items so far."""
        if self.P is None or self._world_t0 is None:
            return 0.0
        end = self._items_t0 if self._items_t0 is not None else self.clock()
        return end - self._world_t0

    def _prefix(self) -> str:
        return f"[P={self.P} {clock_text(self.elapsed())}]" if self.P is not None else \
            f"[{clock_text(self.elapsed())}]"

    # ----- events --------------------------------------------------------
    def start_world(self, P: int, labels: list[str]):
        """World size P starts; ``labels`` name its items in the order they run."""
        self.P, self.pending = P, list(labels)
        self.worlds_started += 1
        self._items_t0 = None
        self._world_t0 = self.clock()
        self.redraw()

    def ready(self):
        """The world size's ranks are set up: its items start."""
        if self._items_t0 is None:
            self._items_t0 = self.clock()

    def end_world(self):
        """The world size ended: items it did not finish (a rank failed or
        timed out) leave the total."""
        if self._items_t0 is not None:
            self.item_s += self.clock() - self._items_t0
            self._items_t0 = None
        self.total -= len(self.pending)
        self.pending = []
        self.P = self._world_t0 = None  # no status line until the next world size starts

    def item_done(self, rows):
        """One cell or scenario finished, with its rows."""
        self.done += 1
        if self.pending:
            self.pending.pop(0)
        line = summary(rows)
        if self.tty:
            self.last = line
            self.redraw()
        else:
            self._write(f"{self._prefix()} [{self.done}/{self.total} ETA {clock_text(self.eta())}] {line}\n")

    def note(self, msg: str):
        """A message of the run, prefixed with the world size and elapsed time."""
        self.message(f"{self._prefix()} {msg}")

    def message(self, text: str):
        """Lines printed as they are, above the status line on a terminal."""
        self.print_to(self.stream, text)

    def print_to(self, stream, text: str):
        """Print ``text`` (a line or several) to ``stream`` (stdout for the
        table) without mixing it with the status line."""
        self._clear()
        stream.write(text.rstrip("\n") + "\n")
        stream.flush()
        self.redraw()

    def tick(self):
        """Redraw the status line (elapsed time moves on), at most twice a second."""
        if self.tty and (self._last_draw is None or self.clock() - self._last_draw >= 0.5):
            self.redraw()

    def close(self):
        self._clear()
        self.P = None

    # ----- the status line ---------------------------------------------
    def status_line(self) -> str:
        frac = self.done / self.total if self.total else 1.0
        fill = min(self.BAR, int(frac * self.BAR))
        if self._items_t0 is None:
            running = f"starting {self.P} ranks"
        else:
            running = self.pending[0] if self.pending else "-"
        where = f"P={self.P} " if self.P is not None else ""
        line = (f"{where}[{'#' * fill}{'.' * (self.BAR - fill)}] {self.done}/{self.total} {frac:4.0%}  "
                f"elapsed {clock_text(self.elapsed())}  ETA {clock_text(self.eta())}  running: {running}")
        if self.last:
            line += f"  | last: {self.last}"
        cols = self._columns or shutil.get_terminal_size((100, 24)).columns
        return line[:max(20, cols - 1)]

    def redraw(self):
        if not self.tty or self.P is None:
            return
        self.stream.write("\r\x1b[K" + self.status_line())
        self.stream.flush()
        self._drawn = True
        self._last_draw = self.clock()

    def _clear(self):
        if self.tty and self._drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._drawn = False

    def _write(self, text: str):
        self.stream.write(text)
        self.stream.flush()
