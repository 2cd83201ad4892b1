"""Verify stage: the `.pte` in its trimmed runtime, without torch, against eager PyTorch.

Takes: the final `.pte`, its trimmed runtime (`runtime/<recipe>-runtime.zip`, from select), the
recipe's model and `verify` section. Gives: `verify.json` with, per method and output, the
largest absolute error over `verify.samples` random inputs (dynamic dims drawn within their
ranges), the bound it must stay within (`rtol × max|eager| + atol`, `etbuild.verify.compare`) and
whether the eager output varies across the samples; for a method whose outputs do not, the
comparison of its last intermediate value that does (`etbuild.verify.intermediate`). Samples run in
order on one loaded method, as they do on one eager model, so state carried across calls
(mutable buffers) is compared too. The program runs in the trimmed runtime alone, in a subprocess
whose import path holds only it and numpy (no etbuild install, no torch): a pass proves the
runtime that ships is enough.

A quantized program (its recipe has `quantize:`) is checked twice instead
(`etbuild.quantize.checks`): against the converted torch model, within one quantization
step per output element plus rtol/atol, and against the float model by the recipe's
accuracy gate. Verify then also writes `quantize.json` beside the `.pte`: the quantize
stage's report (`quantized/layers.json`) with the program's bytes and both checks.

A program with delegates, and a quantized one, has its outputs compared a second time (with
eager torch, or the converted model when quantized), run in ExecuTorch's own runtime (the
`executorch` oracle, in a subprocess) when that is installed: `verify.json`'s `executorch`
holds the same per-output report, or why it was skipped.
"""

from __future__ import annotations

import functools
import json
import tempfile
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils._pytree import tree_flatten

from etbuild.errors import EtbuildError, InternalError, StageError, VerificationError
from etbuild.fsutil import write_json
from etbuild.model import build_model, call_method, fresh, sample_inputs
from etbuild.quantize import checks
from etbuild.recipe import Recipe
from etbuild.recipe.kinds import kind_of
from etbuild.runtime.data_files import load_data_file
from etbuild.runtime.format.pte import read_program
from etbuild.stages import handoff
from etbuild.stages.export import export_method
from etbuild.verify import oracle_fork, tosa_nodes
from etbuild.verify.bundle import write_recipe_bundle
from etbuild.verify.compare import compare, describe, varies
from etbuild.verify.intermediate import compare_intermediate
from etbuild.verify.llm import search_summary
from etbuild.verify.localise import describe_divergence, localise_recipe
from etbuild.verify.oracle import executorch_installed, missing_backends, run_samples_in_executorch
from etbuild.verify.trimmed import run_trimmed

Runner = Callable[[Path, Path, Path, str], None]
"""Runs a program's samples: (pte, inputs .npz, outputs .npz, method)."""

Outputs = list[list[np.ndarray]]
"""Per sample, the outputs of one method (flattened), in order."""


def trimmed_runner(runtime: Path, data: Sequence[Path] = ()) -> Runner:
    """The trimmed runtime at `runtime`, in an isolated subprocess, loading the `.ptd` data files `data`."""
    def run(pte: Path, ins: Path, outs: Path, method: str) -> None:
        try:
            run_trimmed(runtime, pte, ins, outs, method, data)
        except EtbuildError as exc:
            raise VerificationError(f"{pte} failed in its trimmed runtime: {exc}") from None
    return run


def run_samples(run: Runner, pte: Path, samples: list[tuple[Any, ...]], method: str = "forward") -> Outputs:
    """Outputs of each sample, in order on one loaded method, from a runner."""
    with tempfile.TemporaryDirectory(prefix="etbuild-verify-") as tmp:
        ins, outs = Path(tmp) / "in.npz", Path(tmp) / "out.npz"
        np.savez(ins, **{f"s{j}_in{k}": _numpy(x) for j, s in enumerate(samples) for k, x in enumerate(s)})
        run(pte, ins, outs, method)
        with np.load(outs) as npz:
            count = len([k for k in npz.files if k.startswith("s0_out")])
            return [[npz[f"s{j}_out{k}"] for k in range(count)] for j in range(len(samples))]


def _numpy(x: Any) -> Any:
    return x.detach().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


Eager = tuple[list[tuple[Any, ...]], Outputs]
"""A method's verify samples and eager torch's outputs for them, from one fresh model."""


def verify_samples(recipe: Recipe, method: str) -> list[tuple[Any, ...]]:
    """The method's verify inputs (`verify.samples` of them, drawn with `verify.seed`)."""
    return sample_inputs(recipe, recipe.verify.samples, recipe.verify.seed, method)


def eager_run(recipe: Recipe, method: str, samples: list[tuple[Any, ...]],
              model: torch.nn.Module | None = None) -> Outputs:
    """Eager torch's outputs for the samples, in order on one fresh model (a copy of `model`, the recipe's model
    as built; None: built here)."""
    model = fresh(model) if model is not None else build_model(recipe)
    return [[_numpy(t) for t in tree_flatten(call_method(recipe, model, method, s))[0]] for s in samples]


def eager_outputs(recipe: Recipe, method: str, model: torch.nn.Module | None = None) -> Eager:
    """The method's samples (`verify.samples`, `verify.seed`) and eager torch's outputs, in order on fresh state."""
    samples = verify_samples(recipe, method)
    return samples, eager_run(recipe, method, samples, model)


def verify_method(
    recipe: Recipe, pte: Path, method: str, eager: Eager, run: Future[Outputs], quantized: Path | None = None,
    intermediates: bool = True, model: torch.nn.Module | None = None,
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """One method's outputs from a runtime (`run`, awaited here) against eager torch's on fresh state
    (`eager`): per output (and, when no output varies and `intermediates`, the last intermediate value
    that does, checked while the runtime's outputs are on their way); for a quantized method (`quantized`
    names its converted `.pt2`) against the converted model, with the accuracy gate against the float
    model as the second result. `model`: the recipe's model as built (None: built here when needed)."""
    cfg = recipe.verify
    samples, expected = eager
    intermediate: dict[str, Any] | None = None
    early: Exception | None = None
    if quantized is None and intermediates and all(varies([s[k] for s in expected]) is False
                                                   for k in range(len(expected[0]))):
        try:
            exported = export_method(recipe, fresh(model) if model is not None else build_model(recipe), method)
            intermediate = compare_intermediate(exported, samples, cfg.rtol, cfg.atol, recipe.backends)
        except Exception as exc:  # raised after the runtime's own error, as when it ran after the comparison
            early = exc
    actual = run.result()
    if early is not None:
        raise early
    if len(actual[0]) != len(expected[0]):
        got, want = len(actual[0]), len(expected[0])
        raise StageError(f"{pte} method {method} returns {got} outputs; the model returns {want}")
    if quantized is None:
        report: dict[str, Any] = {"outputs": compare(expected, actual, cfg.rtol, cfg.atol)}
        if intermediate is not None:
            report["intermediate"] = intermediate
        return report, None
    ep = handoff.read(quantized)
    module = ep.module()
    with torch.no_grad():
        converted = [[_numpy(t) for t in tree_flatten(module(*s))[0]] for s in samples]
        precise = [[_numpy(t) for t in tree_flatten(checks.Float64(module).run(*s))[0]] for s in samples]
    outputs = checks.tight(checks.Outputs(converted, precise, actual, expected), checks.output_steps(ep),
                           cfg.rtol, cfg.atol)
    return {"outputs": outputs}, checks.gate(recipe.quantize.accuracy if recipe.quantize else None, expected, actual)


def verify(recipe: Recipe, pte: Path, runtime: Path, quantized: Mapping[str, Path] | None = None,
           data: Sequence[Path] | None = None, model: torch.nn.Module | None = None) -> dict[str, Any]:
    """Compare every method of the program, run in `runtime`, with eager torch (a quantized
    one, whose converted methods `quantized` names, also with its converted model); a program
    with delegates, or quantized, or with weights apart, also in ExecuTorch's runtime (`executorch`), when the oracle
    is installed. `data`: the `.ptd` files (default: the one emit wrote beside the `.pte`, see `data_files`).
    `model`: the recipe's model as `build_model` made it (None: built here), the one build every comparison
    runs copies of."""
    model = build_model(recipe) if model is None else model
    samples = {m.name: verify_samples(recipe, m.name) for m in recipe.model.methods}
    data = data_files(recipe, pte) if data is None else list(data)
    in_executorch = bool(quantized) or has_delegates(pte) or bool(data)
    theirs_run = functools.partial(run_samples_in_executorch, data=data)
    # The trimmed runtime runs in a subprocess while eager torch runs here, once for both runtimes;
    # ExecuTorch's runs first (in forks of this process, before any other thread starts) or beside
    # ours in subprocesses. Each result is awaited, and its error raised, where it is compared.
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="etbuild-verify") as pool:
        theirs = _executorch_runs(pool, pte, samples, data) if in_executorch and executorch_installed() else None
        ours = _started(pool, trimmed_runner(runtime, data), pte, samples)
        eager = {name: (s, eager_run(recipe, name, s, model)) for name, s in samples.items()}
        report = _report(recipe, pte, quantized, eager, ours, model)
        if in_executorch:
            report["executorch"] = _in_executorch(recipe, pte, quantized, eager, theirs)
            report["passed"] = report["passed"] and report["executorch"].get("passed", True)
    check = kind_of(recipe).check
    if check is not None:
        report["llm"] = check(recipe, pte, trimmed_runner(runtime, data), run_samples, model)
        if executorch_installed():
            report["llm"]["executorch"] = check(recipe, pte, theirs_run, run_samples, model)
        report["passed"] = report["passed"] and report["llm"]["passed"] and report["llm"].get(
            "executorch", {}).get("passed", True)
    return report


Runs = Mapping[str, "Future[Outputs]"]
"""Per method, a runtime's outputs for its verify samples, on their way."""


def _started(pool: ThreadPoolExecutor, run: Runner, pte: Path, samples: Mapping[str, list[tuple[Any, ...]]]) -> Runs:
    """Each method's samples run by `run` in the pool (a runner waits on its subprocess)."""
    return {name: pool.submit(run_samples, run, pte, s, name) for name, s in samples.items()}


def _executorch_runs(pool: ThreadPoolExecutor, pte: Path, samples: Mapping[str, list[tuple[Any, ...]]],
                     data: Sequence[Path] = ()) -> Runs:
    """ExecuTorch's runs of every method: now, in forks of this process (`oracle_fork`; while the pool
    has started no thread), or on the pool in subprocesses of their own (always, with data files)."""
    if data or not oracle_fork.usable(pte):
        return _started(pool, functools.partial(run_samples_in_executorch, data=data), pte, samples)
    runs: dict[str, Future[Outputs]] = {}
    for name, s in samples.items():
        runs[name] = Future()
        try:
            runs[name].set_result(run_samples(oracle_fork.run, pte, s, name))
        except EtbuildError as exc:  # raised where it is compared, after our runtime's own errors
            runs[name].set_exception(exc)
    return runs


def _report(recipe: Recipe, pte: Path, quantized: Mapping[str, Path] | None, eager: Mapping[str, Eager],
            ours: Runs, model: torch.nn.Module | None = None) -> dict[str, Any]:
    """The comparison of our runtime's outputs with eager torch's (and the accuracy gate when quantized)."""
    cfg = recipe.verify
    results = _results(recipe, pte, quantized, eager, ours, model=model)
    methods = {name: r["outputs"] for name, (r, _) in results.items()}
    intermediates = {name: r["intermediate"] for name, (r, _) in results.items() if "intermediate" in r}
    report = {"samples": cfg.samples, "rtol": cfg.rtol, "atol": cfg.atol, "bound": "rtol * max|eager| + atol",
              "methods": methods, "constant_outputs": _constant_outputs(methods), "intermediates": intermediates}
    report["passed"] = _passed(methods) and all(c["passed"] for c in intermediates.values())
    if quantized:
        report["accuracy"] = {name: gate for name, (_, gate) in results.items()}
        report["passed"] = report["passed"] and all(g["passed"] for g in report["accuracy"].values())
    return report


Results = dict[str, tuple[dict[str, Any], dict[str, Any] | None]]


def _results(recipe: Recipe, pte: Path, quantized: Mapping[str, Path] | None, eager: Mapping[str, Eager],
             runs: Runs, intermediates: bool = True, model: torch.nn.Module | None = None) -> Results:
    """verify_method of every method, in the recipe's order, each with its runtime outputs on their way."""
    return {m.name: verify_method(recipe, pte, m.name, eager[m.name], runs[m.name],
                                  quantized[m.name] if quantized else None, intermediates, model)
            for m in recipe.model.methods}


def _passed(methods: dict[str, list[dict[str, Any]]]) -> bool:
    return all(o["passed"] for outputs in methods.values() for o in outputs)


def _constant_outputs(methods: dict[str, list[dict[str, Any]]]) -> list[str]:
    """`forward output 0`, … for every output whose eager values are the same for every sample."""
    return [f"{name} output {o['index']}" for name, outputs in methods.items() for o in outputs
            if o.get("varies") is False]


def _in_executorch(recipe: Recipe, pte: Path, quantized: Mapping[str, Path] | None,
                   eager: Mapping[str, Eager] | None = None, runs: Runs | None = None) -> dict[str, Any]:
    """The same output comparison with the program run in ExecuTorch's runtime (`runs`, the runs
    `verify` started), or why it was skipped."""
    if not executorch_installed():
        return {"skipped": "the executorch oracle is not installed (pip install -e '.[interop]')"}
    lacking = missing_backends(pte)
    if lacking:  # its runs, started before, fail for want of the backend; they are not awaited
        return {"skipped": f"ExecuTorch's Python runtime has no {', '.join(lacking)}: the program runs on a device "
                           "whose runtime registers it"}
    if eager is None or runs is None:
        raise InternalError("comparing in ExecuTorch's runtime needs eager torch's outputs and the runs verify started")
    results = _results(recipe, pte, quantized, eager, runs, intermediates=False)
    methods = {name: r["outputs"] for name, (r, _) in results.items()}
    return {"methods": methods, "passed": _passed(methods)}


def data_files(recipe: Recipe, pte: Path) -> list[Path]:
    """The `.ptd` emit wrote beside the `.pte` when the recipe keeps its weights apart (`emit.weights`), unless
    it holds no key (a program without constants): ExecuTorch's runtime refuses an empty data file."""
    weights = recipe.emit.weights
    path = pte.parent / f"{weights.file}.ptd" if weights else None
    return [path] if path is not None and load_data_file(path).entries else []


def has_delegates(pte: Path) -> bool:
    """Whether any method of the program calls a backend delegate."""
    program, _ = read_program(pte.read_bytes())
    return any(plan.delegates for plan in program.execution_plan)


def run_verify(
    recipe: Recipe, pte: Path, runtime: Path, out: Path, exports: Mapping[str, Path] | None = None,
    debug_map: Path | None = None, quantized: Mapping[str, Path] | None = None, layers: Path | None = None,
    quantize_json: Path | None = None,
) -> None:
    """Write `verify.json` (and `quantize.json` for a quantized program, and `<recipe>.bpte` when
    `verify.bundle` asks: etbuild.verify.bundle); raise VerificationError (after writing them) when an output fails.

    With the exports the lower stage read and its debug map, a failure of a float program is
    localised first: each failing method's first diverging node goes into `verify.json`
    (`first_divergence`) and the error.
    """
    model = build_model(recipe)
    report = verify(recipe, pte, runtime, quantized, model=model)
    if quantized and tosa_nodes.uses_tosa(recipe):
        report["tosa_nodes"] = tosa_nodes.judge_recipe(recipe, quantized)
        report["passed"] = report["passed"] and report["tosa_nodes"]["passed"]
    searched = search_summary(layers) if "llm" in report and layers is not None else None
    if searched is not None:
        report["llm"]["fallback"] = searched
    if recipe.verify.bundle:
        report["bundle"] = write_recipe_bundle(recipe, pte, pte.with_suffix(".bpte"), report, quantized, model)
    if not report["passed"] and not quantized and exports is not None and debug_map is not None:
        failing = [m for m, outputs in report["methods"].items() if not _passed({m: outputs})]
        report["first_divergence"] = localise_recipe(recipe, pte, exports, debug_map, failing)
    write_json(out, report)
    if quantized and layers is not None and quantize_json is not None:
        _write_quantize_report(pte, report, layers, quantize_json)
        _raise_for_quantized(recipe, pte, report, layers, out)
    where = [("", report["methods"]), (" in ExecuTorch's runtime", report.get("executorch", {}).get("methods", {}))]
    failures = [f"{method} output {o['index']}{runtime}: {_describe(o)}" for runtime, methods in where
                for method, outputs in methods.items() for o in outputs if not o["passed"]]
    llm_failures = _llm_failures(report.get("llm"))
    if llm_failures and not failures:
        raise VerificationError(f"{recipe.name}: {pte.name}: {'; '.join(llm_failures)} (see {out})")
    failures += llm_failures + tosa_nodes.failures(report.get("tosa_nodes"))
    failures += [f"{method} intermediate {c['node']} in {c['module'] or 'the model'}: {describe(c)}"
                 for method, c in report["intermediates"].items() if not c["passed"]]
    if failures:
        reference = "the converted (quantized) torch model" if quantized else "eager PyTorch"
        raise VerificationError(
            f"{recipe.name}: {pte.name} differs from {reference} beyond rtol={recipe.verify.rtol}, "
            f"atol={recipe.verify.atol} on {recipe.verify.samples} samples: {'; '.join(failures)} (see {out})"
            + "".join(f"\n  {describe_divergence(m, d)}" for m, d in report.get("first_divergence", {}).items())
        )


def _llm_failures(report: dict[str, Any] | None) -> list[str]:
    """The language-model check's failures, in our runtime and in ExecuTorch's."""
    failures = []
    for runtime, check in (("", report), (" in ExecuTorch's runtime", (report or {}).get("executorch"))):
        if check is None or check["passed"]:
            continue
        if "matched" in check:
            failures.append(f"greedy tokens{runtime}: {check['matched']} of {check['tokens']} equal Hugging Face's")
        else:
            failures.append(f"next-token agreement{runtime} with the float model {check['agreement']} over "
                            f"{check['positions']} positions, below verify.agreement {check['threshold']}")
    searched = (report or {}).get("fallback")
    if failures and searched is not None:
        count = len(searched["kept_float"])
        failures[-1] += (f" (verify.fallback kept {count} layer{'' if count == 1 else 's'} float: agreement "
                         f"{searched['final']['agreement']} on the quantize stage's own sequence)")
    return failures


def _describe(output: dict[str, Any]) -> str:
    """describe() for a comparison with eager torch; the largest error for one with the converted model."""
    if "bound" in output or "mismatch" in output:
        return describe(output)
    return f"max abs error {output['max_abs_error']:.3g} (one quantization step {output.get('step', 0):.3g})"


def _write_quantize_report(pte: Path, report: dict[str, Any], layers: Path, out: Path) -> None:
    """`quantize.json`: the quantize stage's report with the program's bytes and both checks.

    The float program's bytes are estimated as this program's with each method's constants
    swapped for the float ones they replace (exact up to the q/dq instructions' few bytes;
    lowering the float model again only to measure it would double the build)."""
    merged = json.loads(layers.read_text())
    size = pte.stat().st_size
    weights = [m["weight_bytes"] for m in merged["methods"].values()]
    float_size = size + sum(w["float"] - w["quantized"] for w in weights)
    merged["pte_bytes"] = {"quantized": size, "float_estimate": float_size, "ratio": round(size / float_size, 4)}
    merged["verify"] = {"samples": report["samples"], "methods": report["methods"], "accuracy": report["accuracy"]}
    write_json(out, merged)


def _raise_for_quantized(recipe: Recipe, pte: Path, report: dict[str, Any], layers: Path, out: Path) -> None:
    """A VerificationError for the first failing check of a quantized program, if any."""
    for method, outputs in report["methods"].items():
        for o in outputs:
            if not o["passed"]:
                raise VerificationError(
                    f"{recipe.name}: {pte.name} method {method} output {o['index']} differs from the converted "
                    f"(quantized) torch model by up to {o['max_abs_error']:.3g}, beyond one quantization step "
                    f"({o['step']:.3g}) plus rtol={recipe.verify.rtol}, atol={recipe.verify.atol}, and by more than "
                    f"rounding or quantizing does: {o['snr_vs_converted_db']} dB SNR against it, where the same "
                    f"quantized model in float64 reaches {o['converted64_snr_vs_converted_db']} dB and the converted "
                    f"model reaches {o['converted_snr_vs_float_db']} dB against the float model (allowed: "
                    f"{checks.NOISE_MARGIN_DB:g} dB below that; see {out})"
                )
    for method, gate in report["accuracy"].items():
        if not gate["passed"]:
            worst = checks.worst_layer(json.loads(layers.read_text())["methods"][method]["layers"])
            raise VerificationError(
                f"{recipe.where('quantize.accuracy')}: {recipe.name}: {pte.name} method {method} fails the accuracy "
                f"gate against the float model: {gate['snr_db']} dB SNR, top-1 agreement {gate['top1_agreement']} "
                f"on {recipe.verify.samples} samples{worst} (see {out})"
            )
