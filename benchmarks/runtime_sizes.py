"""The trimmed runtime of each built recipe: its operators, runtime features and bytes, from `select.json`.

    python benchmarks/runtime_sizes.py [BUILD_DIR] [--results [NAME]]

Reads `BUILD_DIR/<recipe>/select.json` (default `build/`, what `etbuild build` wrote) and prints one row per
recipe, smallest runtime first: operators, runtime features, the trimmed runtime's bytes (source files as shipped)
and its share of the full runtime's. Nothing is built or timed here: build first.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import results  # benchmarks/results.py (the script's folder is on sys.path)


def size_row(select_json: Path) -> dict[str, Any]:
    """One recipe's row from its select.json."""
    report = json.loads(select_json.read_text())
    return {"recipe": select_json.parent.name, "operators": len(report["operators"]),
            "runtime features": ", ".join(report["runtime_features"]) or "none",
            "bytes": report["runtime_bytes"], "zip bytes": report.get("runtime_zip_bytes"),
            "share of the full runtime": f"{report['runtime_fraction']:.1%}",
            "full runtime bytes": report["full_runtime_bytes"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build_dir", nargs="?", type=Path, default=Path("build"))
    results.add_option(parser, "runtime-sizes")
    args = parser.parse_args(argv)
    found = sorted(args.build_dir.glob("*/select.json"))
    if not found:
        parser.error(f"no {args.build_dir}/<recipe>/select.json: run `etbuild build` first")
    rows = sorted((size_row(path) for path in found), key=lambda row: row["bytes"])
    for row in rows:
        print(f"{row['recipe']:28} {row['operators']:3} {row['bytes']:9,} {row['share of the full runtime']:>6}  "
              f"{row['runtime features']}")
    if args.results:
        results.save(args.results, rows, title="Trimmed runtimes of the built recipes",
                     notes=["bytes: the trimmed runtime's source files as shipped (docstrings and comments dropped); "
                            "the full runtime: the installed runtime package with every kernel module"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
