"""Every registered kernel against torch, one test per operator, every claimed dtype."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from etbuild import conformance
from etbuild.kernels.registry import load_all

REGISTRY = load_all()


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_kernel_matches_torch(name: str) -> None:
    assert name in conformance.SPECS, f"{name} is registered but has no conformance spec"
    info = REGISTRY[name]
    failures = [
        f"[{r.dtype}] {f}"
        for r in (conformance.check(name, d, info) for d in info.dtypes or (None,))
        for f in r.failures
    ]
    assert not failures, "\n".join(failures)


def test_every_spec_names_a_registered_kernel() -> None:
    assert sorted(set(conformance.SPECS) - set(REGISTRY)) == []


def test_harness_catches_a_wrong_kernel() -> None:
    info = REGISTRY["aten::add.out"]

    def off_by_one(a: np.ndarray, b: np.ndarray, alpha: float, out: np.ndarray) -> np.ndarray:
        info.fn(a, b, alpha, out)
        out += 1
        return out

    wrong = dataclasses.replace(info, fn=off_by_one)
    result = conformance.check("aten::add.out", "float32", wrong)
    assert result.failures and "elements differ" in result.failures[0]


def test_harness_catches_a_kernel_that_ignores_its_out() -> None:
    info = REGISTRY["aten::relu.out"]
    wrong = dataclasses.replace(info, fn=lambda x, out: np.maximum(x, 0))
    result = conformance.check("aten::relu.out", "float32", wrong)
    assert any("must return its out" in f or "bounded" in f for f in result.failures)


def test_coverage_table_summarises(capsys: pytest.CaptureFixture[str]) -> None:
    results = [conformance.check("aten::relu.out", "float32"), conformance.check("aten::relu.out", "int8")]
    text = conformance.table(results)
    assert text.splitlines()[-1] == "1 operators, 2 (operator, dtype) cases, 0 failed"


def test_main_prints_the_table_and_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert conformance.main(["aten::relu.out"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "1 operators, 8 (operator, dtype) cases, 0 failed"


def test_main_exits_non_zero_on_a_failure(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    wrong = conformance.OpSpec(conformance.unary, ref=lambda c: c.args[0] + 1)
    monkeypatch.setitem(conformance.SPECS, "aten::relu.out", wrong)
    assert conformance.main(["aten::relu.out"]) == 1
    assert "FAIL aten::relu.out" in capsys.readouterr().err


def test_a_registered_kernel_without_a_spec_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(conformance.SPECS, "aten::relu.out")
    (result,) = conformance.check_all(["aten::relu.out"])
    assert result.failures == ["no conformance spec"]
