"""etbuild.runtime.threads: the pool (every block once, the caller able to do them all, errors raised, a forked child
served), the options and what the command line reads of them, and numpy's BLAS held at one thread."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import pytest

from etbuild.errors import UsageError
from etbuild.runtime import threads
from etbuild.runtime.runner import environment_options


@pytest.mark.parametrize(("workers", "count"), [(1, 5), (2, 1), (2, 7), (3, 64)])
def test_every_block_runs_once(workers: int, count: int) -> None:
    seen: list[int] = []
    lock = threading.Lock()

    def block(i: int) -> None:
        with lock:
            seen.append(i)

    threads.Pool(workers).run(block, count)
    assert sorted(seen) == list(range(count))


def test_the_caller_does_every_block_when_no_worker_comes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers that never wake (every core busy) cost nothing but their share: the caller claims every block."""
    pool = threads.Pool(4)
    monkeypatch.setattr(pool, "_start", lambda: setattr(pool, "_pid", os.getpid()))  # no worker threads at all
    callers: set[int] = set()
    pool.run(lambda i: callers.add(threading.get_ident()), 16)
    assert callers == {threading.get_ident()}


def test_an_error_in_a_block_is_raised_by_run() -> None:
    def block(i: int) -> None:
        if i == 3:
            raise ValueError("block 3")

    with pytest.raises(ValueError, match="block 3"):
        threads.Pool(2).run(block, 8)


def test_a_forked_child_gets_workers_of_its_own() -> None:
    code = """
        import os
        from etbuild.runtime import threads
        pool = threads.pool(2)
        out = []
        pool.run(out.append, 4)
        pid = os.fork()
        if pid == 0:
            got = []
            pool.run(got.append, 32)
            os._exit(0 if sorted(got) == list(range(32)) else 3)
        print(os.waitpid(pid, 0)[1])
    """
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "0"


def test_options_are_checked_and_scoped() -> None:
    with pytest.raises(ValueError, match="threads"):
        threads.NumericOptions(threads=0)
    with pytest.raises(ValueError, match="blas"):
        threads.NumericOptions(blas="")
    assert threads.current() == threads.DEFAULTS
    with threads.use(threads.NumericOptions(threads=1, native=False)) as binding:
        assert threads.current().thread_count == 1 and not threads.current().native
        threads.note_numpy_blas()
    assert binding.numpy_blas and threads.current() == threads.DEFAULTS


def test_the_command_line_reads_the_environment_into_options() -> None:
    env = {"ETBUILD_THREADS": "3", "ETBUILD_BLAS": "numpy", "ETBUILD_NATIVE": "0", "OMP_NUM_THREADS": "1"}
    assert environment_options(env) == {"threads": 3, "blas": "numpy", "native": False}
    assert environment_options({}) == {}
    with pytest.raises(UsageError, match="ETBUILD_THREADS"):
        environment_options({"ETBUILD_THREADS": "two"})


def test_loading_a_program_leaves_the_environment_alone(tmp_path) -> None:
    """No environment variable is written by binding kernels (numba's threading layer included)."""
    code = """
        import os
        import numpy as np
        before = dict(os.environ)
        from etbuild.kernels import native
        from etbuild.kernels.numerics import blas
        native.warm()
        a = np.ones((256, 256), np.float32)
        blas.bound_product(np.matmul, a, a, np.empty_like(a))()
        print(dict(os.environ) == before)
    """
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                            timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"


def test_numpy_blas_is_held_at_one_thread_and_restored() -> None:
    counts = threads._openblas_counts()
    if counts is None:
        pytest.skip("numpy's BLAS here is not an OpenBLAS with a settable thread count")
    get, set_ = counts
    before = get()
    with threads.single_threaded:
        with threads.single_threaded:
            assert get() == 1
        assert get() == 1
    assert get() == before
