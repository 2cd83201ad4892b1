"""Every registered kernel against torch, one test per operator, every claimed dtype; each
kernel module's specs in the spec file named after it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from etbuild.runtime.kernel_registry import load_all
from tests.kernels import conformance

REGISTRY = load_all()
HERE = Path(__file__).resolve().parent
SPEC_FILES = sorted(p for p in HERE.rglob("*.py") if p.parent != HERE and not p.name.startswith(("test_", "__")))


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_kernel_matches_torch(name: str) -> None:
    where = conformance.spec_module(REGISTRY[name].module)
    assert name in conformance.specs(), f"{name} is registered but {where} has no conformance spec for it"
    info = REGISTRY[name]
    failures = [
        f"[{r.dtype}] {f}"
        for r in (conformance.check(name, d, info) for d in info.dtypes or (None,))
        for f in r.failures
    ]
    assert not failures, "\n".join(failures)


def test_every_spec_names_a_registered_kernel() -> None:
    assert sorted(set(conformance.specs()) - set(REGISTRY)) == []


@pytest.mark.parametrize("path", SPEC_FILES, ids=lambda p: p.relative_to(HERE).as_posix())
def test_a_spec_file_holds_the_specs_of_its_kernel_module_only(path: Path) -> None:
    parts = path.relative_to(HERE).with_suffix("").parts
    module, kernel_module = "tests.kernels." + ".".join(parts), "etbuild.kernels." + ".".join(parts)
    specs = conformance.family_specs(module)
    assert specs, f"{path} defines no SPECS, or no kernel module {kernel_module} exists"
    elsewhere = {name: REGISTRY[name].module if name in REGISTRY else "nowhere" for name in specs}
    assert {n: m for n, m in elsewhere.items() if m != kernel_module} == {}, f"{path}: kernels registered elsewhere"


def test_spec_files_mirror_the_kernel_modules() -> None:
    assert conformance.spec_module("etbuild.kernels.portable.pooling") == "tests.kernels.portable.pooling"
    assert conformance.spec_module("etbuild.kernels.quantized.ops") == "tests.kernels.quantized.ops"
    assert conformance.family_specs("tests.kernels.quantized.ops") == {}


def test_a_spec_file_that_fails_to_import_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "broken_specs.py").write_text("import no_such_module_for_the_conformance_test\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError, match="no_such_module_for_the_conformance_test"):
        conformance.family_specs("broken_specs")


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
    monkeypatch.setitem(conformance.specs(), "aten::relu.out", wrong)
    assert conformance.main(["aten::relu.out"]) == 1
    assert "FAIL aten::relu.out" in capsys.readouterr().err


def test_a_registered_kernel_without_a_spec_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(conformance.specs(), "aten::relu.out")
    (result,) = conformance.check_all(["aten::relu.out"])
    assert result.failures == ["no conformance spec in tests.kernels.portable.activation"]
