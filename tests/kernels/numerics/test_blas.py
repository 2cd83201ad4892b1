"""etbuild.kernels.numerics.blas: products bound to the runtime's BLAS library (MKL with the `mkl` extra on Intel
processors, else the packaged OpenBLAS) where it takes them, numpy's call otherwise, split over the pool when
large, and the same values either way."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from etbuild.kernels import native
from etbuild.kernels.numerics import blas
from etbuild.runtime import threads

MKL = blas.library()
OPENBLAS = blas.packaged_openblas()
AVAILABLE = {"mkl": MKL is not None, "openblas": OPENBLAS is not None}
LIBRARIES = ["numpy", "auto", "openblas"]  # the blas options; "auto" is MKL on Intel where the extra is installed
rng = np.random.default_rng(0)


def operand(shape: tuple[int, ...], transposed: bool = False, dtype: type = np.float32) -> np.ndarray:
    """A random operand of `shape`; `transposed` stores its last two dims the other way round."""
    if not transposed:
        return rng.standard_normal(shape).astype(dtype)
    stored = rng.standard_normal((*shape[:-2], shape[-1], shape[-2])).astype(dtype)
    return np.swapaxes(stored, -1, -2)


def by_library(call: object) -> bool:
    """Whether the bound call (or every block of a split one) is a library's sgemm (not numpy's call)."""
    return all(hasattr(c, "arrays") for c in getattr(call, "calls", [call]))


CASES = [
    # a, b, a transposed, b transposed
    ((128, 256), (256, 1024), False, False),
    ((128, 256), (256, 1024), False, True),
    ((256, 128), (128, 1024), True, False),
    ((255, 131), (131, 257), True, True),  # odd sizes
    ((1, 1024), (1024, 1024), False, False),  # one row
    ((1024, 1024), (1024, 1), False, False),  # one column
    ((4, 128, 64), (4, 64, 128), False, True),  # attention's scores
    ((2, 3, 64, 96), (2, 3, 96, 64), False, False),  # two batch dims
    ((96, 128), (5, 128, 96), False, False),  # a broadcast over b's batch
    ((5, 96, 128), (128, 96), False, False),  # b broadcast
]


@pytest.mark.parametrize("blas_name", ["auto", "openblas"])
@pytest.mark.parametrize(("sa", "sb", "ta", "tb"), CASES)
def test_products_match_numpy(sa: tuple[int, ...], sb: tuple[int, ...], ta: bool, tb: bool, blas_name: str) -> None:
    a, b = operand(sa, ta), operand(sb, tb)
    expected = np.matmul(a.astype(np.float64), b.astype(np.float64))
    out = np.full(expected.shape, np.nan, np.float32)
    with threads.use(threads.NumericOptions(blas=blas_name)):
        call = blas.bound_product(np.matmul, a, b, out)
        library = blas._usable()
        out2 = np.empty_like(out)
        blas.matmul(a, b, out2)  # the unbound form: the same product, the same bits
    expected_library = (AVAILABLE["mkl"] or AVAILABLE["openblas"]) if blas_name == "auto" else AVAILABLE[blas_name]
    assert (library is not None) == expected_library
    assert by_library(call) == (expected_library and sa[-2] * sa[-1] * sb[-1] >= blas.LIBRARY_MACS)  # each matrix
    call()
    scale = np.abs(a).max() * np.abs(b).max() * sa[-1]
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-6 * scale)
    np.testing.assert_array_equal(out2, out)


def test_a_bound_product_reads_its_operands_at_each_call() -> None:
    a, b = operand((128, 128)), operand((128, 128))
    out = np.empty((128, 128), np.float32)
    call = blas.bound_product(np.matmul, a, b, out)
    a *= 2
    call()
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)


def test_into_a_strided_out_view() -> None:
    a, b = operand((128, 256)), operand((256, 512))
    big = np.zeros((128, 600), np.float32)
    call = blas.bound_product(np.matmul, a, b, big[:, 50:562])
    call()
    np.testing.assert_allclose(big[:, 50:562], a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    assert not big[:, :50].any() and not big[:, 562:].any()


@pytest.mark.parametrize("kind", ["small", "float64", "overlap", "columns_out", "strided_inner", "vector", "empty",
                                  "mixed_batch", "interleaved_out", "stack_of_small"])
def test_what_a_library_does_not_take_stays_with_numpy(kind: str) -> None:
    a, b = operand((128, 256)), operand((256, 512))
    out = np.empty((128, 512), np.float32)
    if kind == "small":
        a, b, out = operand((64, 64)), operand((64, 64)), np.empty((64, 64), np.float32)
    elif kind == "float64":
        a, b, out = a.astype(np.float64), b.astype(np.float64), out.astype(np.float64)
    elif kind == "overlap":
        a, b = operand((512, 512)), operand((512, 512))
        out = a  # the product would overwrite an operand it reads
    elif kind == "columns_out":
        out = np.empty((512, 128), np.float32).T
    elif kind == "strided_inner":
        a = operand((128, 512))[:, ::2]
    elif kind == "vector":
        b, out = operand((256,)), np.empty(128, np.float32)
    elif kind == "empty":
        a, out = operand((0, 256)), np.empty((0, 512), np.float32)
    elif kind == "mixed_batch":  # batch dims that do not flatten to one stride
        a = operand((4, 6, 64, 64)).transpose(1, 0, 2, 3)
        b, out = operand((6, 4, 64, 64)), np.empty((6, 4, 64, 64), np.float32)
    elif kind == "stack_of_small":  # 8 matrices of 230k multiply-adds: numpy's BLAS beats MKL's strided batch
        a, b, out = operand((9, 160)), operand((8, 160, 160)), np.empty((8, 9, 160), np.float32)
    elif kind == "interleaved_out":  # heads [H, T, D] into [T, H, D]: MKL's strided batch refuses such outputs
        a, b = operand((4, 128, 128)), operand((4, 128, 64))
        out = np.full((128, 4, 64), np.nan, np.float32).transpose(1, 0, 2)
    expected = np.matmul(a, b)
    with threads.use(threads.NumericOptions(threads=1)):  # with threads a stack splits one matrix a block
        call = blas.bound_product(np.matmul, a, b, out)
    assert not by_library(call)
    call()
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-4)


def test_numpy_paths_keep_numpy_blas() -> None:
    a, b = operand((128, 256)), operand((256, 512))
    out = np.empty((128, 512), np.float32)
    with native.numpy_paths():
        assert not by_library(blas.bound_product(np.matmul, a, b, out))


def run_python(code: str, **env: str) -> str:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                            env={**os.environ, **env}, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.mark.parametrize("count", [1, 2, 3])
@pytest.mark.parametrize(("m", "n", "blocks"), [(512, 256, lambda t: min(4 * t, 512 // 16, 32)),
                                                (128, 1024, lambda t: t)])
def test_large_products_split_over_the_pool_with_the_same_bits(count: int, m: int, n: int, blocks) -> None:
    """A product of at least SPLIT_MACS is cut into blocks when the options give it threads: by rows when out has
    more rows than columns, else by columns (each block packs only its part of b); either way every element is one
    BLAS call's sum over the whole of k, bit for bit the unsplit product's."""
    a, b = operand((m, 512)), operand((512, n))
    with threads.use(threads.NumericOptions(threads=1)):
        whole = np.empty((m, n), np.float32)
        call = blas.bound_product(np.matmul, a, b, whole)
        assert not hasattr(call, "calls")
        call()
    with threads.use(threads.NumericOptions(threads=count)):
        out = np.full((m, n), np.nan, np.float32)
        split = blas.bound_product(np.matmul, a, b, out)
    assert len(getattr(split, "calls", [split])) == (1 if count == 1 else blocks(count))
    split()
    np.testing.assert_array_equal(out, whole)


def test_the_options_keep_numpy_blas() -> None:
    a, b = operand((128, 256)), operand((256, 512))
    out = np.empty((128, 512), np.float32)
    for options in (threads.NumericOptions(blas="numpy"), threads.NumericOptions(native=False),
                    threads.NumericOptions(blas="/nonexistent/libmkl_rt.so")):
        with threads.use(options):
            assert not by_library(blas.bound_product(np.matmul, a, b, out))


@pytest.mark.parametrize("blas_name", ["mkl", "openblas"])
def test_a_program_loaded_before_a_fork_runs_in_the_child(blas_name: str) -> None:
    """MKL runs its sequential layer and the packaged OpenBLAS one thread (the pool threads products), so a child
    forked after products were bound and run, pool threads started, calls the same bound products and gets the
    same numbers."""
    if not AVAILABLE[blas_name]:
        pytest.skip(f"{blas_name} is not installed")
    code = """
        import os
        import numpy as np
        from etbuild.kernels.numerics import blas
        from etbuild.runtime import threads
        rng = np.random.default_rng(0)
        a, b = rng.standard_normal((512, 512)).astype(np.float32), rng.standard_normal((512, 512)).astype(np.float32)
        out = np.empty_like(a)
        with threads.use(threads.NumericOptions(threads=2, blas=BLAS)):
            call = blas.bound_product(np.matmul, a, b, out)
            assert blas._usable().name == BLAS
        call()
        expected = out.copy()
        pid = os.fork()
        if pid == 0:
            out[:] = 0
            call()
            os._exit(0 if np.array_equal(out, expected) else 3)
        print(os.waitpid(pid, 0)[1])
    """
    assert run_python(code.replace("BLAS", repr(blas_name))) == "0"


def one_and_two_threads(product, a: np.ndarray, b: np.ndarray, blas_name: str) -> tuple[np.ndarray, np.ndarray, object]:
    """a @ b computed at one thread (`whole`), and the same product bound at two threads into a NaN-filled `out`
    (not yet run): (whole, out, the bound call)."""
    out_shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
    whole = np.empty(out_shape, np.float32)
    with threads.use(threads.NumericOptions(threads=1, blas=blas_name)):
        blas.bound_product(product, a, b, whole)()
    with threads.use(threads.NumericOptions(threads=2, blas=blas_name)):
        out = np.full(out_shape, np.nan, np.float32)
        return whole, out, blas.bound_product(product, a, b, out)


@pytest.mark.parametrize("blas_name", LIBRARIES)
def test_a_column_split_of_np_dot_writes_its_strided_blocks(blas_name: str) -> None:
    """np.dot takes no strided out: a product bound with it and split by columns still runs, with the same bits."""
    whole, out, split = one_and_two_threads(np.dot, operand((64, 512)), operand((512, 1024)), blas_name)
    assert len(split.calls) == 2
    split()
    np.testing.assert_array_equal(out, whole)


@pytest.mark.parametrize("blas_name", LIBRARIES)
def test_split_products_are_claimed_without_the_gil(blas_name: str) -> None:
    """With numba's loops a split product is a table of sgemm calls (the runtime's library's, or numpy's own
    OpenBLAS's) that the
    pool's compiled side claims: the same bits as the unsplit product through the same BLAS, run after run."""
    whole, out, split = one_and_two_threads(np.dot, operand((128, 512)), operand((512, 1024)), blas_name)
    if blas._sgemm_address() is None:
        pytest.skip("no BLAS function address here (numpy's BLAS is not its bundled OpenBLAS)")
    assert split.table.shape[0] == len(split.calls) == 2
    for _ in range(20):
        out[:] = np.nan
        split()
        np.testing.assert_array_equal(out, whole)


@pytest.mark.parametrize("blas_name", LIBRARIES)
def test_a_stack_of_products_splits_one_matrix_a_block(blas_name: str) -> None:
    """Attention's heads (a stack of at least SPLIT_MACS in all): one block per matrix, broadcast operands
    included, the values of the one-thread product."""
    a, b = operand((2, 4, 128, 64)), operand((4, 64, 128), transposed=True)
    whole = np.empty((2, 4, 128, 128), np.float32)
    with threads.use(threads.NumericOptions(threads=1, blas=blas_name)):
        one = blas.bound_product(np.matmul, a, b, whole)
        assert not hasattr(one, "calls")
        one()
    with threads.use(threads.NumericOptions(threads=2, blas=blas_name)):
        out = np.full(whole.shape, np.nan, np.float32)
        split = blas.bound_product(np.matmul, a, b, out)
    if blas._sgemm_address() is None:
        pytest.skip("no BLAS function address here (numpy's BLAS is not its bundled OpenBLAS)")
    assert split.table.shape[0] == 8
    split()
    np.testing.assert_allclose(out, whole, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("count", [1, 2])
@pytest.mark.parametrize("blas_name", LIBRARIES)
def test_a_stack_into_interleaved_matrices(count: int, blas_name: str) -> None:
    """bound_stack: heads [H, T, D] written straight into a [T, H, D] output (each matrix a row stride of H·D), one
    sgemm call a matrix, the values of numpy's product."""
    a, b = operand((4, 128, 64)), operand((4, 64, 32))
    out = np.full((128, 4, 32), np.nan, np.float32)
    with threads.use(threads.NumericOptions(threads=count, blas=blas_name)):
        call = blas.bound_stack(a, b, out.transpose(1, 0, 2))
    for _ in range(3):
        call()
    np.testing.assert_allclose(out.transpose(1, 0, 2), np.matmul(a, b), rtol=1e-5, atol=1e-5)


def test_smaller_products_split_only_where_claims_are_cheap() -> None:
    """From FAST_SPLIT_MACS and FEW_ROWS rows (a vision transformer's 17 tokens) a product splits by columns when
    its blocks are claimed without the GIL; a few rows (a decode step's) never split."""
    with threads.use(threads.NumericOptions(threads=2)):
        assert blas._blocks(operand((17, 192)), operand((192, 768)), np.empty((17, 768), np.float32)) \
            == ((2, True) if blas._fast() else (1, False))
        assert blas._blocks(operand((4, 768)), operand((768, 1024)), np.empty((4, 1024), np.float32))[0] == 1
        assert blas._blocks(operand((17, 64)), operand((64, 768)), np.empty((17, 768), np.float32))[0] == 1


@pytest.mark.skipif(OPENBLAS is None, reason="scipy-openblas32 is not installed")
def test_the_packaged_openblas_runs_one_thread_and_matches_numpy() -> None:
    """The packaged OpenBLAS never starts threads of its own (the pool's are the threads), and its batch call (one
    call for a stack of large matrices) computes numpy's products."""
    assert OPENBLAS.scipy_openblas_get_num_threads() == 1
    a, b = operand((3, 128, 128)), operand((128, 96), transposed=True)
    out = np.full((3, 128, 96), np.nan, np.float32)
    with threads.use(threads.NumericOptions(threads=1, blas="openblas")):
        call = blas.bound_product(np.matmul, a, b, out)
    assert call.func is blas._openblas().batch
    call()
    np.testing.assert_allclose(out, np.matmul(a.astype(np.float64), b), rtol=1e-5, atol=1e-4)


def test_blas_openblas_without_the_package_is_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    """blas="openblas" where scipy-openblas32 is missing keeps numpy's BLAS, as "mkl" does without MKL."""
    monkeypatch.setattr(blas, "_openblas", lambda: None)
    a, b = operand((128, 256)), operand((256, 512))
    with threads.use(threads.NumericOptions(blas="openblas")):
        assert not by_library(blas.bound_product(np.matmul, a, b, np.empty((128, 512), np.float32)))


@pytest.mark.parametrize("intel", [True, False])
def test_auto_takes_mkl_on_intel_processors_and_openblas_on_others(monkeypatch: pytest.MonkeyPatch,
                                                                    intel: bool) -> None:
    """MKL runs its own kernels on Intel's processors alone: "auto" takes it there (when installed) and the
    packaged OpenBLAS elsewhere, each falling back to the other; "mkl" and "openblas" take theirs anyway."""
    monkeypatch.setattr(blas, "intel_cpu", lambda: intel)
    order = ["mkl", "openblas"] if intel else ["openblas", "mkl"]
    expected = next((name for name in order if AVAILABLE[name]), None)
    with threads.use(threads.NumericOptions(blas="auto")):
        chosen = blas._usable()
    assert (chosen.name if chosen is not None else None) == expected
    for name in ("mkl", "openblas"):
        with threads.use(threads.NumericOptions(blas=name)):
            chosen = blas._usable()
        assert (chosen is not None and chosen.name == name) == AVAILABLE[name]


def test_the_processor_vendor_is_read() -> None:
    blas.intel_cpu.cache_clear()
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        text = ""
    vendor = text.partition("vendor_id")[2].partition(":")[2].split("\n")[0].strip()
    assert blas.intel_cpu() == (vendor in ("GenuineIntel", ""))


def test_a_refused_import_of_the_package_is_numpys_blas(monkeypatch: pytest.MonkeyPatch) -> None:
    """A trimmed runtime's import guard raises from find_spec: the packaged OpenBLAS is then absent, not an error."""
    def refuse(name: str, package: str | None = None) -> None:
        raise ModuleNotFoundError(f"No module named {name!r} (the trimmed runtime may not use it)", name=name)

    monkeypatch.setattr(blas.importlib.util, "find_spec", refuse)
    blas.packaged_openblas.cache_clear()
    try:
        assert blas.packaged_openblas() is None
    finally:
        monkeypatch.undo()
        blas.packaged_openblas.cache_clear()
    assert (blas.packaged_openblas() is not None) == AVAILABLE["openblas"]
