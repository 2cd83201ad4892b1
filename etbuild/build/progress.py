"""What a build shows while it runs: events, written as text lines, a live table, or JSON lines.

Events are plain dicts: `{"event": "start" | "end" | "fail" | "blocked" | "up-to-date" | "note", "task":
"plan:mlp", "stage": "plan", "product": "mlp", …}`; `end` adds `seconds` and `cache` (`hit`,
`miss`, `corrupt`, `off`), `fail` adds `message` and `exit_code`, `blocked` (not run: a stage
before it failed) adds `after`, the failed task; `note` (something to know)
and `step` (a release step done) have only `message`.

- `TextSink`: one line per stage (`plan:mlp ... 0.12 s`), the default when not on a terminal;
- `LiveSink`: on a terminal, one row per product, redrawn in place as its stages move on;
- `JsonSink`: one JSON object per line (`--json`), for CI systems, each with a `time`.
"""

from __future__ import annotations

import json
import shutil
import time
from typing import Any, Protocol, TextIO

Event = dict[str, Any]
CACHE_WORDS = {"hit": " (cached)", "corrupt": " (cache entry corrupt: rebuilt)"}


def event(kind: str, task: str = "", **fields: Any) -> Event:
    """An event for task `stage:product` (or none)."""
    stage, _, product = task.partition(":")
    return {"event": kind, **({"task": task, "stage": stage, "product": product} if task else {}), **fields}


class Sink(Protocol):
    def emit(self, ev: Event) -> None: ...

    def close(self) -> None: ...


class TextSink:
    """A line per stage. In serial a line starts when its stage starts and ends with its time;
    with parallel jobs each line is written whole when its stage ends."""

    def __init__(self, stream: TextIO, parallel: bool = False, debug: bool = False) -> None:
        self.stream, self.parallel, self.debug = stream, parallel, debug

    def _print(self, text: str, end: str = "\n") -> None:
        print(text, end=end, file=self.stream, flush=True)

    def emit(self, ev: Event) -> None:
        kind, name = ev["event"], ev.get("task", "")
        head = f"  {name:<32} ..."
        if kind == "start" and not self.parallel:
            self._print(head, end="")
        elif kind in ("end", "fail"):
            cached = CACHE_WORDS.get(ev.get("cache", ""), "")
            status = f" {ev['seconds']:7.2f} s{cached}" if kind == "end" else " FAILED"
            self._print(head + status if self.parallel else status)
            if kind == "fail":
                self._print(failure_text(ev, self.debug))
        elif kind == "up-to-date":
            self._print(f"  {name:<32} up to date")
        elif kind == "note":
            self._print(f"note: {ev['message']}")
        elif kind == "step":
            self._print(f"  {ev['message']}")

    def close(self) -> None:
        pass


def failure_text(ev: Event, debug: bool) -> str:
    """The paragraph under a failed stage (with the traceback under --debug)."""
    if ev.get("internal"):
        return f"\nerror: {ev['task']}: internal error\n{ev['message']}"
    trace = f"\n{ev['trace']}" if debug and ev.get("trace") else ""
    return f"\nerror: {ev['task']}: {ev['message']}{trace}\n"


class JsonSink:
    """One JSON object per line, with the seconds since the build started as `time`."""

    def __init__(self, stream: TextIO) -> None:
        self.stream, self.t0 = stream, time.perf_counter()

    def emit(self, ev: Event) -> None:
        ev = {k: v for k, v in ev.items() if k != "trace"}
        print(json.dumps({**ev, "time": round(time.perf_counter() - self.t0, 3)}), file=self.stream, flush=True)

    def close(self) -> None:
        pass


class LiveSink:
    """A row per product (`mlp  export 0.8s · lower 0.2s · plan …`), redrawn in place."""

    UP, CLEAR = "\x1b[{}F", "\x1b[2K"

    def __init__(self, stream: TextIO, debug: bool = False) -> None:
        self.stream, self.debug = stream, debug
        self.rows: dict[str, list[str]] = {}
        self.drawn = 0
        self.after: list[str] = []

    def emit(self, ev: Event) -> None:
        kind = ev["event"]
        if kind in ("note", "step"):
            self.after.append(f"note: {ev['message']}" if kind == "note" else f"  {ev['message']}")
        elif ev.get("task") and kind != "blocked":
            self._update(ev)
        if kind == "fail":
            self.after.append(failure_text(ev, self.debug))
        self._draw()

    def _update(self, ev: Event) -> None:
        cells = self.rows.setdefault(ev["product"], [])
        label = {
            "start": f"{ev['stage']} …",
            "end": f"{ev['stage']} {ev.get('seconds', 0):.1f}s" + (" cached" if ev.get("cache") == "hit" else ""),
            "fail": f"{ev['stage']} FAILED",
            "up-to-date": f"{ev['stage']} ✓",
        }[ev["event"]]
        if cells and cells[-1].split(" ", 1)[0] == ev["stage"]:
            cells[-1] = label
        else:
            cells.append(label)

    def _draw(self) -> None:
        out = [self.UP.format(self.drawn)] if self.drawn else []
        width = max(map(len, self.rows), default=0)
        columns = shutil.get_terminal_size().columns - 1  # a wrapped row would break the redraw
        for product, cells in self.rows.items():
            out.append(f"{self.CLEAR}{f'  {product:<{width}}  ' + ' · '.join(cells):.{columns}}\n")
        self.stream.write("".join(out))
        self.stream.flush()
        self.drawn = len(self.rows)

    def close(self) -> None:
        """Print what came in under the table; later events start a new table below it."""
        for line in self.after:
            print(line, file=self.stream)
        self.stream.flush()
        self.after, self.rows, self.drawn = [], {}, 0


def make_sink(stream: TextIO, *, json_lines: bool = False, live: bool | None = None, parallel: bool = False,
              debug: bool = False) -> Sink:
    """JSON lines if asked; a live table on a terminal (or when `live`); else text lines."""
    if json_lines:
        return JsonSink(stream)
    if live if live is not None else stream.isatty():
        return LiveSink(stream, debug)
    return TextSink(stream, parallel, debug)
