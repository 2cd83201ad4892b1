"""A picture of a method's partitions: the call graph, each delegate's calls in its colour (a standalone SVG).

Calls are placed in columns by depth (the longest chain of calls before them) and in rows by
graph order within a column; edges join a call to the calls it reads. Calls left outside
every delegate are grey; hovering a box shows the call, its operator and where it went. The
output depends only on the report.
"""

from __future__ import annotations

from xml.sax.saxutils import escape

from etbuild.lowering.partition_report import MethodPartitions

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f")
OUTSIDE = "#bbbbbb"
BOX_W, BOX_H, STEP_X, STEP_Y, MARGIN, LEGEND = 10, 8, 16, 12, 20, 18


def _positions(method: MethodPartitions) -> dict[str, tuple[int, int]]:
    """name -> (column, row)."""
    depth: dict[str, int] = {}
    rows: dict[int, int] = {}
    places = {}
    for name, _, _, inputs in method.drawing:
        depth[name] = 1 + max((depth[i] for i in inputs if i in depth), default=-1)
        column = depth[name]
        places[name] = (column, rows.get(column, 0))
        rows[column] = rows.get(column, 0) + 1
    return places


def _colour(group: int) -> str:
    return OUTSIDE if group < 0 else PALETTE[group % len(PALETTE)]


def partition_svg(method: MethodPartitions, title: str) -> str:
    """The SVG text for one method."""
    places = _positions(method)
    columns = 1 + max((c for c, _ in places.values()), default=0)
    rows = 1 + max((r for _, r in places.values()), default=0)
    legend = len(method.partitions) + 1
    width = 2 * MARGIN + columns * STEP_X
    height = 2 * MARGIN + rows * STEP_Y + LEGEND * (legend + 1)
    top = MARGIN + LEGEND * (legend + 1)

    def centre(name: str) -> tuple[float, float]:
        c, r = places[name]
        return MARGIN + c * STEP_X + BOX_W / 2, top + r * STEP_Y + BOX_H / 2

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
           f'font-size="12">', f'<text x="{MARGIN}" y="{MARGIN}">{escape(title)}</text>']
    for k, p in enumerate(method.partitions):
        ops = ", ".join(f"{n}×{c}" for n, c in p.operators.items())
        out.append(_legend(k + 1, _colour(p.index), f"delegate {p.index} ({p.backend}): {p.nodes} calls: {ops}"))
    out.append(_legend(legend, OUTSIDE, f"outside every delegate: {len(method.outside)} calls"))
    for name, _, _, inputs in method.drawing:
        x2, y2 = centre(name)
        for i in inputs:
            if i in places:
                x1, y1 = centre(i)
                out.append(f'<line x1="{x1:g}" y1="{y1:g}" x2="{x2:g}" y2="{y2:g}" stroke="#dddddd"/>')
    for name, op, group, _ in method.drawing:
        c, r = places[name]
        where = "outside" if group < 0 else f"delegate {group}"
        out.append(f'<rect x="{MARGIN + c * STEP_X}" y="{top + r * STEP_Y}" width="{BOX_W}" height="{BOX_H}" '
                   f'fill="{_colour(group)}"><title>{escape(f"{name}: {op} ({where})")}</title></rect>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _legend(row: int, colour: str, text: str) -> str:
    y = MARGIN + row * LEGEND
    return (f'<rect x="{MARGIN}" y="{y - BOX_H}" width="{BOX_W}" height="{BOX_H}" fill="{colour}"/>'
            f'<text x="{MARGIN + 2 * BOX_W}" y="{y}">{escape(text)}</text>')
