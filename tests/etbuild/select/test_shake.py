"""etbuild.select.shake: Before/Expected on small synthetic modules."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping

import pytest

from etbuild.errors import InternalError
from etbuild.select.codegen import module_source
from etbuild.select.render import render
from etbuild.select.shake import Shaker

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
from etbuild.runtime.kernel_registry import kernel

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
        from etbuild.fake.helpers import used
        from etbuild.runtime.kernel_registry import kernel

        @kernel('fake::one.out')
        def one_out(x, out):
            return used(x)
    ''')
    assert shaker.uncovered() == {}


def test_a_table_loop_is_kept_when_its_table_names_a_selected_kernel():
    shaker = shake({"etbuild.fake.ops": frozenset({"fake::abs.out"})}, [])
    shaker.load("etbuild.fake.ops")
    assert text(shaker, "etbuild.fake.ops") == expected('''
        import numpy as np
        from etbuild.runtime.kernel_registry import kernel
        TABLE = {'fake::neg.out': np.negative, 'fake::abs.out': np.abs}
        for _name, _fn in TABLE.items():
            kernel(_name)(_fn)
        del _name, _fn
    ''')


def test_lost_registrations_are_reported():
    shaker = shake({"etbuild.fake.ops": frozenset({"fake::missing.out"})}, [])
    shaker.load("etbuild.fake.ops")
    assert shaker.uncovered() == {"etbuild.fake.ops": {"fake::missing.out"}}


def test_class_level_annotations_stay_as_the_strings_the_dropped_future_import_made():
    shaker = shake({}, [("etbuild.fake.records", "Record")])
    assert text(shaker, "etbuild.fake.records") == expected('''
        from dataclasses import dataclass
        from typing import ClassVar

        @dataclass
        class Record:
            count: 'ClassVar[int]' = 0
            name: 'str' = ''
    ''')


def test_unknown_names_and_non_runtime_modules_are_internal_errors():
    with pytest.raises(InternalError, match="etbuild.fake.helpers has no top-level name 'nothing'"):
        shake({}, [("etbuild.fake.helpers", "nothing")])
    shaker = Shaker(lambda m: SOURCES.get(m), lambda m: m != "etbuild.fake.ops", {})
    with pytest.raises(InternalError, match="would need etbuild.fake.ops, which is not part of the runtime"):
        shaker.load("etbuild.fake.ops")


# ---------------------------------------------------------------------------- feature flags

FEATURES = '''
CONTROL_FLOW = True
DYNAMIC_SHAPES = True


def missing(name):
    return NotImplementedError(name)
'''


def flagged(code: str, flags: Mapping[str, bool], *names: str) -> Shaker:
    """Shakes `code` as etbuild.fake.flagged for `names`, with etbuild.fake.features' flags set to `flags`."""
    sources = {**SOURCES, "etbuild.fake.features": (FEATURES, False), "etbuild.fake.flagged": (code, False)}
    shaker = Shaker(lambda m: sources.get(m) or module_source(m), lambda m: True, {},
                    constants={"etbuild.fake.features": flags})
    for name in names:
        shaker.need("etbuild.fake.flagged", name)
    return shaker


RUN = '''
from etbuild.fake import features


def jump(x):
    return x + 1


def run(x):
    if features.CONTROL_FLOW:
        x = jump(x)
    return x
'''


def test_a_flag_that_is_on_keeps_its_branch_and_its_module_does_not_ship():
    shaker = flagged(RUN, {"CONTROL_FLOW": True}, "run")
    assert text(shaker, "etbuild.fake.flagged") == expected('''
        def jump(x):
            return x + 1

        def run(x):
            x = jump(x)
            return x
    ''')
    assert "etbuild.fake.features" not in shaker.modules


def test_a_flag_that_is_off_drops_its_branch_and_what_only_it_used():
    shaker = flagged(RUN, {"CONTROL_FLOW": False}, "run")
    assert text(shaker, "etbuild.fake.flagged") == expected('''
        def run(x):
            return x
    ''')


MODE = '''
from etbuild.fake import features


def mode(x):
    if features.CONTROL_FLOW:
        return 'jump'
    elif features.DYNAMIC_SHAPES:
        return 'resize'
    elif x:
        return 'probe'
    else:
        return 'plain'
'''


def test_an_elif_chain_folds_to_the_first_branch_that_is_on_or_to_what_follows_the_off_ones():
    on = flagged(MODE, {"CONTROL_FLOW": False, "DYNAMIC_SHAPES": True}, "mode")
    assert text(on, "etbuild.fake.flagged") == expected('''
        def mode(x):
            return 'resize'
    ''')
    off = flagged(MODE, {"CONTROL_FLOW": False, "DYNAMIC_SHAPES": False}, "mode")
    assert text(off, "etbuild.fake.flagged") == expected('''
        def mode(x):
            if x:
                return 'probe'
            else:
                return 'plain'
    ''')


def test_the_else_branch_is_taken_when_the_flag_is_off():
    shaker = flagged('''
from etbuild.fake import features


def resize(x):
    return x


def size(x):
    if features.DYNAMIC_SHAPES:
        return resize(x)
    else:
        n = len(x)
    return n
''', {"DYNAMIC_SHAPES": False}, "size")
    assert text(shaker, "etbuild.fake.flagged") == expected('''
        def size(x):
            n = len(x)
            return n
    ''')


STEP = '''
from etbuild.fake import features


def step(pc, straight):
    if features.CONTROL_FLOW and not straight:
        pc += 1
    budget = features.CONTROL_FLOW and limit()
    ready = straight and features.DYNAMIC_SHAPES
    if straight and features.DYNAMIC_SHAPES or features.CONTROL_FLOW:
        pc -= 1
    return pc, budget, ready
'''


def test_and_or_drop_only_the_operands_that_cannot_change_their_value_or_in_a_test_their_truth():
    on = flagged(STEP, {"CONTROL_FLOW": True, "DYNAMIC_SHAPES": True}, "step")
    assert text(on, "etbuild.fake.flagged") == expected('''
        def step(pc, straight):
            if not straight:
                pc += 1
            budget = limit()
            ready = straight and True
            if straight or True:
                pc -= 1
            return (pc, budget, ready)
    ''')
    off = flagged(STEP, {"CONTROL_FLOW": False, "DYNAMIC_SHAPES": True}, "step")
    assert text(off, "etbuild.fake.flagged") == expected('''
        def step(pc, straight):
            budget = False
            ready = straight and True
            if straight:
                pc -= 1
            return (pc, budget, ready)
    ''')


def test_conditional_expressions_and_not_fold():
    shaker = flagged('''
from etbuild.fake import features

MODE = 'jump' if features.CONTROL_FLOW else 'plain'
STATIC = not features.DYNAMIC_SHAPES
''', {"CONTROL_FLOW": False, "DYNAMIC_SHAPES": True}, "MODE", "STATIC")
    assert text(shaker, "etbuild.fake.flagged") == expected('''
        MODE = 'plain'
        STATIC = False
    ''')


NESTED = '''
from etbuild.fake import features


def run(x):
    if features.CONTROL_FLOW:
        if features.DYNAMIC_SHAPES:
            x = x[:1]
        else:
            x = x[1:]
    return x


def spin(x):
    if features.CONTROL_FLOW:
        if features.DYNAMIC_SHAPES:
            x.clear()
    while features.DYNAMIC_SHAPES:
        x.pop()
'''


def test_nested_flags_fold_and_an_emptied_body_gets_pass():
    shaker = flagged(NESTED, {"CONTROL_FLOW": True, "DYNAMIC_SHAPES": False}, "run", "spin")
    assert text(shaker, "etbuild.fake.flagged") == expected('''
        def run(x):
            x = x[1:]
            return x

        def spin(x):
            pass
    ''')


def test_a_flag_imported_by_name_folds_its_import_goes_and_so_does_code_after_the_raise():
    shaker = flagged('''
from etbuild.fake.features import CONTROL_FLOW as CF, missing


def run(x):
    if not CF:
        raise missing('CONTROL_FLOW')
    return x
''', {"CONTROL_FLOW": False}, "run")
    assert text(shaker, "etbuild.fake.flagged") == expected('''
        from etbuild.fake.features import missing

        def run(x):
            raise missing('CONTROL_FLOW')
    ''')
    assert text(shaker, "etbuild.fake.features") == expected('''
        def missing(name):
            return NotImplementedError(name)
    ''')


def test_code_whose_removal_would_change_its_function_stays():
    shaker = flagged('''
from etbuild.fake import features


def gen(x):
    if features.CONTROL_FLOW:
        yield x


def items(x):
    if not features.CONTROL_FLOW:
        raise features.missing('CONTROL_FLOW')
    yield x


def count():
    if features.CONTROL_FLOW:
        global COUNT
    COUNT = 1
''', {"CONTROL_FLOW": False}, "gen", "items", "count")
    assert text(shaker, "etbuild.fake.flagged") == expected('''
        from etbuild.fake import features

        def gen(x):
            if False:
                yield x

        def items(x):
            raise features.missing('CONTROL_FLOW')
            yield x

        def count():
            if False:
                global COUNT
            COUNT = 1
    ''')


def test_names_of_the_flags_module_not_given_as_constants_stay_reads():
    shaker = flagged('''
from . import features


def run(x):
    if features.CONTROL_FLOW or features.DYNAMIC_SHAPES:
        return x
    raise features.missing('DYNAMIC_SHAPES')
''', {"CONTROL_FLOW": False}, "run")
    assert text(shaker, "etbuild.fake.flagged") == expected('''
        from . import features

        def run(x):
            if features.DYNAMIC_SHAPES:
                return x
            raise features.missing('DYNAMIC_SHAPES')
    ''')
    assert text(shaker, "etbuild.fake.features") == expected('''
        DYNAMIC_SHAPES = True

        def missing(name):
            return NotImplementedError(name)
    ''')


def test_a_local_that_shadows_a_flag_alias_is_not_folded():
    shaker = flagged('''
from etbuild.fake.features import CONTROL_FLOW


def run(CONTROL_FLOW):
    return 1 if CONTROL_FLOW else 2
''', {"CONTROL_FLOW": False}, "run")
    assert text(shaker, "etbuild.fake.flagged") == expected('''
        def run(CONTROL_FLOW):
            return 1 if CONTROL_FLOW else 2
    ''')


def test_assigning_a_flag_is_an_internal_error():
    with pytest.raises(InternalError) as error:
        flagged('''
import etbuild.fake.features


def enable():
    etbuild.fake.features.CONTROL_FLOW = True
''', {"CONTROL_FLOW": False}, "enable")
    assert str(error.value) == (
        "etbuild.fake.flagged, line 6: `etbuild.fake.features.CONTROL_FLOW` is assigned or deleted, but "
        "etbuild.fake.features.CONTROL_FLOW is a constant (folded into the code that reads it)"
    )


# ---------------------------------------------------------------------------- output


def test_the_future_annotations_import_goes_other_future_imports_stay():
    shaker = flagged('''
from __future__ import annotations, generator_stop

LIMIT: Budget
COUNT: int = 0
''', {}, "LIMIT", "COUNT")
    assert text(shaker, "etbuild.fake.flagged") == expected('''
        from __future__ import generator_stop
        LIMIT: 'Budget'
        COUNT = 0
    ''')


def test_string_statements_go_everywhere():
    shaker = flagged('''
"""Module docstring."""

LIMIT = 4
"""Attribute docstring."""


class Budget:
    """Class docstring."""

    steps = 0
    """Steps taken."""


def run(x):
    """Function docstring."""
    x += 1
    "a comment as a string"
    if x:
        "only a string"
    return x
''', {}, "LIMIT", "Budget", "run")
    assert text(shaker, "etbuild.fake.flagged") == expected('''
        LIMIT = 4

        class Budget:
            steps = 0

        def run(x):
            x += 1
            if x:
                pass
            return x
    ''')
