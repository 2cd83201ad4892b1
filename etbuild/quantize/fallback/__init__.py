"""`accuracy: {fallback: auto}`: when the recipe's scheme misses its gate, choose observers per
layer, then keep the layers with the most accuracy per byte at higher precision, until it holds.

`graph` runs an observed graph fake-quantized under a chosen setting, `precision` prices the
steps up in precision, `search` is the search itself and what it reports.
"""

from etbuild.quantize.fallback.graph import fake_quantize, snr_db_of
from etbuild.quantize.fallback.search import Fallback, Inputs, fall_back

__all__ = ["Fallback", "Inputs", "fake_quantize", "fall_back", "snr_db_of"]
