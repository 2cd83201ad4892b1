"""Ethos-U's preprocess: one partition → TOSA (our walk) → Vela → the `vela_bin_stream` blob.

The blob is exactly what ExecuTorch's EthosUBackend reads; its compile specs are ExecuTorch's, in its
order (tosa_spec, compile_flags, output_format, transform_pipeline_config on U55, preserve_io_quantization,
target). The partition's TOSA
flatbuffer travels beside the blob in the program's named data, under `tosa_key(blob)`, for runtimes
without an NPU (etbuild.backends.ethos_u.runtime); ExecuTorch's runtime reads named data only by the keys
a backend asks for, so it never touches it (it costs its bytes in flash).
"""

from __future__ import annotations

from etbuild.backends.aot import Processed, Subgraph
from etbuild.backends.ethos_u.format.blob import pack, tosa_key
from etbuild.backends.ethos_u.options import EthosUOptions
from etbuild.backends.ethos_u.targets import family
from etbuild.backends.ethos_u.vela import compile_flags, compile_tosa
from etbuild.backends.tosa.aot.lower import lower_subgraph

U55_PIPELINE = (b'{"softmax": "STABLE", "leaky_relu": "DECOMPOSE", "quantize_inf": {"neg_inf": -256.0, '
                b'"pos_inf": 255.0}, "sdpa_safe_softmax_guard": "PRESERVE"}')
"""The `transform_pipeline_config` ExecuTorch's partitioner writes for U55 targets (not default there);
no runtime reads it, it is kept so the specs match ExecuTorch's key for key."""


def compile_specs(options: EthosUOptions) -> tuple[tuple[str, bytes], ...]:
    """ExecuTorch's compile specs for the target, in its order (ARM-ETHOSU.md §1)."""
    fam = family(options.target)
    pipeline = (("transform_pipeline_config", U55_PIPELINE),) if fam.name == "u55" else ()
    return (
        ("tosa_spec", fam.tosa_spec.encode()),
        ("compile_flags", " ".join(compile_flags(options)).encode()),
        ("output_format", b"vela"),
        *pipeline,
        ("preserve_io_quantization", b"False"),
        ("target", options.target.encode()),
    )


def preprocess(sub: Subgraph, options: EthosUOptions) -> Processed:
    """The blob of one partition, its TOSA graph as named data, and the TOSA operators it holds."""
    lowered = lower_subgraph(sub)
    compiled = compile_tosa(lowered.tosa, options)
    blob = pack(compiled.bin)
    return Processed(blob, {tosa_key(blob): lowered.tosa}, dict(lowered.operators), compile_specs(options))
