"""README.md's examples, run as written: every command in the ```bash blocks of "Quick start" and
"Using it", in a copy of recipes/, releases/, dodo.py and pyproject.toml committed to a fresh git repository.

The commands come from the README itself, so a new example is run without touching this file.
An optional `[--flag value]` is run once without the flags and once with each; `N` and `M`
placeholders get a value. Commands that need infrastructure or take minutes are listed, with
the reason, in NOT_RUN and SLOW below.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
SECTIONS = ("Quick start", "Using it")
PLACEHOLDERS = {"N": "3", "M": "forward"}

NOT_RUN = {  # a command starting with these words is not run here, because:
    "pip install": "installs into the environment; this test runs in the one already installed",
    "python -m pytest": "runs this suite",
    "etbuild build --cache s3://": "needs an S3 bucket (tests/etbuild/cache and test_remote.py run it on moto)",
}
OPTIONS_NOT_RUN = {  # an optional [--flag …] not run here, because:
    "--key": "needs a signing key pair (tests/etbuild/release signs and verifies with one)",
    "--runtime executorch": "needs the executorch oracle (tests/interop/test_lm.py runs it when installed)",
}
SLOW = {  # run only with -m slow, because:
    "etbuild build": "every recipe under recipes/: about 90 s with -n 2",
    "etbuild build -n 2": "every recipe under recipes/",
    "etbuild release releases/example.yaml --check-reproducible": "two clean builds of the release, about 60 s",
    "python -m tests.kernels.conformance": "the whole conformance table, about 30 s (tests/kernels runs its cases)",
}
KNOWN = {  # the parse must find at least these
    "etbuild build", "etbuild build recipes/mlp.yaml", "etbuild build -n 2",
    "etbuild release releases/example.yaml", "etbuild release verify dist/example-0.1.0",
    "etbuild release diff dist/example-0.1.0 dist/example-0.2.0",
    "etbuild build recipes/cnn.yaml --dump-after fold-constants", "doit list --all",
    "etbuild run build/mlp/mlp.pte --inputs x.npz --out y.npz", "etbuild inspect build/mlp/mlp.pte --json",
    "etbuild inspect build/mlp/mlp.pte --memory", "etbuild profile build/cnn/cnn.pte --trace trace.json",
    "etbuild generate build/lm/lm.pte --prompt 17,3,250 --tokens 32",
    "etbuild select --union recipes/mlp.yaml recipes/kws.yaml --name audio",
}
PREBUILT = ("mlp", "cnn", "kws", "two-method", "lm")  # the recipes the examples read the outputs of
NEXT_RELEASE = "example-next.yaml"  # example.yaml at version 0.2.0, for `release diff`


def readme_commands(text: str) -> list[str]:
    """The shell commands of the ```bash blocks in SECTIONS, comments dropped, `&&` chains split."""
    commands: list[str] = []
    for section in re.split(r"^## ", text, flags=re.M)[1:]:
        if section.split("\n", 1)[0].strip() not in SECTIONS:
            continue
        for block in re.findall(r"^```bash\n(.*?)^```", section, flags=re.M | re.S):
            for line in block.splitlines():
                line = re.split(r"\s#\s", line, maxsplit=1)[0].strip()
                commands += [part.strip() for part in line.split("&&") if part.strip()]
    return list(dict.fromkeys(commands))


def variants(command: str) -> list[str]:
    """The command without its optional `[…]` parts, then with each one (placeholders filled)."""
    optional = re.findall(r"\s*\[([^\]]*)\]", command)
    bare = re.sub(r"\s*\[[^\]]*\]", "", command)
    runs = [bare] + [f"{bare} {part}" for part in optional if not part.startswith(tuple(OPTIONS_NOT_RUN))]
    return [" ".join(PLACEHOLDERS.get(word, word) for word in run.split()) for run in runs]


def cases() -> list[Any]:
    """One case per command variant; NOT_RUN ones left out, SLOW ones marked."""
    params = []
    for command in readme_commands((REPO / "README.md").read_text(encoding="utf-8")):
        if command.startswith(tuple(NOT_RUN)):
            continue
        for run in variants(command):
            marks = [pytest.mark.slow] if run in SLOW else []
            params.append(pytest.param(run, marks=marks, id=run))
    return params


@dataclass
class Project:
    """The copy the examples run in; each command runs once, later asks get its result."""

    root: Path
    results: dict[str, subprocess.CompletedProcess[str]]

    def run(self, command: str) -> subprocess.CompletedProcess[str]:
        if command not in self.results:
            self.results[command] = subprocess.run(
                argv(command), cwd=REPO if command.startswith("python -m tests.") else self.root,
                capture_output=True, text=True, timeout=900)
        return self.results[command]

    def ok(self, command: str) -> str:
        """Run the command; its stdout, after asserting it exited 0."""
        proc = self.run(command)
        assert proc.returncode == 0, f"{command}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        return proc.stdout


def argv(command: str) -> list[str]:
    """The command's words, with `etbuild`, `python` and `doit` those of this interpreter's environment."""
    words = shlex.split(command)
    programs = {"etbuild": [str(Path(sys.executable).parent / "etbuild")], "python": [sys.executable],
                "doit": [sys.executable, "-m", "doit"]}
    return programs.get(words[0], words[:1]) + words[1:]


def git_commit(root: Path) -> None:
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", "-C", str(root)]
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "recipes"], check=True)


def write_inputs(project: Project, pte: str, path: str) -> None:
    """An .npz of random inputs in0, in1, … at the shapes `etbuild inspect --json` reports."""
    info = json.loads(project.ok(f"etbuild inspect {pte} --json"))
    rng = np.random.default_rng(0)
    shapes = [i["shape"] for i in info["methods"][0]["inputs"]]
    np.savez(project.root / path, **{f"in{k}": rng.standard_normal(s).astype(np.float32) for k, s in enumerate(shapes)})


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    root = tmp_path_factory.mktemp("readme")
    for folder in ("recipes", "releases"):
        shutil.copytree(REPO / folder, root / folder)
    for name in ("dodo.py", "pyproject.toml"):  # doit reads its etbuild backend plugin from pyproject.toml
        shutil.copy(REPO / name, root / name)
    example = (root / "releases" / "example.yaml").read_text()
    (root / "releases" / NEXT_RELEASE).write_text(example.replace("version: 0.1.0", "version: 0.2.0"))
    git_commit(root)
    project = Project(root, {})
    project.ok("etbuild build -n 2 " + " ".join(f"recipes/{name}.yaml" for name in PREBUILT))
    write_inputs(project, "build/mlp/mlp.pte", "x.npz")
    write_inputs(project, "build/cnn/cnn.pte", "in.npz")
    return project


# ------------------------------------------------------------------ what each command must have done


def check_build(project: Project, command: str, out: str) -> None:
    every = [p.stem for p in (project.root / "recipes").glob("*.yaml")]
    named = re.findall(r"recipes/([\w-]+)\.yaml", command) or every
    assert re.search(r"^ok: \d+ recipe\(s\)", out, flags=re.M), out
    for name in named:
        assert (project.root / "build" / name / f"{name}.pte").is_file()
        assert json.loads((project.root / "build" / name / "verify.json").read_text())
    if "--dump-after" in command:
        assert [p.name for p in (project.root / "build/cnn/dump").iterdir()] == ["05-fold-constants.py"]


def check_release(project: Project, command: str, out: str) -> None:
    dist = project.root / "dist/example-0.1.0"
    assert "ok: release example-0.1.0 in dist/example-0.1.0: 3 product(s), 2 runtime(s)" in out
    provenance = json.loads((dist / "provenance.json").read_text())
    assert provenance and (dist / "SHA256SUMS").read_text().count("\n") >= 10
    assert (dist / "release.json").is_file() and (dist / "measurements.json").is_file()


def check_reproducible(project: Project, command: str, out: str) -> None:
    assert re.fullmatch(r"reproducible: two builds in clean directories gave identical bytes for all (\d+) files; "
                        r"kept dist/example-0\.1\.0\n", out), out
    assert (project.root / "dist/example-0.1.0/SHA256SUMS").is_file()


def check_release_verify(project: Project, command: str, out: str) -> None:
    assert out.startswith("ok: dist/example-0.1.0:") and "match SHA256SUMS and provenance.json" in out


def check_release_diff(project: Project, command: str, out: str) -> None:
    assert out.startswith("example 0.1.0 → example 0.2.0\n")
    assert all(f"\n{product}:\n" in out for product in ("kws", "mlp", "two-method"))
    assert "pte bytes" in out and "(+0.0%)" in out  # the same recipes: nothing changes


def check_run(project: Project, command: str, out: str) -> None:
    outputs = dict(np.load(project.root / "y.npz"))
    calls = re.search(r"--calls (\d+)", command)
    names = [f"call{i}_out0" for i in range(int(calls[1]))] if calls else ["out0"]
    assert sorted(outputs) == names
    assert all(v.shape == (1, 10) and np.isfinite(v).all() for v in outputs.values())


def check_inspect(project: Project, command: str, out: str) -> None:
    if "--json" in command:
        info = json.loads(out)
        assert [m["name"] for m in info["methods"]] == ["forward"] and info["file_bytes"] > 0
    elif "--memory" in command:
        assert re.search(r"^total\s", out, flags=re.M), out
    else:
        assert "method forward:" in out and "aten::addmm.out" in out and "trimmed runtime:" in out


def check_profile(project: Project, command: str, out: str) -> None:
    assert "method 'forward':" in out and "aten::convolution.out" in out
    if "--trace" in command:
        events = json.loads((project.root / "trace.json").read_text())["traceEvents"]
        assert any("convolution" in e.get("name", "") for e in events)


def check_generate(project: Project, command: str, out: str) -> None:
    tokens = [int(t) for t in out.split()]
    assert len(tokens) == 32 and all(0 <= t < 256 for t in tokens)


def check_select(project: Project, command: str, out: str) -> None:
    assert out.rstrip().endswith("verified: mlp, kws")
    assert (project.root / "build/union/audio/runtime").is_dir()


def check_doit_list(project: Project, command: str, out: str) -> None:
    tasks = set(out.split())
    assert {f"{stage}:mlp" for stage in ("export", "lower", "plan", "emit", "select", "verify")} <= tasks
    assert "quantize:mlp-int8" in tasks


def check_conformance(project: Project, command: str, out: str) -> None:
    assert re.search(r"\d+ operators, \d+ \(operator, dtype\) cases, 0 failed", out), out[-500:]


CHECKS: dict[str, Callable[[Project, str, str], None]] = {  # by first words; the longest match applies
    "etbuild build": check_build,
    "etbuild release releases/": check_release,
    "etbuild release releases/example.yaml --check-reproducible": check_reproducible,
    "etbuild release verify": check_release_verify,
    "etbuild release diff": check_release_diff,
    "etbuild run": check_run,
    "etbuild inspect": check_inspect,
    "etbuild profile": check_profile,
    "etbuild generate": check_generate,
    "etbuild select": check_select,
    "doit list": check_doit_list,
    "python -m tests.kernels.conformance": check_conformance,
}
NEEDS = {  # commands whose inputs another example makes
    "etbuild release verify": ["etbuild release releases/example.yaml"],
    "etbuild release diff": ["etbuild release releases/example.yaml", f"etbuild release releases/{NEXT_RELEASE}"],
}


def test_the_parse_finds_the_documented_commands() -> None:
    found = {run for command in readme_commands((REPO / "README.md").read_text()) for run in variants(command)}
    assert found >= KNOWN, sorted(KNOWN - found)
    assert found >= set(SLOW), sorted(set(SLOW) - found)
    assert variants("etbuild inspect a.pte [--json] [--memory] [--key k]") == [
        "etbuild inspect a.pte", "etbuild inspect a.pte --json", "etbuild inspect a.pte --memory"]


@pytest.mark.parametrize("command", cases())
def test_readme_example(project: Project, command: str) -> None:
    for prefix, needed in NEEDS.items():
        if command.startswith(prefix):
            for other in needed:
                project.ok(other)
    out = project.ok(command)
    prefixes = [p for p in CHECKS if command.startswith(p)]
    if prefixes:
        CHECKS[max(prefixes, key=len)](project, command, out)
