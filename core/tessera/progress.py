"""Progress of long steps, for people.

:class:`Progress` is what the core hands a backend as ``CompileOptions.progress`` while it
compiles one region: the backend says which phase it is in and how many of its units are done
(``progress.update("lowering", 12, 59, "conv2d_NCHWc_3")``, or ``for g in
progress.track(groups, "lowering"): ...``). Reporting is optional, cheap when nobody listens,
and never fails a compile; a ``Progress`` pickled into a worker process reports nowhere.

:class:`StatusLine` renders a changing status on a stream: a single line rewritten in place on
a terminal, plain lines in a log (a file, a pipe), throttled in both. :class:`RegionProgress`
renders one region's reports on a status line (a bar with counts and an ETA on a terminal,
``region: phase 12/59 (20%), ETA 2.8 s`` lines in a log).
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TextIO, TypeVar

T = TypeVar("T")

#: Seconds between two plain lines in a log (at most one line per second).
LOG_INTERVAL = 1.0
#: Seconds between two redraws of the line on a terminal.
TTY_INTERVAL = 0.1


def _now() -> float:
    return time.monotonic()


@dataclass(frozen=True)
class ProgressEvent:
    """One report: ``done`` of ``total`` units of ``phase`` finished; ``detail`` names the unit
    under way (a kernel), or is empty."""

    phase: str
    done: int
    total: int
    detail: str = ""


class Progress:
    """A backend's progress reporter within one region (``CompileOptions.progress``).

    ``update(phase, done, total, detail)`` reports ``done`` of ``total`` units of a phase
    (fused groups lowered, functions generated, modules compiled); a phase whose work cannot
    be counted is reported as steps (``update("codegen", 1, 3, "optimizing")``). The core
    decides how (and whether) reports are shown; without a listener they cost one call."""

    def __init__(self, sink: Callable[[ProgressEvent], None] | None = None) -> None:
        self._sink = sink

    @property
    def enabled(self) -> bool:
        """Whether anybody listens (a backend may skip work that only feeds reports)."""
        return self._sink is not None

    def update(self, phase: str, done: int, total: int, detail: str = "") -> None:
        """Report ``done`` of ``total`` units of ``phase`` finished, ``detail`` under way."""
        if self._sink is None:
            return
        try:
            self._sink(ProgressEvent(phase, max(done, 0), max(total, 1), detail))
        except (OSError, ValueError):  # stderr closed or a broken pipe: stop reporting
            self._sink = None

    def track(self, items: Sequence[T], phase: str,
              name: Callable[[T], str] | None = None) -> Iterator[T]:
        """Yield ``items``, reporting each as under way and ``len(items)`` done at the end."""
        total = len(items)
        for i, item in enumerate(items):
            self.update(phase, i, total, name(item) if name is not None else "")
            yield item
        self.update(phase, total, total)

    def __reduce__(self) -> tuple[type[Progress], tuple[()]]:
        # a worker process (tuning candidates are built in one) reports nowhere
        return (Progress, ())


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal (a bar may be redrawn in place on it)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class StatusLine:
    """A status that changes, on ``stream``: on a terminal one line rewritten in place (at
    most every ``tty_interval`` s); elsewhere plain lines, at most one per ``log_interval`` s
    (texts shown in between are dropped). ``tty`` overrides the terminal check; ``clock``
    (seconds) is :func:`time.monotonic` by default."""

    def __init__(self, stream: TextIO, tty: bool | None = None,
                 log_interval: float = LOG_INTERVAL, tty_interval: float = TTY_INTERVAL,
                 clock: Callable[[], float] | None = None) -> None:
        self.stream = stream
        self.tty = is_terminal(stream) if tty is None else tty
        self.interval = tty_interval if self.tty else log_interval
        self.clock = clock or _now
        self.last = self.clock()  # the previous line counts as output: no line right after it
        self.drawn = False  # a terminal line is on screen, unfinished

    def show(self, text: str, force: bool = False, interval: float | None = None) -> bool:
        """Show ``text`` unless the previous output was less than ``interval`` seconds ago
        (default: the line's own; none with ``force``); True when it was shown."""
        now = self.clock()
        wait = 0.0 if force else self.interval if interval is None else interval
        if now - self.last < wait:
            return False
        self.last = now
        if self.tty:
            width = shutil.get_terminal_size().columns - 1
            self.stream.write("\r" + text[:max(width, 20)] + "\x1b[K")
            self.drawn = True
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
        return True

    def end(self, text: str) -> None:
        """Show ``text`` now and finish the line (the next output starts a new one)."""
        self.show(text, force=True)
        self.finish()

    def finish(self) -> None:
        """Keep the unfinished terminal line as it is and start a new one."""
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = False

    def print(self, text: str) -> None:
        """A line of its own (after erasing an unfinished terminal line); reports are
        throttled from here on."""
        self.clear()
        self.stream.write(text + "\n")
        self.stream.flush()
        self.last = self.clock()

    def clear(self) -> None:
        """Erase the unfinished line on a terminal (so another line can be printed)."""
        if self.drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.drawn = False


def format_seconds(seconds: float) -> str:
    """``4.2 s``, ``1 min 05 s``."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(round(seconds)), 60)
    return f"{minutes} min {rest:02d} s"


def eta(done: int, total: int, elapsed: float) -> float | None:
    """Seconds left at the pace so far, or None before the first unit is done."""
    if done <= 0 or done >= total:
        return None
    return elapsed / done * (total - done)


def bar(done: int, total: int, width: int = 24) -> str:
    """``[#########---------------]``."""
    filled = min(width, width * done // max(total, 1))
    return "[" + "#" * filled + "-" * (width - filled) + "]"


def format_event(region: str, event: ProgressEvent, elapsed: float, tty: bool) -> str:
    """The text of a report: a bar with counts on a terminal, a plain sentence in a log, each
    with the ETA of its phase (``elapsed``: seconds since the phase began)."""
    left = eta(event.done, event.total, elapsed)
    eta_text = f", ETA {format_seconds(left)}" if left is not None else ""
    detail = f": {event.detail}" if event.detail else ""
    if tty:
        return (f"  {region} {event.phase} {bar(event.done, event.total)} "
                f"{event.done}/{event.total}{eta_text}{detail}")
    percent = 100 * event.done // event.total
    return f"{region}: {event.phase} {event.done}/{event.total} ({percent}%){eta_text}{detail}"


class RegionProgress:
    """Renders the reports of the backend compiling ``region`` on ``line``: each log line is
    prefixed by ``prefix()`` (a timestamp); the first report of a phase waits a quarter of
    the line's interval only; the terminal bar is erased by :meth:`close`."""

    def __init__(self, line: StatusLine, region: str,
                 prefix: Callable[[], str] = lambda: "") -> None:
        self.line, self.region, self.prefix = line, region, prefix
        self.phase = ""
        # a phase began when the previous one last reported (the first: when the region did)
        self.phase_start = self.last_event = line.clock()
        self.lock = threading.Lock()  # a backend may report from several threads

    def __call__(self, event: ProgressEvent) -> None:
        with self.lock:
            now = self.line.clock()
            new_phase = event.phase != self.phase
            if new_phase:
                self.phase, self.phase_start = event.phase, self.last_event
            self.last_event = now
            text = format_event(self.region, event, now - self.phase_start, self.line.tty)
            # a new phase is news: shown sooner (but still not in bursts)
            self.line.show(text if self.line.tty else f"{self.prefix()}  {text}",
                           interval=self.line.interval / 4 if new_phase else None)

    def progress(self) -> Progress:
        """The reporter to hand the backend."""
        return Progress(self)

    def close(self) -> None:
        self.line.clear()


class ProgressPrinter:
    """Timestamped stage lines (``tessera: [  1.23s] message``) on ``stream`` (stderr by
    default), with the reports of each region's backend drawn between them
    (:meth:`region`); prints nothing when not ``enabled``."""

    def __init__(self, enabled: bool = True, stream: TextIO | None = None,
                 tty: bool | None = None, clock: Callable[[], float] | None = None) -> None:
        self.enabled = enabled
        self.clock = clock or _now
        self.line = StatusLine(stream or sys.stderr, tty=tty, clock=self.clock) \
            if enabled else None
        self.start = self.clock()

    def stamp(self) -> str:
        """``tessera: [  1.23s] `` (seconds since the printer was made)."""
        return f"tessera: [{self.clock() - self.start:6.2f}s] "

    def __call__(self, message: str) -> None:
        if self.line is not None:
            self.line.print(self.stamp() + message)

    def region(self, name: str) -> RegionProgress | None:
        """The renderer of region ``name``'s reports (None when disabled)."""
        if self.line is None:
            return None
        return RegionProgress(self.line, name, self.stamp)
