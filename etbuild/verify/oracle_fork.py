"""ExecuTorch's runtime on a program's samples in a fork of this process, where torch is imported.

`oracle.run_samples_in_executorch` starts a fresh Python, which spends about 2 s of CPU importing
torch before it loads the program (the pybindings link libtorch); a fork of the build process needs
about 0.3 s. The child loads ExecuTorch's runtime library into itself only (never into the build
process, whose torch it would slow), runs `oracle_samples.run_samples`, writes its stdout and stderr
to a file and leaves with `os._exit`; the parent waits for it at most `TIMEOUT_S`.

A fork is safe only from a process with one thread (a lock another thread held would stay held in
the child; `IDLE_THREADS` names the one exception), on Linux (macOS forbids forking after some
system libraries start threads). `usable` says when it applies: there, from the main thread, with
the oracle installed, and for a program without `llama::` operators (ExecuTorch's kernels for them
would meet the registrations etbuild's own make in torch, which only a fresh process lacks).
Otherwise the subprocess runs the samples.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from etbuild.errors import VerificationError

TIMEOUT_S = 300
POLL_S = 0.01
IDLE_THREADS = ("tqdm_monitor",)
"""Threads a fork may leave behind: tqdm's monitor, which torch.fx's Interpreter starts in every
lowering (its disabled progress bar); it waits on an event and takes only tqdm's own locks, which
the child never takes."""


def usable(pte: Path) -> bool:
    """Whether `run` may run this program's samples here (see the module docstring)."""
    from etbuild.verify.oracle import executorch_installed
    from etbuild.verify.oracle_samples import calls_namespace

    return (sys.platform == "linux" and _alone() and executorch_installed()
            and not calls_namespace(pte.read_bytes(), "llama::"))


def _alone() -> bool:
    """Whether this is the main thread and every other thread is one of IDLE_THREADS."""
    me = threading.current_thread()
    return me is threading.main_thread() and all(t is me or t.name in IDLE_THREADS for t in threading.enumerate())


def run(pte: Path, inputs_npz: Path, out_npz: Path, method: str = "forward") -> None:
    """Run each sample of inputs_npz (`s<j>_in<k>`) through ExecuTorch's runtime into out_npz
    (`s<j>_out<k>`), one loaded method for all samples, in a fork of this process."""
    with tempfile.TemporaryFile(prefix="etbuild-oracle-") as log:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            _child(log.fileno(), pte, inputs_npz, out_npz, method)
        status = _wait(pid, pte)
        if status != 0:
            log.seek(0)
            tail = "\n".join(log.read().decode(errors="replace").strip().splitlines()[-6:])
            raise VerificationError(f"{pte} failed in ExecuTorch's runtime (exit {status}):\n{tail}")


def _child(log: int, pte: Path, inputs_npz: Path, out_npz: Path, method: str) -> None:
    """Run the samples with stdout and stderr going to `log`; leave without running the parent's exit handlers."""
    code = 1
    try:
        os.dup2(log, 1)
        os.dup2(log, 2)
        from etbuild.verify.oracle_samples import run_samples

        run_samples(str(pte), str(inputs_npz), str(out_npz), method)
        code = 0
    except BaseException as exc:  # the child reports every failure through its log and exit code
        os.write(2, f"{type(exc).__name__}: {exc}\n".encode(errors="replace"))
    finally:
        os._exit(code)


def _wait(pid: int, pte: Path) -> int:
    """The child's exit code (a signal's number, negated); killed and VerificationError after TIMEOUT_S."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            raise VerificationError(f"{pte} did not finish in ExecuTorch's runtime within {TIMEOUT_S} s")
        time.sleep(POLL_S)
