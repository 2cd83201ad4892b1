"""Benchmark results in one place: `docs/results/<name>.json` and the table rendered from it, `<name>.md`.

A script adds `--results` to its options (`add_option`) and, at the end of a run, calls `save(name, rows)`.
The JSON records the rows with the command that produced them, when, on which commit, on what machine and
how busy it was (the 1-minute load average when the script started and when it saved); the markdown file is
rendered from the JSON alone, so a guide links to it and nobody copies numbers by hand. After a change to
the renderer (never to the numbers):

    python benchmarks/results.py docs/results/NAME.json ...   (renders each NAME.md again)
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
_STARTED = time.time()
_LOAD_AT_START = os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def add_option(parser: argparse.ArgumentParser, name: str) -> None:
    """`--results [NAME]`: also write docs/results/NAME.json and NAME.md (NAME defaults to `name`)."""
    parser.add_argument("--results", nargs="?", const=name, default=None, metavar="NAME",
                        help=f"also write docs/results/NAME.json and NAME.md (default NAME: {name})")


def save(name: str, rows: Sequence[Mapping[str, Any]], *, title: str, columns: Sequence[str] | None = None,
         notes: Sequence[str] = (), extra: Mapping[str, Any] | None = None, folder: Path = RESULTS) -> Path:
    """Write `folder/name.json` (the rows and how they were measured) and render `folder/name.md` from it.

    `columns` are the keys shown in the table, in order (a dotted key reads a nested mapping); by default
    the keys of the rows in first-seen order. `extra` holds numbers that are not rows (shown as a list).
    Both files are written to a temporary name and renamed: a stopped run leaves the old pair whole.
    """
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"results name {name!r}: expected a plain file stem such as 'load'")
    record = {
        "name": name, "title": title, "command": _command(), "date": _now(),
        "seconds": round(time.time() - _STARTED, 1), "commit": _commit(), "machine": _machine(),
        "columns": list(columns or _keys(rows)), "notes": list(notes),
        "rows": [dict(row) for row in rows], "extra": dict(extra or {}),
    }
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    _write(path, json.dumps(record, indent=1, default=str) + "\n")
    _write(path.with_suffix(".md"), render(record))
    return path


def render(record: Mapping[str, Any]) -> str:
    """The markdown page of one results record: what was run, where and when, then the table."""
    machine = record["machine"]
    lines = [f"# {record['title']}", "",
             "Written by the benchmark script; do not edit by hand (regenerate with the command below).", "",
             f"- command: `{record['command']}`",
             f"- date: {record['date']} ({record['seconds']} s), commit {record['commit']}",
             f"- machine: {machine['cpus']} CPUs, {machine['platform']}, Python {machine['python']}; "
             f"load average {_cell(machine['load_at_start'])} at start, {_cell(machine['load_at_end'])} at the end"]
    lines += [f"- {note}" for note in record["notes"]]
    lines += ["", *_table(record["columns"], record["rows"])]
    if record["extra"]:
        lines += ["", *(f"- {key}: {_cell(value)}" for key, value in record["extra"].items())]
    return "\n".join(lines) + "\n"


def _table(columns: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> list[str]:
    if not rows:
        return ["(no rows)"]
    head = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return head + ["| " + " | ".join(_cell(_lookup(row, key)) for key in columns) + " |" for row in rows]


def _lookup(row: Mapping[str, Any], key: str) -> Any:
    if key in row:
        return row[key]
    value: Any = row
    for part in key.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    if isinstance(value, int) and abs(value) >= 10_000:
        return f"{value:,}"
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), default=str)
    return text.replace("|", "\\|").replace("\n", " ")


def _keys(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    return list(dict.fromkeys(key for row in rows for key in row))


THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "ETBUILD_BLAS", "ETBUILD_NATIVE")


def _command() -> str:
    """The command line as run from the repository's root, with the thread and numerics variables it set."""
    script = Path(sys.argv[0]).resolve()
    shown = script.relative_to(ROOT).as_posix() if script.is_relative_to(ROOT) else sys.argv[0]
    env = [f"{name}={shlex.quote(os.environ[name])}" for name in THREAD_VARIABLES if name in os.environ]
    return " ".join([*env, "python", shlex.join([shown, *sys.argv[1:]])])


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _commit() -> str:
    """HEAD's short hash, `+changes` when the measured source differs from it (or 'unknown' outside git)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        changed = subprocess.run(["git", "status", "--porcelain", "--", "etbuild", "runtime", "kernels", "backends",
                                  "benchmarks"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+changes" if changed else "")


def _machine() -> dict[str, Any]:
    end = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {"cpus": os.cpu_count(), "platform": platform.platform(terse=True), "python": platform.python_version(),
            "load_at_start": _LOAD_AT_START, "load_at_end": end}


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Render docs/results/NAME.md again from NAME.json.")
    parser.add_argument("files", nargs="+", type=Path)
    for path in parser.parse_args(argv).files:
        _write(path.with_suffix(".md"), render(json.loads(path.read_text())))


if __name__ == "__main__":
    main()
