"""etbuild.select.shake: Before/Expected on small synthetic modules."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping

import pytest

from etbuild.errors import InternalError
from etbuild.select.codegen import module_source
from etbuild.select.shake import Shaker, render

HELPERS = '''
"""Helpers."""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

SCALE = 2.0
UNUSED = {"a": 1}


def used(x: float, fn: Callable[[float], float] = math.floor) -> float:
    """Scaled and rounded."""
    total: float = fn(x * SCALE)
    return total


def unused() -> np.ndarray:
    return np.zeros(1)


def shadowing(SCALE: float) -> float:
    return SCALE
'''

OPS = '''
"""Kernels."""
from __future__ import annotations

import numpy as np

from etbuild.fake.helpers import used
from etbuild.kernels.registry import kernel

TABLE = {"fake::neg.out": np.negative, "fake::abs.out": np.abs}


@kernel("fake::one.out")
def one_out(x, out):
    return used(x)


@kernel("fake::two.out")
def two_out(x, out):
    return np.copyto(out, x)


for _name, _fn in TABLE.items():
    kernel(_name)(_fn)
del _name, _fn
'''

RECORDS = '''
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass
class Record:
    """A record."""

    count: ClassVar[int] = 0
    name: str = ""
'''

SOURCES = {"etbuild.fake": ("", True), "etbuild.fake.helpers": (HELPERS, False), "etbuild.fake.ops": (OPS, False),
           "etbuild.fake.records": (RECORDS, False)}


def shake(selected: Mapping[str, frozenset[str]], wanted: list[tuple[str, str]]) -> Shaker:
    shaker = Shaker(lambda m: SOURCES.get(m) or module_source(m), lambda m: True, selected)
    for module, name in wanted:
        shaker.need(module, name)
    return shaker


def text(shaker: Shaker, module: str) -> str:
    return render(shaker.kept_statements(module))


def expected(code: str) -> str:
    return textwrap.dedent(code).lstrip("\n")


def test_unused_definitions_imports_docstrings_and_annotations_go():
    shaker = shake({}, [("etbuild.fake.helpers", "used")])
    assert text(shaker, "etbuild.fake.helpers") == expected('''
        from __future__ import annotations
        import math
        SCALE = 2.0

        def used(x, fn=math.floor):
            total = fn(x * SCALE)
            return total
    ''')


def test_a_parameter_shadowing_a_global_does_not_keep_it():
    shaker = shake({}, [("etbuild.fake.helpers", "shadowing")])
    assert "SCALE = 2.0" not in text(shaker, "etbuild.fake.helpers")


def test_literal_registrations_are_kept_only_when_selected():
    shaker = shake({"etbuild.fake.ops": frozenset({"fake::one.out"})}, [])
    shaker.load("etbuild.fake.ops")
    assert text(shaker, "etbuild.fake.ops") == expected('''
        from __future__ import annotations
        from etbuild.fake.helpers import used
        from etbuild.kernels.registry import kernel

        @kernel('fake::one.out')
        def one_out(x, out):
            return used(x)
    ''')
    assert shaker.uncovered() == {}


def test_a_table_loop_is_kept_when_its_table_names_a_selected_kernel():
    shaker = shake({"etbuild.fake.ops": frozenset({"fake::abs.out"})}, [])
    shaker.load("etbuild.fake.ops")
    assert text(shaker, "etbuild.fake.ops") == expected('''
        from __future__ import annotations
        import numpy as np
        from etbuild.kernels.registry import kernel
        TABLE = {'fake::neg.out': np.negative, 'fake::abs.out': np.abs}
        for _name, _fn in TABLE.items():
            kernel(_name)(_fn)
        del _name, _fn
    ''')


def test_lost_registrations_are_reported():
    shaker = shake({"etbuild.fake.ops": frozenset({"fake::missing.out"})}, [])
    shaker.load("etbuild.fake.ops")
    assert shaker.uncovered() == {"etbuild.fake.ops": {"fake::missing.out"}}


def test_class_level_annotations_stay_and_keep_their_imports():
    shaker = shake({}, [("etbuild.fake.records", "Record")])
    assert text(shaker, "etbuild.fake.records") == expected('''
        from __future__ import annotations
        from dataclasses import dataclass
        from typing import ClassVar

        @dataclass
        class Record:
            count: ClassVar[int] = 0
            name: str = ''
    ''')


def test_unknown_names_and_non_runtime_modules_are_internal_errors():
    with pytest.raises(InternalError, match="etbuild.fake.helpers has no top-level name 'nothing'"):
        shake({}, [("etbuild.fake.helpers", "nothing")])
    shaker = Shaker(lambda m: SOURCES.get(m), lambda m: m != "etbuild.fake.ops", {})
    with pytest.raises(InternalError, match="would need etbuild.fake.ops, which is not part of the runtime"):
        shaker.load("etbuild.fake.ops")
