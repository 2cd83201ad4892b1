"""etbuild.runtime.threads: the pool (every block once, the caller able to do them all, errors raised, a forked child
served), the options and what the command line reads of them, and numpy's BLAS held at one thread."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
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


def test_a_method_takes_over_its_delegates_holds_of_numpy_blas() -> None:
    """held_for: once a delegate asks to hold numpy's BLAS (after its first call binds its steps), the whole run is
    one held block and the delegates' own holds are dropped."""
    class Handle:
        hold_blas = False

        def __call__(self) -> None:
            self.hold_blas = True  # as a delegate does once it has bound a product on numpy's BLAS
            depths.append(threads.single_threaded._depth)

    handles, depths = [Handle(), Handle()], []
    run = threads.held_for(lambda: [h() for h in handles], handles)
    run()
    assert depths == [0, 0] and not any(h.hold_blas for h in handles)
    run()
    assert depths[2:] == [1, 1]  # inside the method's block


def _product_table(rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, object]:
    """A table of `rows` sgemm blocks (one output row block each) of out = a @ b, or skip where it cannot be made."""
    from etbuild.kernels.numerics import blas

    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((rows * 16, 64)).astype(np.float32), rng.standard_normal((64, 48)).astype(np.float32)
    out = np.full((rows * 16, 48), np.nan, np.float32)
    views = [(a[r:r + 16], b, out[r:r + 16]) for r in range(0, rows * 16, 16)]
    table = blas._table(views) if threads.compiled_loops() is not None else None
    if table is None:
        pytest.skip("no numba or no BLAS function address here")
    return a, b, out, table


@pytest.mark.parametrize(("workers", "rows"), [(1, 3), (2, 1), (2, 9), (3, 40)])
def test_a_table_runs_every_block_once(workers: int, rows: int) -> None:
    a, b, out, table = _product_table(rows)
    pool = threads.Pool(workers)
    for _ in range(50):  # steps one after another: a worker spinning between them takes the next one's blocks
        out[:] = np.nan
        pool.run_table(table)
        np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-4)


def _pool_without_workers(monkeypatch: pytest.MonkeyPatch, count: int) -> threads.Pool:
    """A pool of `count` threads whose workers never start: the caller finds no one to share its steps with."""
    pool = threads.Pool(count)
    loops = threads.compiled_loops()

    def no_workers() -> None:
        pool._pid, pool._ctrl = os.getpid(), loops.words(count - 1)

    monkeypatch.setattr(pool, "_start", no_workers)
    return pool


def test_the_caller_does_every_table_block_when_no_worker_comes(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b, out, table = _product_table(12)
    pool = _pool_without_workers(monkeypatch, 3)
    pool.run_table(table)
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-4)


def test_python_steps_and_table_steps_share_the_workers() -> None:
    """A worker spinning in the compiled loop comes back for a Python step (and sleeps, then wakes, between)."""
    a, b, out, table = _product_table(8)
    pool = threads.Pool(2)
    workers: set[int] = set()
    for i in range(30):
        pool.run_table(table)
        pool.run(lambda j: workers.add(threading.get_ident()), 64)
        if i % 10 == 9:
            time.sleep(0.05)  # long enough for the worker to sleep
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-4)
    assert threading.get_ident() in workers


def test_a_forked_child_runs_tables_with_workers_of_its_own() -> None:
    code = """
        import os
        import numpy as np
        from etbuild.kernels.numerics import blas
        from etbuild.runtime import threads
        a, b = np.ones((256, 64), np.float32), np.ones((64, 32), np.float32)
        out = np.zeros((256, 32), np.float32)
        table = blas._table([(a[r:r + 16], b, out[r:r + 16]) for r in range(0, 256, 16)])
        pool = threads.pool(2)
        if table is not None:
            pool.run_table(table)
        pid = os.fork()
        if pid == 0:
            out[:] = 0
            if table is not None:
                for _ in range(20):
                    pool.run_table(table)
            os._exit(0 if table is None or (out == 64).all() else 3)
        print(os.waitpid(pid, 0)[1])
    """
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "0"


def test_a_stall_makes_the_next_steps_run_on_the_caller_alone() -> None:
    """A split whose caller waited for a worker's block far longer than its own took (a worker without a core)
    runs the next ALONE_MIN steps alone, twice as many after a split that stalls again, and back to ALONE_MIN after
    one that does not; a step whose caller ran no block tells nothing."""
    backoff = threads.Backoff()
    assert not backoff.settle(0, 0.0, 10_000.0) and not backoff.alone()
    assert not backoff.settle(2, 200.0, 90.0)  # waited less than a block of its own: no stall
    assert backoff.settle(2, 200.0, 5_000.0)
    assert [backoff.alone() for _ in range(threads.ALONE_MIN + 1)] == [True] * threads.ALONE_MIN + [False]
    assert backoff.settle(1, 100.0, 5_000.0)  # the split tried after the pause stalls again: twice as long
    assert sum(backoff.alone() for _ in range(4 * threads.ALONE_MIN)) == 2 * threads.ALONE_MIN
    backoff.settle(1, 100.0, 10.0)
    backoff.settle(1, 100.0, 5_000.0)
    assert sum(backoff.alone() for _ in range(4 * threads.ALONE_MIN)) == threads.ALONE_MIN
    for _ in range(20):
        backoff.settle(1, 100.0, 5_000.0)
    assert backoff.span == threads.ALONE_MAX


def test_a_worker_that_holds_a_block_without_running_it_sends_the_pool_to_the_caller_alone() -> None:
    """The caller's block waits until the worker has claimed the other one, which then takes 0.3 s (as a worker
    whose core another process took): the split stalls, and the next steps run every block on the caller."""
    pool, caller = threads.Pool(2), threading.get_ident()
    claimed = threading.Event()

    def block(i: int) -> None:
        if threading.get_ident() == caller:
            claimed.wait(10)
        else:
            claimed.set()
            time.sleep(0.3)

    pool.run(block, 2)
    assert claimed.is_set() and pool.backoff.left == threads.ALONE_MIN
    ran: list[set[int]] = []
    for _ in range(threads.ALONE_MIN):
        ran.append(set())
        pool.run(lambda i: ran[-1].add(threading.get_ident()), 16)
    assert ran == [{caller}] * threads.ALONE_MIN and pool.backoff.left == 0


def test_a_table_step_accounts_the_callers_blocks_and_backs_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """join writes the caller's account of the step (blocks it ran, their µs, µs waited after); while the pool
    backs off, a table runs on the caller alone with the same result."""
    a, b, out, table = _product_table(12)
    pool = _pool_without_workers(monkeypatch, 2)
    pool.run_table(table)
    blocks, own_us, waited_us = threads.compiled_loops().stats(pool._ctrl)
    assert blocks == 12 and own_us >= 0 and waited_us >= 0 and pool.backoff.left == 0
    pool.backoff.left, out[:] = 2, np.nan
    pool.run_table(table)
    assert pool.backoff.left == 1
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-4)


def test_crowded_cores_send_the_next_steps_to_the_caller_alone() -> None:
    """A check that finds the workers waited for a core more than CROWDED of the time, over split steps of
    LONG_STEP_US or more, runs the next CHECK_SPLITS steps alone, twice as many after each such check (at most
    ALONE_MAX), back to CHECK_SPLITS after one that finds otherwise; shorter steps keep splitting."""
    backoff, long = threads.Backoff(), threads.LONG_STEP_US
    assert not backoff.crowd(0.02, long) and backoff.left == 0
    assert not backoff.crowd(0.35, long / 3) and backoff.left == 0  # short steps still gain
    assert backoff.crowd(0.35, long) and backoff.left == threads.CHECK_SPLITS
    assert sum(backoff.alone() for _ in range(4 * threads.CHECK_SPLITS)) == threads.CHECK_SPLITS
    assert backoff.crowd(0.35, long) and backoff.left == 2 * threads.CHECK_SPLITS
    backoff.left = 0
    assert not backoff.crowd(0.0, long) and backoff.crowded_span == threads.CHECK_SPLITS
    for _ in range(20):
        backoff.crowd(0.5, long)
    assert backoff.crowded_span == threads.ALONE_MAX


def test_the_workers_run_delay_is_read_every_check_splits_steps() -> None:
    """Each worker's run delay is read from its schedstat file: every CHECK_SPLITS + 1 split steps the share of the
    time it waited for a core (between 0 and about 1) and the steps' mean µs (the first step opens the window),
    None between."""
    if not os.path.exists("/proc/thread-self/schedstat"):
        pytest.skip("no run delay here (Linux's schedstat)")
    a, b, out, table = _product_table(8)
    pool = threads.Pool(2)
    pool.run_table(table)
    deadline = time.monotonic() + 10
    while not pool.crowding.files and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(pool.crowding.files) == 1
    pool.crowding.restart()
    checks = [pool.crowding.step(100.0 + i) for i in range(2 * threads.CHECK_SPLITS + 2)]
    found = [c for c in checks if c is not None]
    assert len(found) == 2 and checks[threads.CHECK_SPLITS] is not None and all(0.0 <= s < 1.5 for s, _ in found)
    assert found[0][1] == 100.0 + (1 + threads.CHECK_SPLITS) / 2  # the mean of steps 1 … CHECK_SPLITS


def test_the_last_step_alone_wakes_the_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """While the pool backs off a table runs on the caller alone (the same result); the last such step wakes the
    workers so that the split after it does not wait for their wake-up."""
    a, b, out, table = _product_table(12)
    loops = threads.compiled_loops()
    pool = _pool_without_workers(monkeypatch, 2)
    pool.run_table(table)
    woken: list[int] = []
    monkeypatch.setattr(loops, "wake", lambda ctrl, workers: woken.append(workers) or 0)
    pool.backoff.left, out[:] = 3, np.nan
    for left in (2, 1, 0):
        pool.run_table(table)
        assert pool.backoff.left == left and woken == ([1] if left == 0 else [])
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-4)
