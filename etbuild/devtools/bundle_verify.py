"""Run a bundled program's test cases in our runtime and judge them as ExecuTorch's runtime does (torch-free).

Each method is loaded once from the program inside the `.bpte` (a fresh `Program` per method, as
verify runs them) and its cases run in order on it, so state carried across calls is checked
too. An expected output passes when every element is within `atol + rtol × |expected|` of it:
ExecuTorch's `verify_result_with_bundled_expected_output` test, so a case passes here when it
passes on the device with the same tolerances. Integer and bool outputs must match exactly.
A case's report gives the largest absolute error over its outputs and, at the element that
comes closest to failing (or fails most), the bound that element had.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from etbuild.devtools.bundle_format import BundledMethodTestSuite, read_bundle, value_object
from etbuild.errors import InvalidBundle, MethodInputError, UsageError, printable
from etbuild.runtime.program import Program

EXECUTORCH_RTOL, EXECUTORCH_ATOL = 1e-5, 1e-8  # the defaults of ExecuTorch's bundled verification


class Tolerance(NamedTuple):
    """ExecuTorch's per-element test: |actual − expected| ≤ atol + rtol × |expected|."""

    rtol: float = EXECUTORCH_RTOL
    atol: float = EXECUTORCH_ATOL


EXECUTORCH_DEFAULT = Tolerance()  # what a device uses when it is given no tolerance


@dataclass(frozen=True)
class CaseResult:
    """One test case: the largest error over its outputs, the bound at its worst element, the verdict."""

    method: str
    case: int
    passed: bool
    max_abs_error: float = 0.0
    bound: float = 0.0
    problem: str = ""  # why the outputs could not be compared


def load_tolerances(bpte: Path) -> dict[str, Tolerance]:
    """The per-method tolerances the build chose for this bundle (`verify.json` beside it, when
    that file's `bundle` names it), else none."""
    report = bpte.parent / "verify.json"
    try:
        bundle = json.loads(report.read_text()).get("bundle", {})
    except (OSError, ValueError, AttributeError):
        return {}
    if not isinstance(bundle, dict) or bundle.get("file") != bpte.name:
        return {}
    return {m: Tolerance(float(t["rtol"]), float(t["atol"])) for m, t in bundle.get("tolerances", {}).items()}


def verify_bundle(
    bpte: Path, tolerances: dict[str, Tolerance] | None = None, default: Tolerance = EXECUTORCH_DEFAULT,
    max_planned_bytes: int | None = None,
) -> list[CaseResult]:
    """Every case of every method of the bundle, run in our runtime; `tolerances` per method, else `default`."""
    bundle = read_bundle(bpte.read_bytes(), str(bpte))
    if not bundle.method_test_suites:
        raise InvalidBundle(f"{bpte}: the bundle has no test cases")
    program = bytes(bundle.program)
    results = []
    for suite in bundle.method_test_suites:
        tol = (tolerances or {}).get(suite.method_name, default)
        results += _run_suite(Program(program, f"{bpte} (its program)"), suite, tol, max_planned_bytes, str(bpte))
    return results


def _run_suite(
    program: Program, suite: BundledMethodTestSuite, tol: Tolerance, max_planned_bytes: int | None, source: str
) -> list[CaseResult]:
    name = suite.method_name
    if name not in program.method_names:
        raise InvalidBundle(f"{source}: test cases for method {printable(name)!r}, which the program does not have "
                            f"(it has {', '.join(map(printable, program.method_names))})")
    method = program.load_method(name, max_planned_bytes=max_planned_bytes)
    results = []
    for i, case in enumerate(suite.test_cases):
        where = f"{source}: method {printable(name)!r} case {i}"
        inputs = [value_object(v, f"{where} input {k}") for k, v in enumerate(case.inputs)]
        expected = [value_object(v, f"{where} expected output {k}") for k, v in enumerate(case.expected_outputs)]
        try:
            actual = method(*inputs)
        except MethodInputError as exc:
            raise InvalidBundle(f"{where}: its inputs do not fit the method: {exc}") from None
        results.append(judge(name, i, expected, actual, tol))
    return results


def judge(method: str, case: int, expected: list[Any], actual: list[Any], tol: Tolerance) -> CaseResult:
    """One case's outputs against its expected outputs (ExecuTorch's test, see the module docstring)."""
    if len(actual) != len(expected):
        return CaseResult(method, case, False, float("inf"), 0.0,
                          f"{len(actual)} outputs, {len(expected)} expected")
    worst_error, worst_ratio, worst_bound = 0.0, -1.0, 0.0
    for k, (e, a) in enumerate(zip(expected, actual)):
        e, a = np.asarray(e), np.asarray(a)
        if e.shape != a.shape:
            return CaseResult(method, case, False, float("inf"), 0.0,
                              f"output {k} is {list(a.shape)}, {list(e.shape)} expected")
        error, ratio, bound = _compare(e, a, tol)
        worst_error = max(worst_error, error)
        if ratio > worst_ratio:
            worst_ratio, worst_bound = ratio, bound
    return CaseResult(method, case, worst_ratio <= 1.0, worst_error, worst_bound)


def _compare(expected: np.ndarray, actual: np.ndarray, tol: Tolerance) -> tuple[float, float, float]:
    """(largest |error|, largest error/bound ratio, the bound where that ratio is reached)."""
    if expected.size == 0:
        return 0.0, 0.0, 0.0
    e64, a64 = expected.astype(np.float64).ravel(), actual.astype(np.float64).ravel()
    exact = not np.issubdtype(expected.dtype, np.floating)
    same = (e64 == a64) | (np.isnan(e64) & np.isnan(a64))
    error = np.where(same, 0.0, np.nan_to_num(np.abs(a64 - e64), nan=np.inf, posinf=np.inf))
    bound = np.zeros_like(e64) if exact else tol.atol + tol.rtol * np.abs(np.nan_to_num(e64))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(error == 0, 0.0, error / bound)
    at = int(np.argmax(ratio))
    return float(error.max()), float(ratio[at]), float(bound[at])


def format_results(results: list[CaseResult]) -> str:
    """A table: method, case, max abs error, bound, verdict; then a summary line."""
    rows = [f"{'method':<16} {'case':>4} {'max abs error':>14} {'bound':>10}  result"]
    for r in results:
        verdict = "ok" if r.passed else f"FAIL{': ' + r.problem if r.problem else ''}"
        rows.append(f"{printable(r.method):<16} {r.case:>4} {r.max_abs_error:>14.3g} {r.bound:>10.3g}  {verdict}")
    failed = sum(not r.passed for r in results)
    rows.append(f"{len(results) - failed} of {len(results)} cases passed")
    return "\n".join(rows)


def parse_tolerance(rtol: float | None, atol: float | None) -> Tolerance | None:
    """The command line's tolerance (either flag given), or None to use the build's."""
    if rtol is None and atol is None:
        return None
    tol = Tolerance(EXECUTORCH_RTOL if rtol is None else rtol, EXECUTORCH_ATOL if atol is None else atol)
    if tol.rtol < 0 or tol.atol < 0:
        raise UsageError(f"--rtol {tol.rtol} / --atol {tol.atol}: tolerances must be >= 0")
    return tol
