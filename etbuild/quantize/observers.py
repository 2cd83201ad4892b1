"""Activation observers of our own: `percentile` and `mse`, over a bounded histogram.

Both see every calibration value but keep only a histogram of `BINS` equal bins and the exact
running minimum and maximum, so memory does not grow with the calibration set. The histogram
covers `[origin, origin + BINS * width]`; a value outside it doubles `width` (adjacent bins
merge in pairs, exactly) and extends the covered range on that side, until every value fits.
After any number of batches the bins are at most twice as wide as those of the first batch's
range, and never narrower than needed to hold the values seen.

Their ranges `[lo, hi]` become parameters as min/max ones do (`_calculate_qparams`: the range
is widened to contain zero; scale = (hi − lo) / 255, at least eps; the zero point rounds
−lo / scale into [-128, 127]), so convert makes ordinary `quantize_per_tensor` /
`dequantize_per_tensor` pairs of them:

- `percentile`: lo is the `100 − PERCENTILE`th and hi the `PERCENTILE`th percentile (99.99)
  of every value seen, read off the cumulative histogram with linear interpolation inside a
  bin; values beyond them are clipped;
- `mse`: of the candidate ranges α · [min, max] for α = 2^(−k/16), k = 0 … 95 (1 down to
  1/64), the one whose quantize → dequantize of the histogram has the least mean squared
  error; each bin stands for `SUBPOINTS` evenly spaced values carrying its count, so rounding
  error inside a bin and clipping error beyond the range both count.
"""

from __future__ import annotations

import math

import torch

from etbuild.quantize.ao import UniformQuantizationObserverBase

BINS = 2048
PERCENTILE = 99.99
SUBPOINTS = 4
MSE_STEPS = 96


class _HistogramBase(UniformQuantizationObserverBase):
    """Per-tensor observer keeping exact min/max and a histogram whose bins only ever merge."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.register_buffer("min_val", torch.tensor(float("inf")))
        self.register_buffer("max_val", torch.tensor(float("-inf")))
        self.register_buffer("histogram", torch.zeros(BINS, dtype=torch.float64))
        self.register_buffer("origin", torch.tensor(0.0, dtype=torch.float64))
        self.register_buffer("width", torch.tensor(0.0, dtype=torch.float64))
        self._qparams: tuple[torch.Tensor, torch.Tensor] | None = None  # of the histogram as it is

    def forward(self, x_orig: torch.Tensor) -> torch.Tensor:
        x = x_orig.detach().float().flatten()
        if x.numel() == 0:
            return x_orig
        lo, hi = (float(v) for v in torch.aminmax(x))
        if not (math.isfinite(lo) and math.isfinite(hi)):  # infinities and NaNs are not in the range
            x = x[torch.isfinite(x)]
            if x.numel() == 0:
                return x_orig
            lo, hi = (float(v) for v in torch.aminmax(x))
        self._qparams = None
        if float(self.width) == 0.0:
            span = hi - lo
            self.origin.fill_(lo)
            self.width.fill_(span / BINS if span > 0 else max(abs(lo), 1.0) * 2.0**-20)
        while lo < float(self.origin) or hi > float(self.origin) + BINS * float(self.width):
            self._grow(left=lo < float(self.origin))
        start = float(self.origin)
        self.histogram += torch.histc(x, BINS, min=start, max=start + BINS * float(self.width)).double()
        self.min_val.fill_(min(float(self.min_val), lo))
        self.max_val.fill_(max(float(self.max_val), hi))
        return x_orig

    def _grow(self, left: bool) -> None:
        """Double the bin width, merging pairs, and extend the range to the left or the right."""
        merged = self.histogram.reshape(BINS // 2, 2).sum(1)
        empty = torch.zeros(BINS // 2, dtype=torch.float64)
        if left:
            self.origin -= BINS * self.width
            self.histogram.copy_(torch.cat([empty, merged]))
        else:
            self.histogram.copy_(torch.cat([merged, empty]))
        self.width *= 2

    def _centres(self) -> torch.Tensor:
        """`SUBPOINTS` evenly spaced values inside each bin, shape (BINS * SUBPOINTS,)."""
        offsets = (torch.arange(SUBPOINTS, dtype=torch.float64) + 0.5) / SUBPOINTS
        starts = self.origin + torch.arange(BINS, dtype=torch.float64) * self.width
        return (starts[:, None] + offsets[None, :] * self.width).flatten()

    def _qparams_of(self, lo: float, hi: float) -> tuple[torch.Tensor, torch.Tensor]:
        return self._calculate_qparams(torch.tensor(lo, dtype=torch.float32), torch.tensor(hi, dtype=torch.float32))

    def _range(self) -> tuple[float, float]:
        raise NotImplementedError

    def calculate_qparams(self) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]
        if float(self.width) == 0.0:
            return self._calculate_qparams(self.min_val, self.max_val)  # nothing seen: scale 1, as min/max gives
        if self._qparams is None:
            self._qparams = self._qparams_of(*self._range())
        scale, zero = self._qparams
        return scale.clone(), zero.clone()

    def extra_repr(self) -> str:
        return f"min_val={float(self.min_val)}, max_val={float(self.max_val)}"


class PercentileObserver(_HistogramBase):
    """The range from the (100 − PERCENTILE)th to the PERCENTILEth percentile of every value seen."""

    def _range(self) -> tuple[float, float]:
        return self._quantile(1 - PERCENTILE / 100), self._quantile(PERCENTILE / 100)

    def _quantile(self, q: float) -> float:
        """The value below which a fraction `q` of the counts lie (linear inside a bin)."""
        counts = self.histogram
        cumulative = torch.cumsum(counts, 0)
        target = q * float(cumulative[-1])
        k = int(torch.searchsorted(cumulative, torch.tensor([target], dtype=torch.float64)).clamp(max=BINS - 1))
        before = float(cumulative[k - 1]) if k > 0 else 0.0
        inside = (target - before) / float(counts[k]) if float(counts[k]) > 0 else 0.0
        value = float(self.origin) + (k + inside) * float(self.width)
        return min(max(value, float(self.min_val)), float(self.max_val))


class MseObserver(_HistogramBase):
    """The range α · [min, max] whose quantize → dequantize of the histogram has the least squared error."""

    def _range(self) -> tuple[float, float]:
        values = self._centres()
        weights = self.histogram.repeat_interleave(SUBPOINTS) / SUBPOINTS
        lo, hi = float(self.min_val), float(self.max_val)
        best, best_error = (lo, hi), float("inf")
        for k in range(MSE_STEPS):
            alpha = 2.0 ** (-k / 16)
            error = self._error(values, weights, alpha * lo, alpha * hi)
            if error < best_error:
                best, best_error = (alpha * lo, alpha * hi), error
        return best

    def _error(self, values: torch.Tensor, weights: torch.Tensor, lo: float, hi: float) -> float:
        """Σ count · (value − dequantize(quantize(value)))² under the parameters of [lo, hi]."""
        scale, zero = self._qparams_of(lo, hi)
        s, z = float(scale), int(zero)
        q = torch.clamp(torch.round(values / s) + z, self.quant_min, self.quant_max)
        return float((weights * (values - (q - z) * s).square()).sum())
