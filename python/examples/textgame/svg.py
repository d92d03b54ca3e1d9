"""Learning curves as a plain SVG (no plotting library): held-out success against iteration,
greedy and sampled play side by side, one line per method (mean over run seeds) with a band of
± one standard deviation."""

from __future__ import annotations

from typing import List, Sequence
from xml.sax.saxutils import escape

import numpy as np

COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]
W, H, PAD = 360, 240, 40


def _panel(x0: int, title: str, series: List[tuple], xmax: float) -> List[str]:
    out = [f'<g transform="translate({x0},0)">',
           f'<text x="{PAD + (W - PAD) / 2}" y="16" text-anchor="middle" font-size="13">{escape(title)}</text>',
           f'<rect x="{PAD}" y="24" width="{W - PAD - 10}" height="{H - 24 - PAD}" fill="none" stroke="#888"/>']

    def px(x: float, y: float) -> str:
        return f"{PAD + (W - PAD - 10) * x / max(xmax, 1):.1f},{24 + (H - 24 - PAD) * (1 - y):.1f}"

    for t in (0.0, 0.25, 0.5, 0.75, 1.0):
        xy = px(0, t).split(",")
        out.append(f'<text x="{PAD - 4}" y="{float(xy[1]) + 4}" text-anchor="end" font-size="10">{t:g}</text>')
    out.append(f'<text x="{PAD + (W - PAD) / 2}" y="{H - 8}" text-anchor="middle" font-size="11">iteration (0..{xmax:g})</text>')
    for colour, xs, mean, std in series:
        band = [px(x, min(1, m + s)) for x, m, s in zip(xs, mean, std)]
        band += [px(x, max(0, m - s)) for x, m, s in reversed(list(zip(xs, mean, std)))]
        out.append(f'<polygon points="{" ".join(band)}" fill="{colour}" fill-opacity="0.12" stroke="none"/>')
        line = " ".join(px(x, m) for x, m in zip(xs, mean))
        out.append(f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="1.8"/>')
    out.append("</g>")
    return out


def write_curves(path: str, results: Sequence, methods: Sequence[str]) -> None:
    parts: List[str] = []
    xmax = 1.0
    for i, mode in enumerate(("greedy", "sampled")):
        series = []
        for j, name in enumerate(methods):
            runs = [r for r in results if r.method == name]
            if not runs:
                continue
            xs = [c["iteration"] for c in runs[0].curve]
            ys = np.array([[c[mode] for c in r.curve] for r in runs])
            xmax = max(xmax, xs[-1])
            series.append((COLOURS[j % len(COLOURS)], xs, ys.mean(0), ys.std(0, ddof=1) if len(runs) > 1 else 0 * ys[0]))
        parts += _panel(i * W, f"held-out success, {mode} play", series, xmax)
    legend = []
    for j, name in enumerate(methods):
        y = H + 14 + 16 * (j // 4)
        x = 20 + 175 * (j % 4)
        legend.append(f'<line x1="{x}" y1="{y - 4}" x2="{x + 22}" y2="{y - 4}" stroke="{COLOURS[j % len(COLOURS)]}" stroke-width="2"/>')
        legend.append(f'<text x="{x + 28}" y="{y}" font-size="11">{escape(name)}</text>')
    height = H + 20 + 16 * ((len(methods) + 3) // 4)
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * W}" height="{height}" font-family="sans-serif">',
           f'<rect width="{2 * W}" height="{height}" fill="white"/>', *parts, *legend, "</svg>"]
    with open(path, "w") as f:
        f.write("\n".join(svg) + "\n")
