"""`etbuild generate` on a runner-contract program: token ids or text (a Hugging Face `tokenizer.json`) in, tokens
or streamed text out, then the prefill and decode rates, in etbuild's runtime or in ExecuTorch's.

ExecuTorch's side is its own C++ `TextLLMRunner` (through its Python binding) when a tokenizer is given, as its
users run it; with token ids, it is etbuild's `Runner` loop around ExecuTorch's runtime's `forward`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from etbuild.errors import UsageError
from etbuild.tools.runner import Runner, Stats, load_runner, read_contract


@dataclass(frozen=True)
class Request:
    """One generation: what to generate from and how."""

    pte: Path
    prompt: str
    count: int
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    tokenizer: Path | None = None
    data: tuple[Path, ...] = ()  # `.ptd` weights files (etbuild's runtime only)


def load_tokenizer(path: Path) -> Any:
    """A `tokenizers.Tokenizer` from a `tokenizer.json`; UsageError naming the file when it cannot be read."""
    from etbuild.extras import require

    tokenizers = require("tokenizers", "llm")
    try:
        return tokenizers.Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception for a missing or malformed file
        raise UsageError(f"--tokenizer {path}: not a readable tokenizer.json ({exc})") from None


class TextStream:
    """Writes the text of a growing token list as it grows (whole characters only)."""

    def __init__(self, tokenizer: Any, out: TextIO) -> None:
        self.tokenizer, self.out, self.ids, self.shown = tokenizer, out, [], ""

    def __call__(self, token: int) -> None:
        self.ids.append(token)
        text = self.tokenizer.decode(self.ids)
        if text.endswith("\ufffd"):  # a character whose bytes are not all here yet
            return
        self.out.write(text[len(self.shown):])
        self.out.flush()
        self.shown = text


def generate_tokens(request: Request, prompt: Sequence[int], runtime: str, emit: Callable[[int], None]) -> Stats:
    """Generate after `prompt` (token ids) in `runtime` (`etbuild` or `executorch`), calling emit per token."""
    if request.data and runtime != "etbuild":
        raise UsageError("--data with --runtime executorch: ExecuTorch's runner is not given data files here")
    runner = load_runner(request.pte, data=request.data) if runtime == "etbuild" else executorch_runner(request.pte)
    for token in runner.generate(prompt, request.count, request.temperature, request.top_p, request.seed):
        emit(token)
    return runner.stats


def executorch_runner(pte: Path) -> Runner:
    """A Runner around `forward` of `pte` in ExecuTorch's runtime (the interop extra), its constants read there."""
    from etbuild.extras import require

    require("executorch.runtime", "interop")
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401  (the llama:: kernels)
    import executorch.kernels.quantized  # noqa: F401  (quantized_decomposed kernels)
    from executorch.runtime import Runtime

    from etbuild.tools.runner import CONSTANTS
    from etbuild.verify.oracle import executorch_methods

    program = Runtime.get().load_program(pte)
    names = set(program.method_names)
    constants = {n: program.load_method(n).execute([])[0] for n in CONSTANTS if n in names}
    bound = program.metadata("forward").input_tensor_meta(0).sizes()[1]
    return Runner(executorch_methods(pte, "forward")[0], read_contract(constants, int(bound)))


def executorch_text(request: Request) -> tuple[str, Stats]:
    """Generate with ExecuTorch's own `TextLLMRunner` on the same files: its text and stats. Its C++ side prints
    each piece, and then a `PyTorchObserver {json}` line, to the process's standard output itself."""
    from etbuild.extras import require

    require("executorch.extension.llm.runner", "interop")
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401
    import executorch.kernels.quantized  # noqa: F401
    from executorch.extension.llm.runner import GenerationConfig, TextLLMRunner

    stats: dict[str, Any] = {}
    pieces: list[str] = []
    runner = TextLLMRunner(str(request.pte), str(request.tokenizer))
    config = GenerationConfig(max_new_tokens=request.count, temperature=request.temperature, echo=False)
    runner.generate(request.prompt, config, token_callback=pieces.append,
                    stats_callback=lambda s: stats.update(json.loads(s.to_json_string())))
    return "".join(pieces), executorch_stats(stats)


def executorch_stats(report: dict[str, Any]) -> Stats:
    """Our Stats from ExecuTorch's runner's report (millisecond timestamps; its `generated_tokens` leaves out the
    first token, which prefill gives, and its decode time runs from the end of prefill)."""
    ms = 1e-3
    prefill = (report.get("prompt_eval_end_ms", 0) - report.get("inference_start_ms", 0)) * ms
    decode = (report.get("inference_end_ms", 0) - report.get("prompt_eval_end_ms", 0)) * ms
    return Stats(int(report.get("prompt_tokens", 0)), int(report.get("generated_tokens", 0)) + 1, prefill, decode)


def run(request: Request, runtime: str, token_ids: Sequence[int] | None, out: TextIO | None = None) -> Stats:
    """The whole command: text through the tokenizer, or token ids; the stats of the generation. Writes to `out`
    (default: standard output)."""
    out = out or sys.stdout
    if request.tokenizer is None:
        tokens: list[int] = []
        stats = generate_tokens(request, token_ids or [], runtime, tokens.append)
        out.write(" ".join(map(str, tokens)) + "\n")
        return stats
    if runtime == "executorch":
        return executorch_text(request)[1]  # its runner prints the text itself
    tokenizer = load_tokenizer(request.tokenizer)
    stats = generate_tokens(request, tokenizer.encode(request.prompt).ids, runtime, TextStream(tokenizer, out))
    out.write("\n")
    return stats
