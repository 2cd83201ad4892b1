"""A picture of a memory plan: one panel per level, one rectangle per tensor (a standalone SVG).

x is the instruction index, y the byte offset (0 at the bottom of each panel). A tensor
spans from its first instruction to the end of its last; hovering shows its value, bytes,
offset, lifetime and module. A dashed line marks the instruction where each level has the
most bytes live. The output depends only on the arguments.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from xml.sax.saxutils import escape

from etbuild.memory.hierarchy import Placement, live_peak
from etbuild.memory.lifetimes import TensorLife

WIDTH = 900
PANEL_HEIGHT = 220
LEFT, RIGHT, TOP, GAP = 80, 24, 76, 90  # margins; GAP: from one panel to the next (axis, titles)
LEGEND_ROW = 20
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f")
_UNITS = ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"), (1, "B"))
_NO_MODULES: Mapping[int, str] = MappingProxyType({})


def _num(x: float) -> str:
    """A coordinate with at most one decimal, so that output is stable and small."""
    return f"{x:.1f}".rstrip("0").rstrip(".")


def _unit(n: int) -> tuple[int, str]:
    return next((size, name) for size, name in _UNITS if n >= size or size == 1)


def _human(n: int) -> str:
    size, name = _unit(n)
    return f"{n} B" if size == 1 else f"{_num(n / size)} {name}"


def _nice_step(span: float, ticks: int = 5) -> float:
    """A step of 1, 2 or 5 × 10^k that cuts `span` into about `ticks` parts."""
    raw = max(span / ticks, 1e-9)
    base = 10 ** math.floor(math.log10(raw))
    return next(m * base for m in (1, 2, 5, 10) if m * base >= raw)


class _Frame:
    """One panel's mapping from (instruction, byte) to pixels."""

    def __init__(self, top: float, first: int, stop: int, nbytes: int) -> None:
        self.top, self.first = top, first
        self.dx = (WIDTH - LEFT - RIGHT) / max(stop - first, 1)
        self.dy = PANEL_HEIGHT / max(nbytes, 1)

    def x(self, pc: float) -> float:
        return LEFT + (pc - self.first) * self.dx

    def y(self, offset: float) -> float:
        return self.top + PANEL_HEIGHT - offset * self.dy


def _rect(t: TensorLife, p: Placement, f: _Frame, colour: str, tip: str) -> str:
    """A tensor's rectangle; two opacities alternate by value so that neighbours stand apart."""
    x0, x1, y0 = f.x(t.start), f.x(t.end + 1), f.y(p.offset + t.nbytes)
    h = max(f.y(p.offset) - y0, 0.5)
    opacity = "0.9" if t.value % 2 else "0.65"
    return (
        f'<rect x="{_num(x0)}" y="{_num(y0)}" width="{_num(x1 - x0)}" height="{_num(h)}" fill="{colour}" '
        f'fill-opacity="{opacity}" stroke="#1f2937" stroke-width="0.5"><title>{escape(tip)}</title></rect>'
    )


def _tip(t: TensorLife, p: Placement, level: str, modules: Mapping[int, str]) -> str:
    module = f", {modules[t.value]}" if t.value in modules else ""
    return (
        f"value {t.value}: {t.nbytes:,} bytes at offset {p.offset:,} in {level}, "
        f"instructions {t.start}..{t.end}{module}"
    )


def _x_axis(f: _Frame, first: int, stop: int) -> list[str]:
    base = f.top + PANEL_HEIGHT
    out = [f'<line x1="{LEFT}" y1="{_num(base)}" x2="{WIDTH - RIGHT}" y2="{_num(base)}" stroke="#111"/>']
    step = max(1, int(_nice_step(stop - first, 10)))
    for pc in range(math.ceil(first / step) * step, stop + 1, step):
        x = _num(f.x(pc))
        out.append(f'<line x1="{x}" y1="{_num(base)}" x2="{x}" y2="{_num(base + 4)}" stroke="#111"/>')
        out.append(f'<text x="{x}" y="{_num(base + 16)}" text-anchor="middle">{pc}</text>')
    mid = _num((LEFT + WIDTH - RIGHT) / 2)
    out.append(f'<text x="{mid}" y="{_num(base + 34)}" text-anchor="middle">instruction</text>')
    return out


def _y_axis(f: _Frame, nbytes: int) -> list[str]:
    size, name = _unit(max(nbytes, 1))
    step = _nice_step(nbytes / size) * size
    out = [f'<line x1="{LEFT}" y1="{_num(f.top)}" x2="{LEFT}" y2="{_num(f.y(0))}" stroke="#111"/>']
    ticks = int(nbytes // step) + 1 if nbytes else 1
    for k in range(ticks):
        y = _num(f.y(k * step))
        label = f"{_num(k * step / size)} {name}"
        out.append(f'<line x1="{LEFT - 4}" y1="{y}" x2="{LEFT}" y2="{y}" stroke="#111"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y}" text-anchor="end" dominant-baseline="middle">{label}</text>')
    mid = _num(f.top + PANEL_HEIGHT / 2)
    out.append(f'<text x="14" y="{mid}" text-anchor="middle" transform="rotate(-90 14 {mid})">byte offset</text>')
    return out


def _peak_mark(f: _Frame, lives: Sequence[TensorLife]) -> list[str]:
    if not lives:
        return [f'<text x="{_num(f.x(f.first) + 8)}" y="{_num(f.top + 16)}" fill="#555">empty</text>']
    peak = live_peak(lives, 1)
    pc, nbytes = peak.pc, peak.live_bytes
    x = f.x(pc + 0.5)
    left = x < (LEFT + WIDTH - RIGHT) / 2
    label_x, anchor = (x + 4, "start") if left else (x - 4, "end")
    return [
        f'<line x1="{_num(x)}" y1="{_num(f.top)}" x2="{_num(x)}" y2="{_num(f.y(0))}" stroke="#111" '
        'stroke-dasharray="5 3"/>',
        f'<text x="{_num(label_x)}" y="{_num(f.top - 6)}" text-anchor="{anchor}">'
        f"peak: {nbytes:,} bytes live {'before the first instruction' if pc < 0 else f'at instruction {pc}'}</text>",
    ]


def _panel(
    i: int, name: str, nbytes: int, lives: Sequence[TensorLife], placements: Mapping[int, Placement],
    span: tuple[int, int], modules: Mapping[int, str],
) -> list[str]:
    """Level i: its heading, its tensors, its axes and its peak."""
    f = _Frame(TOP + i * (PANEL_HEIGHT + GAP), span[0], span[1], nbytes)
    colour = PALETTE[i % len(PALETTE)]
    heading = f"{name} (memory {i + 1}): {nbytes:,} bytes planned, {len(lives)} tensors"
    out = [f'<text x="{LEFT}" y="{_num(f.top - 26)}" font-weight="bold">{escape(heading)}</text>']
    out += [_rect(t, placements[t.value], f, colour, _tip(t, placements[t.value], name, modules)) for t in lives]
    return out + _x_axis(f, *span) + _y_axis(f, nbytes) + _peak_mark(f, lives)


def _legend(top: float, names: Sequence[str], members: list[list[TensorLife]]) -> list[str]:
    out = []
    for i, name in enumerate(names):
        y = top + i * LEGEND_ROW
        out.append(f'<rect x="{LEFT}" y="{_num(y)}" width="14" height="14" fill="{PALETTE[i % len(PALETTE)]}"/>')
        total = sum(t.nbytes for t in members[i])
        count = f"{len(members[i])} tensor" + ("" if len(members[i]) == 1 else "s")
        text = f"{name}: {count}, {_human(total)} of tensor data"
        out.append(f'<text x="{LEFT + 20}" y="{_num(y + 11)}">{escape(text)}</text>')
    return out


def memory_svg(
    lives: Sequence[TensorLife], placements: Mapping[int, Placement], level_names: Sequence[str],
    level_bytes: Sequence[int], title: str, modules: Mapping[int, str] = _NO_MODULES,
) -> str:
    """A standalone SVG of the plan: a panel per level (fastest on top), a rectangle per placed tensor."""
    placed = sorted((t for t in lives if t.value in placements), key=lambda t: t.value)
    members = [[t for t in placed if placements[t.value].memory_id == i + 1] for i in range(len(level_names))]
    span = (min((t.start for t in placed), default=0), max((t.end + 1 for t in placed), default=1))
    legend_top = TOP + len(level_names) * (PANEL_HEIGHT + GAP) - GAP + 56
    height = legend_top + len(level_names) * LEGEND_ROW + 8
    body = [f'<text x="{LEFT}" y="28" font-size="16" font-weight="bold">{escape(title)}</text>']
    for i, name in enumerate(level_names):
        body += _panel(i, name, level_bytes[i], members[i], placements, span, modules)
    body += _legend(legend_top, level_names, members)
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{_num(height)}" '
        f'viewBox="0 0 {WIDTH} {_num(height)}" font-family="sans-serif" font-size="11">'
    )
    return "\n".join([head, '<rect width="100%" height="100%" fill="white"/>', *body, "</svg>"]) + "\n"
