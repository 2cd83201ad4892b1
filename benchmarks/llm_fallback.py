"""`verify.fallback: auto` on the benchmark models of `benchmarks/llm.py`: uniform 8da4w against the agreement search.

    python benchmarks/llm_fallback.py [--work DIR] [--architecture llama] [--agreement 0.99] [--weights gptq]
                                      [--json out.json]

The same checkpoint as `benchmarks/llm.py` (~20 M parameters, random weights, seeded; its folder is reused when
--work holds it) is built twice from clean build directories with 8da4w (group 32, int4 embeddings), XNNPACK and
custom attention: `uniform` (verify.agreement 0, so it passes and reports its agreement) and `auto`
(verify.agreement --agreement, verify.fallback auto). Per build: next-token agreement and logit SNR in our runtime
on verify's 128-token sequence (and in ExecuTorch's, when installed), the same on the search's own sequence
(layers.json), the layers kept float, the `.pte` bytes, the quantize stage's seconds and the whole build's.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import results  # noqa: E402  (benchmarks/results.py: the script's folder is on sys.path)

from benchmarks.llm import CONTEXT, QUANTIZE, checkpoint  # noqa: E402
from etbuild.build.driver import build  # noqa: E402
from tests.llm_support import write_llm_recipe  # noqa: E402


class Seconds:
    """A build sink that keeps each stage's seconds."""

    def __init__(self) -> None:
        self.stages: dict[str, float] = {}

    def emit(self, ev: dict[str, Any]) -> None:
        if ev["event"] == "end":
            self.stages[ev["stage"]] = round(ev["seconds"], 1)

    def close(self) -> None:
        pass


def build_one(work: Path, folder: Path, name: str, verify: dict[str, Any], weights: str) -> dict[str, Any]:
    shutil.rmtree(work / "build" / name, ignore_errors=True)
    recipe = write_llm_recipe(work, name, {"path": str(folder), "max_context": CONTEXT, "max_prefill": 128},
                              llm={"attention": "custom"}, backends=[{"name": "xnnpack"}], verify=verify,
                              quantize={**QUANTIZE, "weights": weights})
    sink = Seconds()
    start = time.perf_counter()
    result = build([recipe], work / "build", sink=sink)
    seconds = time.perf_counter() - start
    out = work / "build" / name
    row: dict[str, Any] = {"name": name, "build_s": round(seconds, 1), "quantize_s": sink.stages.get("quantize"),
                           "failed": dict(result.failed)}
    layers = json.loads((out / "quantized" / "layers.json").read_text())["methods"]["forward"]
    search = layers.get("agreement_search")
    if search is not None:
        row.update(search_uniform=search["uniform"], search_final=search["final"], kept_float=search["kept_float"],
                   evaluations=search.get("evaluations"))
    if (out / "verify.json").is_file():
        report = json.loads((out / "verify.json").read_text())["llm"]
        row.update(agreement=report["agreement"], snr_db=report["snr_db"],
                   executorch=report.get("executorch", {}).get("agreement"))
    if (out / f"{name}.pte").is_file():
        row["pte_bytes"] = (out / f"{name}.pte").stat().st_size
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=Path("/tmp/etbuild-llm-fallback"))
    parser.add_argument("--architecture", default="llama")
    parser.add_argument("--agreement", type=float, default=0.99)
    parser.add_argument("--weights", default="gptq")
    parser.add_argument("--json", type=Path)
    results.add_option(parser, "llm-fallback")
    args = parser.parse_args()
    folder = args.work / args.architecture
    checkpoint(folder, args.architecture)
    rows = [build_one(args.work, folder, "uniform", {"agreement": 0.0}, args.weights),
            build_one(args.work, folder, "auto", {"agreement": args.agreement, "fallback": "auto"}, args.weights)]
    for row in rows:
        print(json.dumps(row))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    if args.results:
        results.save(args.results, rows, title=f"Keeping the worst layers float: the benchmark {args.architecture}",
                     notes=[f"verify.agreement {args.agreement}, weights {args.weights}"])


if __name__ == "__main__":
    main()
