"""Quantized language models judged on trained weights: held-out perplexity of every program, ours and export_llm's.

    python benchmarks/llm_quality.py [--work /tmp/etbuild-llm-quality] [--json out.json]
                                     [--results] [--steps 240]
                                     [--settings fp32 8da4w 8da4w-corpus 8da4w-random kv8]
                                     [--flows etbuild export_llm] [--sequences 24] [--cross]

A small Llama-shaped decoder (`SHAPE`: dim 256, 4 layers, GQA 4/2, MLP 768, a 2,048-token byte-level BPE) is
trained from a seeded init on Python's standard library source (the top-level `*.py` files of
`sysconfig.get_paths()["stdlib"]`, PSF-licensed, which every Python installation holds): every tenth file (sorted by
name) is held out, the rest is the training text; the tokenizer (`tokenizers`) is trained on the training text only.
The trained model is a Hugging Face folder (config.json, model.safetensors, tokenizer.json) under --work, beside its
Meta-layout copy for export_llm (params.json, meta.pth; q/k rows un-permuted per head), built once and reused while
its stamp (shape, steps, corpus, Python version) matches; nothing of it belongs in git.

Settings, each built by both flows from clean directories on the same weights (XNNPACK, KV cache, custom SDPA;
etbuild with a recipe written here, export_llm with `etbuild.verify.export_llm.export_config`):
- `fp32`: float weights, float KV cache.
- `8da4w`: int8 dynamic activations, int4 weights in groups of 32, int4 embeddings (export_llm `8da4w`,
  `embedding_quantize: 4,32`); ours with its default GPTQ weights, calibrated on the training text
  (`quantize.calibration.text`); `8da4w-corpus` (ours only) on the recipe's default corpus, `8da4w-random` on
  random ids (`text: null`).
- `kv8`: float weights, int8 KV cache with a scale and zero point per token and head (ours `llm.kv_cache: int8`,
  export_llm `quantize_kv_cache`).

Each `.pte` is fed --sequences held-out sequences of `LENGTH` tokens one token a call (positions from 0, as a runner
decodes) in a fresh process of its flow's runtime, one thread: ours (`etbuild.runtime`, no torch) for ours,
ExecuTorch's for export_llm's (--cross: each in the other runtime as well). Perplexity is
exp of the mean negative log-likelihood of each next token; next to it the float model's (Hugging Face, eager, over
the same sequences), the relative gap, and top-1 agreement with the float model's argmax.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import results  # noqa: E402
from benchmarks.llm import meta_params, meta_state  # noqa: E402
from etbuild.build.driver import build  # noqa: E402
from etbuild.llm.checkpoint import make_model  # noqa: E402
from etbuild.verify.export_llm import LlamaShape, export_config, run_export_llm  # noqa: E402
from tests.llm_support import write_llm_recipe  # noqa: E402

VOCAB = 2048
SHAPE: dict[str, Any] = {
    "architecture": "LlamaForCausalLM", "hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0, "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2,
}
"""The trained decoder's Hugging Face config (besides its vocabulary)."""
CONTEXT, LENGTH, BATCH, LR = 256, 128, 8, 3e-3
"""The programs' KV cache; tokens per training and held-out sequence; sequences a step; peak learning rate."""
QUANTIZE = {"scheme": "int8-dynamic-int4-weight", "group_size": 32, "embeddings": "int4"}
SETTINGS: dict[str, dict[str, Any]] = {
    "fp32": {"etbuild": {}, "export_llm": "fp32"},
    "8da4w": {"etbuild": {"quantize": QUANTIZE, "text": "train"}, "export_llm": "8da4w"},
    "8da4w-corpus": {"etbuild": {"quantize": QUANTIZE, "text": "default"}, "export_llm": None},
    "8da4w-random": {"etbuild": {"quantize": QUANTIZE, "text": None}, "export_llm": None},
    "kv8": {"etbuild": {"kv_cache": "int8"}, "export_llm": "fp32-kv8"},
}
"""Per setting: ours' recipe changes (`text`: what GPTQ calibrates on: the training text, the recipe's default corpus
or random ids) and export_llm's form (`etbuild.verify.export_llm.QMODES`; None: ours only)."""


def corpus() -> tuple[list[Path], list[Path]]:
    """The training and held-out files: the stdlib's top-level modules sorted by name, every tenth held out."""
    files = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    return [f for i, f in enumerate(files) if i % 10 != 9], [f for i, f in enumerate(files) if i % 10 == 9]


def _read(files: list[Path]) -> str:
    return "\n\n".join(f.read_text(encoding="utf-8", errors="replace") for f in files)


def train_tokenizer(text: str, folder: Path) -> Any:
    """A byte-level BPE of `VOCAB` tokens (ids 0-2: `<pad>`, `<s>`, `</s>`) trained on `text`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<pad>", "<s>", "</s>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator([text], trainer)
    tokenizer.save(str(folder / "tokenizer.json"))
    return tokenizer


def stamp(steps: int) -> dict[str, Any]:
    """What decides the trained weights: a folder with another stamp is trained again."""
    train, heldout = corpus()
    return {"shape": SHAPE, "vocab": VOCAB, "steps": steps, "batch": BATCH, "length": LENGTH, "lr": LR,
            "python": sys.version.split()[0], "train_files": len(train), "heldout_files": len(heldout)}


def trained(folder: Path, steps: int) -> dict[str, Any]:
    """The trained checkpoint in `folder` (trained now unless its stamp matches): its training record."""
    record = folder / "training.json"
    if record.is_file() and json.loads(record.read_text())["stamp"] == stamp(steps):
        return json.loads(record.read_text())
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    train_files, _ = corpus()
    text = _read(train_files)
    (folder / "train.txt").write_text(text, encoding="utf-8")  # ours calibrates on it (quantize.calibration.text)
    tokenizer = train_tokenizer(text, folder)
    ids = torch.tensor(tokenizer.encode(text).ids, dtype=torch.int64)
    config = {**SHAPE, "vocab_size": VOCAB}
    model = make_model(config, seed=0).train()
    torch.set_num_threads(1)  # two threads on a shared two-core machine ran each step ~5x slower than one
    start = time.perf_counter()
    losses = _train(model, ids, steps)
    model.eval().save_pretrained(folder)
    torch.save(meta_state(model.state_dict(), config, hf_rope=False), folder / "meta.pth")
    (folder / "params.json").write_text(json.dumps(meta_params(config)))
    result = {"stamp": stamp(steps), "train_tokens": len(ids), "seconds": round(time.perf_counter() - start, 1),
              "loss_first": round(losses[0], 3), "loss_last_50": round(float(np.mean(losses[-50:])), 3),
              "corpus": "Python standard library source (top-level *.py of sysconfig stdlib), PSF license"}
    record.write_text(json.dumps(result, indent=2))
    return result


def _train(model: torch.nn.Module, ids: torch.Tensor, steps: int) -> list[float]:
    """AdamW on random windows of `ids`, linear warm-up then cosine decay; the loss of each step."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.1, betas=(0.9, 0.95))
    warmup = max(1, steps // 20)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (
        1 + np.cos(np.pi * min(1.0, s / steps))))
    generator = torch.Generator().manual_seed(0)
    losses = []
    for step in range(steps):
        starts = torch.randint(0, len(ids) - LENGTH - 1, (BATCH,), generator=generator)
        batch = torch.stack([ids[s:s + LENGTH] for s in starts.tolist()])
        loss = model(input_ids=batch, labels=batch).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(float(loss.detach()))
        if step % 50 == 0:
            print(f"step {step}: loss {losses[-1]:.3f}", file=sys.stderr, flush=True)
    return losses


def heldout_sequences(folder: Path, count: int) -> list[list[int]]:
    """`count` sequences of `LENGTH` ids, evenly spaced through the tokenized held-out text."""
    from tokenizers import Tokenizer

    _, heldout = corpus()
    ids = Tokenizer.from_file(str(folder / "tokenizer.json")).encode(_read(heldout)).ids
    step = (len(ids) - LENGTH) // count
    return [ids[i * step:i * step + LENGTH] for i in range(count)]


def float_scores(folder: Path, sequences: list[list[int]]) -> tuple[float, list[list[int]]]:
    """The float Hugging Face model's mean next-token NLL over the sequences, and its argmax at each position."""
    from etbuild.llm.runner import decoder

    model = decoder(path=str(folder), max_context=CONTEXT, max_prefill=1).decoder.model
    nll, argmax = [], []
    with torch.no_grad():
        for sequence in sequences:
            logits = model(torch.tensor([sequence])).logits[0, :-1].double()
            nll += (torch.logsumexp(logits, -1) - logits[torch.arange(len(sequence) - 1), sequence[1:]]).tolist()
            argmax.append(logits.argmax(-1).tolist())
    return float(np.mean(nll)), argmax


def build_ours(work: Path, folder: Path, setting: str) -> tuple[Path, float]:
    """A clean etbuild build of the setting from a recipe written here."""
    name = f"ours-{setting}"
    shutil.rmtree(work / "build" / name, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    change = SETTINGS[setting]["etbuild"]
    sections: dict[str, Any] = {"backends": [{"name": "xnnpack"}], "verify": {"agreement": 0.0},
                                "llm": {"attention": "custom", "kv_cache": change.get("kv_cache", "float32")}}
    if "quantize" in change:
        text = {"train": {"text": str(folder / "train.txt")}, "default": {}, None: {"text": None}}[change["text"]]
        sections["quantize"] = {**change["quantize"], **({"calibration": text} if text else {})}
    recipe = write_llm_recipe(work, name, {"path": str(folder), "max_context": CONTEXT, "max_prefill": LENGTH},
                              **sections)
    start = time.perf_counter()
    result = build([recipe], work / "build", stream=io.StringIO())
    if result.exit_code != 0:
        raise SystemExit(f"etbuild build of {name} failed: {result.failed}")
    return work / "build" / name / f"{name}.pte", time.perf_counter() - start


def build_export_llm(work: Path, folder: Path, setting: str) -> tuple[Path, float]:
    """A clean export_llm build of the setting on the same weights (its Meta-layout copy)."""
    out = work / f"export_llm-{setting}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    shape = LlamaShape(dim=SHAPE["hidden_size"], n_layers=SHAPE["num_hidden_layers"],
                       n_heads=SHAPE["num_attention_heads"], n_kv_heads=SHAPE["num_key_value_heads"],
                       vocab_size=VOCAB, hidden_dim=SHAPE["intermediate_size"], max_seq_len=CONTEXT,
                       max_context_len=CONTEXT)
    config = export_config(shape, SETTINGS[setting]["export_llm"], folder / "params.json", folder / "meta.pth",
                           out / "model.pte")
    start = time.perf_counter()
    run_export_llm(config, out)
    return out / "model.pte", time.perf_counter() - start


SCORE = r"""
import json, sys, time
import numpy as np
runtime, pte, sequences = sys.argv[1], sys.argv[2], json.loads(open(sys.argv[3]).read())
if runtime == "executorch":
    import torch
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401
    import executorch.kernels.quantized  # noqa: F401
    from executorch.runtime import Runtime
    method = Runtime.get().load_program(pte).load_method("forward")
    step = lambda t, i: method.execute([torch.tensor([[t]]), torch.tensor([i])])[0].numpy().reshape(-1)
else:
    from etbuild.runtime import Program
    method = Program.load(pte).load_method("forward")
    step = lambda t, i: np.asarray(method(np.array([[t]], np.int64), np.array([i], np.int64))[0]).reshape(-1)
nll, argmax, start = [], [], time.perf_counter()
for sequence in sequences:
    row = []
    for i, (t, target) in enumerate(zip(sequence[:-1], sequence[1:])):
        logits = step(t, i).astype(np.float64)
        top = logits.max()
        nll.append(float(top + np.log(np.exp(logits - top).sum()) - logits[target]))
        row.append(int(logits.argmax()))
    argmax.append(row)
print("SCORES " + json.dumps({"nll": nll, "argmax": argmax, "seconds": time.perf_counter() - start}))
"""


def program_scores(runtime: str, pte: Path, sequences: Path) -> dict[str, Any]:
    """Per-position NLL and argmax of `pte` over the sequences in `runtime`, in a fresh process."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # one thread: a loaded machine made numba's split far slower
    proc = subprocess.run([sys.executable, "-c", SCORE, runtime, str(pte), str(sequences)], capture_output=True,
                          text=True, check=False, cwd=ROOT, env=env)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("SCORES ")), None)
    if line is None:
        raise SystemExit(f"scoring {pte} in {runtime}'s runtime failed:\n{proc.stderr[-2000:]}")
    return json.loads(line[7:])


def row(setting: str, flow: str, built: tuple[Path, float], runtime: str, scores: dict[str, Any],
        reference: tuple[float, list[list[int]]]) -> dict[str, Any]:
    """One program in one runtime against the float model."""
    float_nll, float_argmax = reference
    nll = float(np.mean(scores["nll"]))
    agree = np.mean([a == b for mine, ref in zip(scores["argmax"], float_argmax) for a, b in zip(mine, ref)])
    return {"setting": setting, "flow": flow, "runtime": runtime, "perplexity": round(float(np.exp(nll)), 4),
            "float_perplexity": round(float(np.exp(float_nll)), 4),
            "vs_float_pct": round(100 * (np.exp(nll - float_nll) - 1), 3), "top1_vs_float": round(float(agree), 4),
            "positions": len(scores["nll"]), "pte_bytes": built[0].stat().st_size, "build_s": round(built[1], 1),
            "score_s": round(scores["seconds"], 1), "load_average": Path("/proc/loadavg").read_text().split()[:3]}


RUNTIMES = {"etbuild": ("etbuild", "executorch"), "export_llm": ("executorch", "etbuild")}
"""Each flow's programs are scored in its own runtime (and, with --cross, in the other one too)."""


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Train (or reuse), build every setting with both flows, score every program: the JSON document."""
    folder = args.work / "checkpoint"
    training = trained(folder, args.steps)
    sequences = heldout_sequences(folder, args.sequences)
    (args.work / "heldout.json").write_text(json.dumps(sequences))
    reference = float_scores(folder, sequences)
    rows = []
    for setting in args.settings:
        for flow in (f for f in args.flows if f == "etbuild" or SETTINGS[setting]["export_llm"]):
            builder = build_ours if flow == "etbuild" else build_export_llm
            built = builder(args.work / flow, folder, setting)
            for runtime in RUNTIMES[flow][:2 if args.cross else 1]:
                rows.append(row(setting, flow, built, runtime,
                                program_scores(runtime, built[0], args.work / "heldout.json"), reference))
                print(json.dumps(rows[-1]), flush=True)
    return {"training": training, "model": {**SHAPE, "vocab_size": VOCAB}, "sequences": args.sequences,
            "length": LENGTH, "float_perplexity": round(float(np.exp(reference[0])), 4), "rows": rows}


COLUMNS = ["setting", "flow", "runtime", "perplexity", "float_perplexity", "vs_float_pct", "top1_vs_float",
           "pte_bytes", "build_s", "load_average"]


def notes(doc: dict[str, Any]) -> list[str]:
    """What the table measured, for the results page."""
    t = doc["training"]
    return [f"Model: Llama-shaped, dim {SHAPE['hidden_size']}, {SHAPE['num_hidden_layers']} layers, GQA "
            f"{SHAPE['num_attention_heads']}/{SHAPE['num_key_value_heads']}, vocabulary {VOCAB} (byte-level BPE), "
            f"trained {t['stamp']['steps']} steps of {BATCH} x {LENGTH} tokens ({t['seconds']} s, one thread) on "
            f"{t['corpus']}; training loss {t['loss_first']} -> {t['loss_last_50']} (mean of the last 50 steps).",
            f"Held out: every tenth stdlib file; {doc['sequences']} sequences of {LENGTH} tokens fed one token a call "
            "(positions from 0); perplexity = exp(mean next-token NLL); vs_float_pct: against the float Hugging Face "
            "model's perplexity on the same positions; top1_vs_float: argmax agreement with it.",
            "Settings: fp32; 8da4w = int8 dynamic activations, int4 weights g32, int4 embeddings (ours: GPTQ "
            "calibrated on the training text; -corpus: on the recipe's default corpus; -random: on random ids; "
            "export_llm: its 8da4w, rounded); kv8 = float weights, int8 KV cache per token and head. XNNPACK, "
            "custom SDPA, both flows.",
            "runtime: which runtime ran the .pte, one thread."]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/etbuild-llm-quality"))
    parser.add_argument("--json", type=Path)
    results.add_option(parser, "llm-quality")
    parser.add_argument("--steps", type=int, default=240, help="training steps (cached by stamp)")
    parser.add_argument("--sequences", type=int, default=24, help="held-out sequences of 128 tokens")
    parser.add_argument("--cross", action="store_true", help="also score each program in the other runtime")
    parser.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=list(SETTINGS))
    parser.add_argument("--flows", nargs="+", choices=list(RUNTIMES), default=list(RUNTIMES))
    parser.add_argument("--train-only", action="store_true", help="train (or reuse) the checkpoint and stop")
    args = parser.parse_args()
    if args.train_only:
        print(json.dumps(trained(args.work / "checkpoint", args.steps)))
        return
    doc = measure(args)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=2))
    if args.results:
        extra = {"float_perplexity": doc["float_perplexity"], "training": doc["training"], "model": doc["model"]}
        results.save(args.results, doc["rows"], title="Held-out perplexity of quantized programs on trained weights, "
                     "ours and export_llm's", columns=COLUMNS, notes=notes(doc), extra=extra)


if __name__ == "__main__":
    main()
