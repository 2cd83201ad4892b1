"""`etbuild release FILE`: build every product, gate it, and write `dist/NAME-VERSION/`.

In order: build every product through the cached stages (their own verify gates included);
build each runtime group's trimmed runtime (the union of its products' needs) as a wheel;
verify each product on every runtime it ships with, running the wheel itself; time it there;
check the budgets. Any failure fails the release naming the product, the gate and the figure,
and leaves no release directory. The directory:

    release.json                          products, runtimes, sizes, operators, accuracy
    products/<p>/<p>.pte                  as built, less the data only a simulation reads (release.simulation),
                                          with verify.json, select.json, memory.json from its build,
    products/<p>/verify-<runtime>.json    and its verification on each runtime it ships with
    products/<p>/<p>.bpte                 its bundled program, when the recipe asks for one (gated too)
    products/<p>/tokenizer.json           a language model's tokenizer, which its runner reads beside the `.pte`
    weights/<file>.ptd                    weights kept apart (`emit.weights`), once however many products use them
    runtimes/<r>/<wheel>.whl              installable with pip (needs numpy and flatbuffers)
    runtimes/<r>/selected_operators.yaml  ExecuTorch's selective-build format
    SHA256SUMS                            every file above
    measurements.json                     latencies and build times: measured, so not byte-reproducible
    provenance.json                       in-toto/SLSA statement (a DSSE envelope when signed)

Every file SHA256SUMS lists is a function of the inputs: same inputs, same bytes.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import shutil
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from etbuild.build.driver import BuildResult, build
from etbuild.build.layout import Artifacts
from etbuild.build.progress import Sink, TextSink, event
from etbuild.build.stage_table import SECTION_FILES, STAGES, stage_calls
from etbuild.build.stagerun import Executor, StageRunner
from etbuild.build.union import union_selection
from etbuild.cache import Cache, code_digest, versions
from etbuild.errors import EtbuildError, VerificationError, error_class
from etbuild.fsutil import atomic_dir, sha256_file, write_bytes, write_json
from etbuild.release import provenance as prov
from etbuild.release.budgets import check_budgets, figures
from etbuild.release.bundles import copy_bundle, gate_bundles
from etbuild.release.config import Product, Release, RuntimeGroup, load_release
from etbuild.release.latency import measure_latency
from etbuild.release.simulation import development_file, drops_simulation, ship_program
from etbuild.release.weights import data_files, product_files, weights_path, write_weights
from etbuild.release.wheel import installed_bytes, runtime_wheel, wheel_filename
from etbuild.select import generate_runtime, selected_operators_yaml
from etbuild.verify.stage import verify

PRODUCT_REPORTS = ("verify.json", "select.json", "memory.json")
UNSUMMED = ("SHA256SUMS", "measurements.json", "provenance.json")


@dataclass(frozen=True)
class BuiltRuntime:
    """One runtime group, generated: the wheel's name and bytes, its files, its operator list."""

    group: RuntimeGroup
    wheel_name: str
    wheel: bytes
    runtime_bytes: int
    operators: tuple[str, ...]
    selected_operators: str


@dataclass
class ReleaseResult:
    """What a release run made."""

    release: Release
    dist: Path
    build: BuildResult
    sums: dict[str, str]


def checkout_root(path: Path) -> Path:
    """The git checkout holding the release file, else its folder: provenance paths are relative to it."""
    import subprocess

    where = path.resolve().parent
    proc = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=where, capture_output=True, text=True,
                          check=False)
    return Path(proc.stdout.strip()) if proc.returncode == 0 else where


def source_date_epoch(root: Path) -> int:
    """SOURCE_DATE_EPOCH when set, else the commit time of the checkout, else 1980-01-01."""
    if os.environ.get("SOURCE_DATE_EPOCH", "").isdigit():
        return int(os.environ["SOURCE_DATE_EPOCH"])
    return prov.commit_time(root) or 315532800


def make_release(
    path: str | Path, *, dist_root: Path = Path("dist"), build_root: Path = Path("build"), jobs: int = 1,
    cache: Cache | None = None, executor: Executor | None = None, sink: Sink | None = None,
    stream: TextIO | None = None,
) -> ReleaseResult:
    """Build, gate and write the release `path` describes (see the module docstring)."""
    started = _now()
    release = load_release(path)
    sink = sink or TextSink(stream or sys.stdout, parallel=jobs > 1)
    built = build([p.recipe.path for p in release.products], build_root, jobs=jobs, cache=cache,
                  executor=executor, sink=sink)
    if built.exit_code:
        raise _gate_error(release, built)
    root = checkout_root(release.path)
    epoch = source_date_epoch(root)
    runtimes = {g.name: _runtime(release, g, build_root, epoch) for g in release.runtimes}
    dist = dist_root / release.dist_name
    with atomic_dir(dist) as tmp:
        shared = write_weights(release, build_root, tmp)
        summary = _write_products(release, build_root, tmp, runtimes)
        _write_runtimes(tmp, runtimes)
        accuracy = _verify_on_runtimes(release, tmp, runtimes, sink, build_root)
        for name, cases in gate_bundles(release, tmp).items():
            sink.emit(event("step", message=f"bundled program of {name}: {cases} cases passed"))
        latency = _time_on_runtimes(release, tmp, runtimes, sink, build_root)
        check_budgets(release, tmp, {name: rt.runtime_bytes for name, rt in runtimes.items()}, latency)
        _write_summary(release, tmp, summary, runtimes, accuracy, shared)
        write_json(tmp / "measurements.json", {"latency": latency, "stage_seconds": built.seconds})
        sums = write_sums(tmp)
        _write_provenance(release, tmp, sums, build_root, root, epoch, started)
    sink.emit(event("step", message=f"release {release.dist_name}: {len(sums)} files in {dist}"))
    sink.close()
    return ReleaseResult(release, dist, built, sums)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _gate_error(release: Release, built: BuildResult) -> EtbuildError:
    """The first failed stage as the release's error, with that stage's exit code."""
    order = [f"{stage}:{p.name}" for p in release.products for stage in STAGES]
    task = next(t for t in order + list(built.failed) if t in built.failed)
    stage, _, product = task.partition(":")
    cls = error_class(built.failed_codes.get(task, 1))
    return cls(f"release {release.dist_name}: product {product} failed gate {stage}: {built.failed[task]}")


def _runtime(release: Release, group: RuntimeGroup, build_root: Path, epoch: int) -> BuiltRuntime:
    """Generate the group's trimmed runtime and its wheel."""
    recipes = [release.product(p).recipe for p in group.products]
    union = union_selection(recipes, build_root)
    if any(drops_simulation(release.product(p), Artifacts.of(release.product(p).recipe, build_root).pte)
           for p in group.products):  # verified and timed with the dropped data in a .ptd
        union = dataclasses.replace(union, features=tuple(sorted({*union.features, "EXTERNAL_DATA"})))
    source = f"release {release.dist_name}, runtime {group.name}"
    out = build_root / "release" / release.name / group.name
    artifact = generate_runtime(union, out, source=source, name=group.name)
    files = {f.path: (artifact.root / f.path).read_bytes() for f in artifact.files}
    dist = f"etbuild-runtime-{release.name}-{group.name}"
    summary = f"etbuild trimmed runtime '{group.name}' of release {release.dist_name} ({', '.join(group.products)})"
    return BuiltRuntime(group, wheel_filename(dist, release.version),
                        runtime_wheel(files, dist, release.version, summary, epoch), installed_bytes(files),
                        union.names, selected_operators_yaml(union, source))


def _write_products(
    release: Release, build_root: Path, out: Path, runtimes: dict[str, BuiltRuntime]
) -> dict[str, dict[str, Any]]:
    """Copy each product's `.pte` and reports; their summary for release.json."""
    summary = {}
    for p in release.products:
        a = Artifacts.of(p.recipe, build_root)
        folder = out / "products" / p.name
        folder.mkdir(parents=True)
        for src in (a.root / r for r in PRODUCT_REPORTS):
            shutil.copyfile(src, folder / src.name)
        simulation = ship_program(p, a.pte, folder / a.pte.name, development_file(build_root, release.name, p.name))
        summary[p.name] = {
            "recipe": p.written, "pte": f"products/{p.name}/{a.pte.name}", "pte_bytes": a.pte.stat().st_size,
            "runtimes": [g.name for g in release.runtimes_of(p.name)],
            "budget": {k: v for k, v in vars(p.budget).items() if v is not None}, **copy_bundle(a, folder),
            **_copy_tokenizer(a, folder), **({"weights": weights_path(p)} if weights_path(p) else {}), **simulation,
            "download": {f.relative_to(out).as_posix(): f.stat().st_size for f in product_files(out, p)},
        }
    return summary


def _copy_tokenizer(a: Artifacts, folder: Path) -> dict[str, str]:
    """A language model's tokenizer.json travels with its `.pte` (the runner reads both); its summary entry."""
    if not a.tokenizer.is_file():
        return {}
    shutil.copyfile(a.tokenizer, folder / a.tokenizer.name)
    return {"tokenizer": f"products/{folder.name}/{a.tokenizer.name}"}


def _write_runtimes(out: Path, runtimes: dict[str, BuiltRuntime]) -> None:
    for name, rt in runtimes.items():
        write_bytes(out / "runtimes" / name / rt.wheel_name, rt.wheel)
        write_bytes(out / "runtimes" / name / "selected_operators.yaml", rt.selected_operators.encode())


def wheel_path(out: Path, rt: BuiltRuntime) -> Path:
    return out / "runtimes" / rt.group.name / rt.wheel_name


def _run_data(release: Release, out: Path, p: Product, build_root: Path) -> list[Path]:
    """The data files a product runs with on a development machine: its shipped weights file, and the
    simulation data the release dropped from its `.pte` (etbuild.release.simulation; never shipped)."""
    dropped = development_file(build_root, release.name, p.name)
    return [*data_files(out, p), *([dropped] if dropped.is_file() else [])]


def _verify_on_runtimes(
    release: Release, out: Path, runtimes: dict[str, BuiltRuntime], sink: Sink, build_root: Path
) -> dict[str, dict[str, Any]]:
    """Verify each product on each wheel it ships with; per product and runtime, the worst errors."""
    accuracy: dict[str, dict[str, Any]] = {}
    for p in release.products:
        pte = out / "products" / p.name / f"{p.name}.pte"
        converted = Artifacts.of(p.recipe, build_root).quantized if p.recipe.quantize else None
        for g in release.runtimes_of(p.name):  # a quantized product is compared with its converted model
            report = verify(p.recipe, pte, wheel_path(out, runtimes[g.name]), converted,
                            data=_run_data(release, out, p, build_root))
            write_json(out / "products" / p.name / f"verify-{g.name}.json", report)
            outputs = [o for method in report["methods"].values() for o in method]
            worst = {"max_abs_error": max(o.get("max_abs_error", float("inf")) for o in outputs),
                     "passed": report["passed"]}
            accuracy.setdefault(p.name, {})[g.name] = worst
            if not report["passed"]:
                raise VerificationError(
                    f"release {release.dist_name}: product {p.name} failed gate verify on runtime {g.name}: "
                    f"max abs error {worst['max_abs_error']:.3g} beyond rtol={p.recipe.verify.rtol} × max|eager| "
                    f"+ atol={p.recipe.verify.atol}" + (" and one quantization step" if converted else ""))
            sink.emit(event("step", message=f"verified {p.name} on runtime {g.name}: "
                                            f"max abs error {worst['max_abs_error']:.3g}"))
    return accuracy


def _time_on_runtimes(
    release: Release, out: Path, runtimes: dict[str, BuiltRuntime], sink: Sink, build_root: Path
) -> dict[str, dict[str, Any]]:
    latency: dict[str, dict[str, Any]] = {}
    for p in release.products:
        pte = out / "products" / p.name / f"{p.name}.pte"
        for g in release.runtimes_of(p.name):
            latency.setdefault(p.name, {})[g.name] = measured = measure_latency(
                p.recipe, pte, wheel_path(out, runtimes[g.name]), data=_run_data(release, out, p, build_root))
            sink.emit(event("step", message=f"timed {p.name} on runtime {g.name}: {measured['median_ms']:.3f} ms"))
    return latency


def _write_summary(
    release: Release, out: Path, products: dict[str, dict[str, Any]], runtimes: dict[str, BuiltRuntime],
    accuracy: dict[str, dict[str, Any]], weights: dict[str, dict[str, Any]],
) -> None:
    for name, entry in products.items():
        select = (out / "products" / name / "select.json").read_text()
        entry["operators"] = sorted(json.loads(select)["operators"])
        entry["accuracy"] = accuracy[name]
        entry["memory"] = figures(out, release.product(name))
    write_json(out / "release.json", {
        "name": release.name, "version": release.version, "products": products, "weights": weights,
        "runtimes": {
            name: {"products": list(rt.group.products), "wheel": f"runtimes/{name}/{rt.wheel_name}",
                   "runtime_bytes": rt.runtime_bytes, "wheel_bytes": len(rt.wheel), "operators": list(rt.operators)}
            for name, rt in runtimes.items()
        },
    })


def write_sums(out: Path) -> dict[str, str]:
    """Write SHA256SUMS (`<sha256>  <path>` per file, sorted by path); the path -> digest map."""
    sums = {
        p.relative_to(out).as_posix(): sha256_file(p)
        for p in sorted(out.rglob("*")) if p.is_file() and p.relative_to(out).as_posix() not in UNSUMMED
    }
    write_bytes(out / "SHA256SUMS", "".join(f"{d}  {name}\n" for name, d in sums.items()).encode())
    return sums


def _stage_keys(release: Release, build_root: Path) -> dict[str, str]:
    runner = StageRunner(versions())
    return {c.name: runner.key(c) for p in release.products
            for c in stage_calls(p.recipe, Artifacts.of(p.recipe, build_root)).values()}


def _source_files(release: Release) -> list[Path]:
    """Every source file the products read: the release file, recipes with their bases, model
    sources, weights, allowlists, calibration data."""
    files = [release.path]
    for p in release.products:
        files.extend(p.recipe.sources)
        for named in SECTION_FILES.values():
            files.extend(named(p.recipe))
    return files


def _write_provenance(
    release: Release, out: Path, sums: dict[str, str], build_root: Path, root: Path, epoch: int, started: str
) -> None:
    deps = [d for d in [prov.git_commit(root)] if d]
    deps += prov.file_dependencies(_source_files(release), root)
    deps += [{"name": "etbuild-source", "digest": {"sha256": code_digest()}}, *prov.tool_dependencies()]
    measurements = out / "measurements.json"
    predicate = {
        "buildDefinition": {
            "buildType": prov.BUILD_TYPE,
            "externalParameters": {
                "release": os.path.relpath(release.path.resolve(), root), "name": release.name,
                "version": release.version, "products": [p.written for p in release.products],
                "runtimes": {g.name: list(g.products) for g in release.runtimes},
            },
            "internalParameters": {
                "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "random"), "SOURCE_DATE_EPOCH": epoch,
                "stage_keys": _stage_keys(release, build_root),
            },
            "resolvedDependencies": deps,
        },
        "runDetails": {
            "builder": {"id": prov.BUILDER_ID, "version": {"etbuild": versions()["etbuild"]}},
            "metadata": {"invocationId": str(uuid.uuid4()), "startedOn": started, "finishedOn": _now()},
            "byproducts": [{"name": "measurements.json", "digest": {"sha256": sha256_file(measurements)}}],
        },
    }
    stmt = prov.statement(sums, predicate)
    if release.sign_key:
        stmt = prov.sign(stmt, prov.load_private_key(release.sign_key, release.path.parent))
    write_json(out / "provenance.json", stmt)

