"""The compiled loops of etbuild.kernels.native: accuracy against float64, special values, in-place
use, and the kernels that bind them conforming to torch with the loops and without them."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from etbuild.kernels import native
from etbuild.runtime import threads
from tests.kernels import conformance

F = np.float32
LOOPS = native.loops()
needs_loops = pytest.mark.skipif(LOOPS is None, reason="numba is not installed")


def exact_gelu(x: np.ndarray) -> np.ndarray:
    """x·Φ(x) in float64 (erfc keeps the negative tail's relative precision)."""
    return np.array([v * 0.5 * math.erfc(-v / math.sqrt(2)) for v in x.astype(np.float64)])


@needs_loops
def test_gelu_is_within_float32_rounding_of_the_exact_function() -> None:
    rng = np.random.default_rng(0)
    x = np.concatenate([np.linspace(-12, 12, 400_001), rng.standard_normal(200_000) * 3]).astype(F)
    out = np.empty_like(x)
    LOOPS.gelu(x, out)
    error = np.abs(out - exact_gelu(x))
    assert error.max() <= 1.2e-6  # torch's own float32 gelu: 1.2e-6 on this grid
    assert (error <= 4e-7 * np.abs(x) + 2e-7).all()  # within erf's 3.6e-7 of |x|/2, plus rounding


@needs_loops
def test_gelu_tails_and_special_values() -> None:
    x = np.array([6.0, 100.0, 3e38, -6.0, -100.0, -3e38, 0.0, np.nan, np.inf, -np.inf], F)
    out = np.empty_like(x)
    LOOPS.gelu(x, out)
    np.testing.assert_array_equal(out[:3], x[:3])  # erf(x/√2) is exactly 1 beyond the clamp
    np.testing.assert_array_equal(out[3:7], 0.0)
    assert np.isnan(out[7]) and out[8] == np.inf and np.isnan(out[9])  # torch: -inf·0 is nan


@needs_loops
def test_gelu_in_place_and_empty() -> None:
    x = np.linspace(-4, 4, 1001, dtype=F)
    want = np.empty_like(x)
    LOOPS.gelu(x, want)
    LOOPS.gelu(x, x)
    np.testing.assert_array_equal(x, want)
    LOOPS.gelu(np.empty(0, F), np.empty(0, F))


@needs_loops
@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (128, 256), (5, 1000)])
def test_layer_norm_rows_against_float64(shape: tuple[int, int]) -> None:
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(shape) * 3 + 5).astype(F)
    w, b = rng.standard_normal(shape[1]).astype(F), rng.standard_normal(shape[1]).astype(F)
    out, mean, rstd = np.empty_like(x), np.empty(shape[0], F), np.empty(shape[0], F)
    LOOPS.layer_norm(x, w, b, F(1e-5), out, mean, rstd)
    xd = x.astype(np.float64)
    m = xd.mean(1)
    r = 1 / np.sqrt(((xd - m[:, None]) ** 2).mean(1) + 1e-5)
    np.testing.assert_allclose(mean, m, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(rstd, r, rtol=1e-5)
    np.testing.assert_allclose(out, (xd - m[:, None]) * r[:, None] * w + b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["aten::gelu.out", "aten::native_layer_norm.out"])
@pytest.mark.parametrize("setting", ["1", "0"])
def test_kernels_conform_with_and_without_the_loops(name: str, setting: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "DEFAULTS", threads.NumericOptions(native=setting != "0"))
    assert (native.loops() is None) == (setting == "0" or LOOPS is None)
    failures = [f for d in ("float32", "float64", "float16") for f in conformance.check(name, d).failures]
    assert not failures, "\n".join(failures)


def test_without_numba_the_kernels_keep_their_numpy_paths() -> None:
    """numba unimportable (a trimmed runtime's product without it): loops() is None, gelu still runs."""
    code = (
        "import sys; sys.modules['numba'] = None\n"
        "import numpy as np\n"
        "from etbuild.kernels import native\n"
        "from etbuild.kernels.portable.activation import gelu_out\n"
        "assert native.loops() is None\n"
        "out = gelu_out(np.array([-1.0, 0.0, 2.0], np.float32), 'none', np.empty(3, np.float32))\n"
        "np.testing.assert_allclose(out, [-0.15865526, 0.0, 1.9544997], rtol=1e-6)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@needs_loops
def test_numpy_paths_turns_the_loops_off_inside_its_block_only() -> None:
    """Nested blocks too; an error inside still restores the loops."""
    with native.numpy_paths():
        assert native.loops() is None
        with native.numpy_paths():
            assert native.loops() is None
        assert native.loops() is None
    assert native.loops() is LOOPS
    with pytest.raises(KeyError), native.numpy_paths():
        raise KeyError
    assert native.loops() is LOOPS


NUMPY_PATHS_CHECK = """
import numpy as np, sys
import etbuild.kernels.native as native
from etbuild.kernels.portable.activation import gelu_out
with native.numpy_paths():
    gelu_out(np.array([-1.0, 0.0, 2.0], np.float32), 'none', np.empty(3, np.float32))
print('numba' in sys.modules, 'etbuild.kernels.native_loops' in sys.modules)
"""


def test_a_numpy_paths_block_neither_imports_nor_starts_numba() -> None:
    """In a fresh process: a kernel run inside the block leaves numba unimported (its start is what the
    block saves)."""
    proc = subprocess.run([sys.executable, "-c", NUMPY_PATHS_CHECK], capture_output=True, text=True, check=True)
    assert proc.stdout.split() == ["False", "False"]


WARM_CHECK = """
import contextlib, sys, numba
from etbuild.kernels import native
from etbuild.kernels import native_loops
from etbuild.runtime import threads
dispatchers = {n: f for n, f in vars(native_loops).items() if isinstance(f, numba.core.registry.CPUDispatcher)}
assert not any(f.signatures for f in dispatchers.values()), "compiled before warm()"
off = threads.use(threads.NumericOptions(native=False)) if sys.argv[1] == "0" else contextlib.nullcontext()
with off:
    native.warm()
    print(sorted(n for n, f in dispatchers.items() if f.signatures))
    print(sorted(dispatchers))
    print(native.loops() is None)
"""


@needs_loops
@pytest.mark.parametrize("setting", ["1", "0"])
def test_warm_compiles_every_loop_or_does_nothing(setting: str) -> None:
    """In a fresh process: warm() leaves every numba dispatcher of native_loops with a compiled
    signature; with the options' native=False, loops() is None and warm() compiles none."""
    proc = subprocess.run([sys.executable, "-c", WARM_CHECK, setting], capture_output=True, text=True, check=True)
    compiled, every, disabled = proc.stdout.splitlines()
    assert {"gelu", "layer_norm"} <= set(eval(every))
    # helpers compiled into the loops calling them, never bound alone: they have signatures of their own only when
    # their callers were compiled in this process rather than loaded from numba's disk cache
    called_inside = {"row_moments", "_gelu1", "_head_scores", "_probabilities"}
    bound = set(eval(every)) - called_inside
    assert set(eval(compiled)) - called_inside == (bound if setting == "1" else set())
    assert disabled == str(setting == "0")
