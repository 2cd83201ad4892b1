"""Example models that recipes name as `etbuild.zoo:<callable>`.

Each is a plain factory returning an `nn.Module` built from standard layers, so that the set of
operators each one exports to is predictable (`tests/etbuild/zoo/test_zoo.py` lists them per recipe).
Initialization draws from torch's global RNG, which `etbuild.model.build_model` seeds with
`model.seed` first; nothing is downloaded. AOT side: imports torch.

The models live in `vision`, `sequence`, `programs` and `lm`; recipes name them from here.
"""

from etbuild.zoo.lm import CachedAttention, DecoderBlock, RMSNorm, TinyLlama, tiny_llama
from etbuild.zoo.programs import (
    CompareWhere,
    CondModel,
    EmbedArgmax,
    RunningStats,
    compare_where,
    cond_model,
    embed_argmax,
    running_stats,
)
from etbuild.zoo.sequence import (
    EncoderDecoder,
    EncoderLayer,
    GRUClassifier,
    SelfAttention,
    encoder_decoder,
    gru_classifier,
    transformer_encoder,
)
from etbuild.zoo.vision import InvertedResidual, kws_cnn, mlp, mobilenet_v2

__all__ = [
    "CachedAttention", "CompareWhere", "CondModel", "DecoderBlock", "EmbedArgmax", "EncoderDecoder", "EncoderLayer",
    "GRUClassifier", "InvertedResidual", "RMSNorm", "RunningStats", "SelfAttention", "TinyLlama", "compare_where",
    "cond_model", "embed_argmax", "encoder_decoder", "gru_classifier", "kws_cnn", "mlp", "mobilenet_v2",
    "running_stats", "tiny_llama", "transformer_encoder",
]
