"""Commands on a built `.pte`: `run`, `inspect`, `profile` and `generate`. The first three import no torch."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from etbuild.cli.command import Command
from etbuild.cli.options import max_planned_bytes
from etbuild.errors import InvalidData, printable


def run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("pte", help="a .pte, or with --verify a bundled program (.bpte)")
    p.add_argument("--inputs")
    p.add_argument("--out")
    p.add_argument("--method", default="forward")
    p.add_argument("--calls", type=int, default=1)
    p.add_argument("--verify", action="store_true",
                   help="run a .bpte's test cases and check them (exit 4 when one fails)")
    p.add_argument("--rtol", type=float, help="with --verify: per-element relative tolerance")
    p.add_argument("--atol", type=float, help="with --verify: per-element absolute tolerance")
    data_argument(p)
    max_planned_bytes(p)


def data_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", action="append", default=[], type=Path, metavar="W.ptd",
                   help="a .ptd weights file the program's keys are looked up in (repeatable)")


def run_run(args: argparse.Namespace) -> int:
    from etbuild.errors import UsageError
    from etbuild.runtime.runner import run_calls

    if args.verify:
        return run_bundle(args)
    if not (args.inputs and args.out):
        raise UsageError("etbuild run: --inputs and --out are required (or --verify, for a .bpte)")
    run_calls(Path(args.pte), Path(args.inputs), Path(args.out), args.method, args.calls, args.max_planned_bytes,
              args.data)
    return 0


def run_bundle(args: argparse.Namespace) -> int:
    """`run x.bpte --verify`: each case in our runtime; tolerances from the flags, else the build's
    (verify.json), else ExecuTorch's defaults."""
    from etbuild.devtools import bundle_verify as bv
    from etbuild.errors import VerificationError

    path = Path(args.pte)
    given = bv.parse_tolerance(args.rtol, args.atol)
    built = {} if given else bv.load_tolerances(path)
    results = bv.verify_bundle(path, built, given or bv.EXECUTORCH_DEFAULT, args.max_planned_bytes)
    source = "--rtol/--atol" if given else ("the build's verify.json" if built else "ExecuTorch's defaults")
    print(f"{path}: tolerances from {source}")
    print(bv.format_results(results))
    failed = [f"{r.method} case {r.case}" for r in results if not r.passed]
    if failed:
        raise VerificationError(f"{path}: {len(failed)} of {len(results)} cases failed: {', '.join(failed)}")
    return 0


def inspect_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("pte")
    p.add_argument("--json", action="store_true")
    p.add_argument("--memory", action="store_true", help="per memory level: planned bytes, lower bound, tensors")
    data_argument(p)


def run_inspect(args: argparse.Namespace) -> int:
    from etbuild.runtime.data_report import data_report, format_report
    from etbuild.runtime.inspect import describe, format_description

    if args.memory:
        from etbuild.memory.measure import memory_tables

        print(printable(memory_tables(args.pte), keep="\n"))
        return 0
    d = describe(args.pte)
    report = data_report(args.pte, args.data)
    if args.json:
        print(json.dumps({**d, "weights": report}, indent=2))
    else:
        print(format_description(d) + ("\n" + format_report(report) if report["external_keys"] or args.data else ""))
    return 0 if report.get("satisfied", True) else InvalidData.exit_code


def profile_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("pte")
    p.add_argument("--inputs", help="an .npz with in0, in1, … (default: random inputs from the method's metadata)")
    p.add_argument("--seed", type=int, default=0, help="seed of the generated inputs")
    p.add_argument("--method", default="forward")
    p.add_argument("--calls", type=int, default=10, help="timed calls (medians over them)")
    p.add_argument("--top", type=int, default=20, help="rows per table")
    p.add_argument("--trace", metavar="trace.json", help="write a Chrome trace (opens in Perfetto)")
    p.add_argument("--etdump", metavar="out.etdump", help="also write the timed calls as an ETDump (ExecuTorch's)")
    p.add_argument("--intermediates", action="store_true",
                   help="with --etdump: one more call records each instruction's outputs as debug events "
                        "(their bytes in <out.etdump>.debug)")
    p.add_argument("--from", dest="from_etdump", metavar="device.etdump",
                   help="show an ETDump that ExecuTorch's runtime wrote for this .pte instead of running it")
    data_argument(p)
    p.add_argument("--prompt", type=int, default=64,
                   help="runner-contract programs (LLMs): the prefill phase's token count (default 64)")
    max_planned_bytes(p)


def run_profile(args: argparse.Namespace) -> int:
    from etbuild.errors import UsageError
    from etbuild.runtime.program import Program
    from etbuild.runtime.runner import environment_options
    from etbuild.tools.profile_report import format_table, write_trace
    from etbuild.tools.runner import is_runner_program

    if args.from_etdump and args.etdump:
        raise UsageError("etbuild profile: --from shows an ETDump; --etdump writes one from a run: give one of them")
    if args.intermediates and not args.etdump:
        raise UsageError("etbuild profile: --intermediates records into the ETDump: give --etdump out.etdump too")
    program = Program.load(args.pte, args.data, **environment_options())
    if (args.method == "forward" and not args.inputs and not args.from_etdump and not args.etdump
            and is_runner_program(program.method_names)):
        return profile_phases(args)  # an LLM: prefill and decode are two different calls of forward
    profile, note = (_etdump_profile(args, program), "") if args.from_etdump else _measured_profile(args, program)
    print(format_table(profile, args.top) + note)
    if args.trace:
        write_trace(args.trace, profile, args.pte)
        print(f"\ntrace: {args.trace} ({len(profile.events):,} events; open it in https://ui.perfetto.dev)")
    return 0


def _measured_profile(args: argparse.Namespace, program: Any) -> tuple[Any, str]:
    """Our runtime's profile of the method (and its ETDump, with --etdump), and what it says of simulated
    delegates (etbuild.tools.simulated: an Ethos-U delegate's time is the TOSA reference model's)."""
    from etbuild.devtools.instrument import generated_inputs
    from etbuild.runtime.runner import call_inputs
    from etbuild.tools.profile import INSTRUCTION, profile_method
    from etbuild.tools.simulated import simulation_note

    method = program.load_method(args.method, max_planned_bytes=args.max_planned_bytes)
    inputs = call_inputs(Path(args.inputs)) if args.inputs else generated_inputs(method, args.seed)
    profile = profile_method(method, inputs, args.calls)
    if args.etdump:
        from etbuild.devtools.etdump_format import write_etdump
        from etbuild.fsutil import write_bytes
        from etbuild.tools.etdump_profile import to_etdump

        dump = to_etdump(profile, method.plan)
        if args.intermediates:
            from etbuild.devtools.etdump_debug import intermediate_run

            run, buffer = intermediate_run(program.load_method(args.method, max_planned_bytes=args.max_planned_bytes),
                                           inputs)
            dump.run_data.append(run)
            write_bytes(f"{args.etdump}.debug", buffer)
        write_bytes(args.etdump, write_etdump(dump))
    times = {e.instruction: e.median_us for e in profile.entries if e.node == INSTRUCTION}
    return profile, simulation_note(method, times, args.pte)


def _etdump_profile(args: argparse.Namespace, program: Any) -> Any:
    """The profile an ETDump records for the method (`--from`)."""
    from etbuild.devtools.etdump_format import read_etdump
    from etbuild.devtools.etrecord_format import etrecord_path
    from etbuild.tools.etdump_profile import etrecord_modules, etrecord_node_modules, from_etdump, module_paths

    path, plan = Path(args.from_etdump), program.plan(args.method)
    modules = module_paths(Path(args.pte).parent / "lowered.debug.json", args.method)
    etrecord = etrecord_path(Path(args.pte).parent)
    by_instruction = etrecord_modules(etrecord, plan)
    return from_etdump(read_etdump(path.read_bytes(), str(path)), plan, str(path), modules, by_instruction,
                       etrecord_node_modules(etrecord, plan))


def profile_phases(args: argparse.Namespace) -> int:
    """`etbuild profile` of a runner-contract program: a table for prefill and one for decode (with --trace, a
    trace file for each, the phase in its name)."""
    from etbuild.tools.profile import profile_method
    from etbuild.tools.profile_report import format_table, write_trace
    from etbuild.tools.runner import load_runner, phase_inputs

    contract = load_runner(args.pte, data=args.data).contract
    for k, (phase, inputs) in enumerate(phase_inputs(contract, args.prompt).items()):
        forward = load_runner(args.pte, args.max_planned_bytes, args.data).forward  # a fresh method: profiled
        profile = profile_method(forward, inputs, args.calls)
        print(("\n" if k else "") + f"== {phase}\n" + format_table(profile, args.top))
        if args.trace:
            trace = Path(args.trace).with_suffix(f".{phase.split()[0]}.json")
            write_trace(str(trace), profile, args.pte)
            print(f"\ntrace: {trace} ({len(profile.events):,} events)")
    return 0


def generate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("pte")
    p.add_argument("--prompt", required=True, help="prompt token ids, e.g. 1,2,3 (text with --tokenizer)")
    p.add_argument("--tokens", type=int, default=32, help="how many tokens to generate at most (default 32)")
    p.add_argument("--runtime", choices=("etbuild", "executorch"), default="etbuild",
                   help="whose runtime runs the .pte (executorch: the interop extra's oracle)")
    p.add_argument("--tokenizer", type=Path, help="a Hugging Face tokenizer.json: the prompt is text, text comes out")
    p.add_argument("--temperature", type=float, default=0.0, help="0 (default): greedy; else sample")
    p.add_argument("--top-p", type=float, default=1.0, help="sample from the most likely tokens of this mass")
    p.add_argument("--seed", type=int, default=0, help="seed of the sampling")
    data_argument(p)


def run_generate(args: argparse.Namespace) -> int:
    """Runner-contract programs (forward + constant methods) through etbuild.tools.textgen; two-method LMs greedily."""
    import sys

    from etbuild.runtime.program import Program
    from etbuild.tools.runner import is_runner_program
    from etbuild.tools.simulated import program_note
    from etbuild.tools.textgen import Request, run

    prompt = token_list(args.prompt) if args.tokenizer is None else None
    program = Program.load(args.pte, args.data)
    note = program_note(program) if args.runtime == "etbuild" else ""
    if note:
        print(note, file=sys.stderr)
    if is_runner_program(program.method_names):
        request = Request(Path(args.pte), args.prompt, args.tokens, args.temperature, args.top_p, args.seed,
                          args.tokenizer, tuple(args.data))
        stats = run(request, args.runtime, prompt)
        print(stats.summary(), file=sys.stderr)
        return 0
    print(" ".join(map(str, two_method_tokens(args, prompt or []))))
    return 0


def two_method_tokens(args: argparse.Namespace, prompt: list[int]) -> list[int]:
    """Greedy tokens of a two-method (prefill/decode) language model, in the runtime args.runtime names."""
    from etbuild.tools.generate import generate, greedy

    if args.runtime == "executorch":
        from etbuild.extras import require

        require("executorch.runtime", "interop")
        from etbuild.runtime.program import Program
        from etbuild.tools.generate import logits_width
        from etbuild.verify.oracle import executorch_methods

        vocab = logits_width(Program.load(args.pte).plan("decode"))
        return greedy(*executorch_methods(Path(args.pte), "prefill", "decode"), prompt, args.tokens, vocab)
    return generate(args.pte, prompt, args.tokens, args.data)


def token_list(text: str) -> list[int]:
    """Token ids from `1,2,3` or `1 2 3`; UsageError otherwise."""
    from etbuild.errors import UsageError

    try:
        return [int(t) for t in text.replace(",", " ").split()]
    except ValueError:
        raise UsageError(f"--prompt {text!r}: expected token ids, e.g. 1,2,3") from None


COMMANDS = (
    Command("run", "run a .pte on inputs in0, in1, … from an .npz file", run_arguments, run_run),
    Command("profile", "time each instruction and delegate node of a .pte", profile_arguments, run_profile),
    Command("generate", "generate tokens or text with a language-model program", generate_arguments, run_generate),
    Command("inspect", "summarize a .pte: methods, operators, sizes", inspect_arguments, run_inspect),
)
