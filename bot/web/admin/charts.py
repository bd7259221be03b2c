"""Server-rendered SVG bar charts (no JavaScript, no library).

Hand-written rather than pygal: pygal's default output pulls its tooltip
script from a CDN, and a dozen lines of SVG do what the overview needs. Every
text in the SVG is escaped; each bar has a <title> (its label and value) for
screen readers and hover, and the chart a <title> and <desc>.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from markupsafe import Markup

WIDTH = 640
HEIGHT = 220
_TOP, _BOTTOM, _LEFT, _RIGHT = 24, 34, 56, 8


def short(value: float) -> str:
    """12 → "12", 12_300 → "12.3k", 4_500_000 → "4.5M"."""
    for size, suffix in ((1_000_000_000, "G"), (1_000_000, "M"), (1_000, "k")):
        if abs(value) >= size:
            return f"{value / size:.1f}".rstrip("0").rstrip(".") + suffix
    return f"{value:g}"


def bar_chart(
    title: str,
    labels: Sequence[str],
    values: Sequence[float],
    *,
    css_class: str = "bars",
    width: int = WIDTH,
    height: int = HEIGHT,
) -> Markup:
    """One bar per label, the y axis from 0 to the largest value."""
    if len(labels) != len(values):
        raise ValueError("one value per label")
    plot_w = width - _LEFT - _RIGHT
    plot_h = height - _TOP - _BOTTOM
    top = max([*values, 0]) or 1
    step = plot_w / max(len(values), 1)
    bar_w = max(step * 0.7, 1)
    total = sum(values)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="{escape(css_class)}" '
        f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
        f'aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
        f"<desc>{escape(title)}: {short(total)} in total over {len(values)} days</desc>",
        f'<text class="chart-title" x="{_LEFT}" y="16">{escape(title)}</text>',
    ]
    for fraction in (0, 0.5, 1):
        y = _TOP + plot_h * (1 - fraction)
        parts.append(
            f'<line class="grid" x1="{_LEFT}" x2="{width - _RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>'
            f'<text class="axis" x="{_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">'
            f"{short(top * fraction)}</text>"
        )
    every = max(1, len(labels) // 7)  # at most ~8 x labels
    for i, (label, value) in enumerate(zip(labels, values, strict=True)):
        h = plot_h * value / top
        x = _LEFT + i * step + (step - bar_w) / 2
        y = _TOP + plot_h - h
        parts.append(
            f'<rect class="bar" x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" height="{h:.1f}">'
            f"<title>{escape(label)}: {value:,.0f}</title></rect>"
        )
        if i % every == 0 or i == len(labels) - 1:
            parts.append(
                f'<text class="axis" x="{x + bar_w / 2:.1f}" y="{height - _BOTTOM + 16}" '
                f'text-anchor="middle">{escape(label)}</text>'
            )
    parts.append("</svg>")
    return Markup("".join(parts))
