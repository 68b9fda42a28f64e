"""Charts as SVG text: axes, ticks, bars, lines, dots, spans and legends, laid out in pixels.

The report's charts (tracekit.report.charts) are drawn with this, not with a plotting library: no
import, no font cache, no text layout engine, the same bytes for the same data. A ``Figure`` holds
panels (``Axes``); ``Figure.svg()`` returns the document. Every axes group carries its scales as
``data-x`` / ``data-y`` ("lin" or "log", the data domain, the pixel range) so the plotted values can
be read back from the marks' coordinates (tests do); every series is a ``<g class="series">`` with
its label in ``data-label``.

Text is measured by an estimate (0.62 of the font size per character: DejaVu Sans digits): margins are sized from it.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tracekit.errors import visible

FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"
TEXT = "#222222"
FRAME = "#333333"


def esc(text: str) -> str:
    """Text for an SVG/XML attribute or element: control characters, NUL and lone surrogates (which no
    XML document may hold) written as visible escapes, then XML-escaped."""
    return html.escape(visible(text), quote=True)


def text_width(text: str, size: float) -> float:
    return 0.62 * size * len(str(text))


def num(v: float) -> str:
    """A pixel coordinate: two decimals, no trailing zeros."""
    s = f"{v:.2f}".rstrip("0").rstrip(".")
    return "0" if s in ("-0", "") else s


@dataclass
class Scale:
    """Data to pixels along one axis: linear or log10 over ``lo``..``hi``, onto ``p0``..``p1``."""

    kind: str
    lo: float
    hi: float
    p0: float = 0.0
    p1: float = 1.0

    def __post_init__(self) -> None:
        self.lo, self.hi = float(self.lo), float(self.hi)  # NumPy scalars would print as np.float64(...)

    def _t(self, v: float) -> float:
        return math.log10(v) if self.kind == "log" else v

    def __call__(self, v: float) -> float:
        a, b = self._t(self.lo), self._t(self.hi)
        if self.kind == "log" and v <= 0:
            return self.p0
        return self.p0 + (self._t(v) - a) / (b - a) * (self.p1 - self.p0) if b != a else (self.p0 + self.p1) / 2

    def attr(self) -> str:
        return f"{self.kind} {self.lo!r} {self.hi!r} {self.p0!r} {self.p1!r}"

    def ticks(self, max_ticks: int) -> list[tuple[float, str]]:
        if self.kind == "log":
            return _log_ticks(self.lo, self.hi)
        return _lin_ticks(self.lo, self.hi, max_ticks)


def _lin_ticks(lo: float, hi: float, max_ticks: int) -> list[tuple[float, str]]:
    span = hi - lo
    if not span > 0 or not math.isfinite(span):
        return [(lo, _fmt(lo, 1.0))]
    raw = span / max(max_ticks - 1, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9)
    out = []
    k = first
    while k * step <= hi + step * 1e-9:
        v = k * step
        out.append((v, _fmt(v, step)))
        k += 1
    return out


def _fmt(v: float, step: float) -> str:
    if abs(v) < step * 1e-9:
        v = 0.0
    decimals = max(0, -math.floor(math.log10(step) + 1e-9)) if step < 1 else 0
    if step < 1 and round(step * 10 ** decimals, 6) % 1:
        decimals += 1
    if abs(v) >= 1e6 and decimals == 0:
        return f"{v:.3g}"
    return f"{v:,.{decimals}f}"


def _log_ticks(lo: float, hi: float) -> list[tuple[float, str]]:
    a, b = math.floor(math.log10(lo) + 1e-9), math.ceil(math.log10(hi) - 1e-9)
    every = max(1, math.ceil((b - a + 1) / 9))
    return [(10.0 ** k, f"10^{k}") for k in range(a, b + 1) if k % every == 0 and lo <= 10.0 ** k * (1 + 1e-9)
            and 10.0 ** k <= hi * (1 + 1e-9)]


def padded(lo: float, hi: float, kind: str = "lin", margin: float = 0.05) -> tuple[float, float]:
    """A data range with ``margin`` of its width added on each side (log: in decades); a single
    value gets a range around it."""
    if kind == "log":
        a, b = math.log10(lo), math.log10(hi)
        if b == a:
            a, b = a - 1, b + 1
        d = (b - a) * margin
        return 10 ** (a - d), 10 ** (b + d)
    if hi == lo:
        d = abs(lo) * 0.05 or 1.0
        return lo - d, hi + d
    d = (hi - lo) * margin
    return lo - d, hi + d


@dataclass
class Axes:
    """One panel: its box in pixels, its scales, and what is drawn in it (SVG fragments)."""

    x0: float
    y0: float
    w: float
    h: float
    x: Scale
    y: Scale
    marks: list[str] = field(default_factory=list)
    legend: list[tuple[str, str, str]] = field(default_factory=list)  # (label, colour, kind)
    title: str = ""
    xlabel: str = ""
    ylabel: str = ""
    ylabel_horizontal: bool = False
    xticks: bool = True
    yticks: list[tuple[float, str]] | None = None  # categories: (value, label)
    grid: bool = False
    legend_at: str = "upper right"  # or "below"
    legend_cols: int = 1
    font: float = 13.0

    def __post_init__(self) -> None:
        self.place(self.x0, self.w)

    def place(self, x0: float, w: float) -> None:
        """Put the panel at ``x0`` with width ``w`` (before any mark is added: marks are in pixels)."""
        self.x0, self.w = x0, w
        self.x.p0, self.x.p1 = self.x0, self.x0 + self.w
        self.y.p0, self.y.p1 = self.y0 + self.h, self.y0

    # --- marks (data coordinates) ---

    def series(self, label: str, body: str, **data: Any) -> None:
        extra = "".join(f' data-{k.replace("_", "-")}="{esc(v)}"' for k, v in data.items())
        self.marks.append(f'<g class="series" data-label="{esc(label)}"{extra}>{body}</g>')

    def rects(self, spans: Sequence[tuple[float, float, float, float]], colour: str, alpha: float = 1.0,
              values: Sequence[float] | None = None) -> str:
        """Rectangles (x0, x1, y0, y1) in data coordinates; ``values``: each one's data-v."""
        op = f' fill-opacity="{alpha:g}"' if alpha < 1 else ""
        out = []
        for i, (a, b, c, d) in enumerate(spans):
            px0, px1 = sorted((self.x(a), self.x(b)))
            py0, py1 = sorted((self.y(c), self.y(d)))
            v = f' data-v="{float(values[i])!r}"' if values is not None else ""
            out.append(f'<rect x="{num(px0)}" y="{num(py0)}" width="{num(px1 - px0)}" height="{num(py1 - py0)}"{v}/>')
        return f'<g fill="{colour}"{op}>{"".join(out)}</g>'

    def vspans(self, spans: Sequence[tuple[float, float, str]], alpha: float) -> str:
        """Full-height spans (x0, x1, colour)."""
        out = []
        for a, b, colour in spans:
            px0, px1 = sorted((self.x(a), self.x(b)))
            out.append(f'<rect x="{num(px0)}" y="{num(self.y0)}" width="{num(px1 - px0)}" height="{num(self.h)}" '
                       f'fill="{colour}"/>')
        return f'<g class="spans" fill-opacity="{alpha:g}">{"".join(out)}</g>'

    def line(self, xs: Sequence[float], ys: Sequence[float], colour: str, width: float = 1.5, dash: str = "",
             dots: float = 0.0) -> str:
        pts = [(self.x(a), self.y(b)) for a, b in zip(xs, ys, strict=True) if _finite(a) and _finite(b)]
        if not pts:
            return ""
        d = "M" + " L".join(f"{num(px)} {num(py)}" for px, py in pts)
        da = f' stroke-dasharray="{dash}"' if dash else ""
        out = f'<path class="line" d="{d}" fill="none" stroke="{colour}" stroke-width="{width:g}"{da}/>'
        if dots:
            out += self.dots(xs, ys, colour, dots)
        return out

    def dots(self, xs: Sequence[float], ys: Sequence[float], colour: str, r: float, alpha: float = 1.0) -> str:
        """Round dots of radius ``r`` px: one path of zero-length round-capped segments."""
        pts = [(self.x(a), self.y(b)) for a, b in zip(xs, ys, strict=True) if _finite(a) and _finite(b)]
        if not pts:
            return ""
        d = "".join(f"M{num(px)} {num(py)}h0" for px, py in pts)
        op = f' stroke-opacity="{alpha:g}"' if alpha < 1 else ""
        return (f'<path class="dots" d="{d}" stroke="{colour}" stroke-width="{2 * r:g}" stroke-linecap="round"'
                f'{op} fill="none"/>')

    def vline(self, x: float, colour: str, dash: str = "", width: float = 1.0) -> str:
        px = num(self.x(x))
        da = f' stroke-dasharray="{dash}"' if dash else ""
        return f'<line x1="{px}" x2="{px}" y1="{num(self.y0)}" y2="{num(self.y0 + self.h)}" stroke="{colour}" ' \
               f'stroke-width="{width:g}"{da}/>'

    def text(self, x: float, y: float, s: str, colour: str = TEXT, size: float = 12.0, anchor: str = "middle") -> str:
        return (f'<text x="{num(self.x(x))}" y="{num(self.y(y) + size * 0.35)}" font-size="{size:g}" '
                f'text-anchor="{anchor}" fill="{colour}">{esc(s)}</text>')

    # --- the frame ---

    def render(self, clip_id: str) -> str:
        f = self.font
        parts = [f'<g class="axes" data-x="{self.x.attr()}" data-y="{self.y.attr()}">']
        parts.append(f'<clipPath id="{clip_id}"><rect x="{num(self.x0)}" y="{num(self.y0)}" width="{num(self.w)}" '
                     f'height="{num(self.h)}"/></clipPath>')
        xt = self.x.ticks(max(2, int(self.w // 80))) if self.xticks else []
        yt = self.yticks if self.yticks is not None else self.y.ticks(max(4, int(self.h // 22)))
        xt = [(v, s) for v, s in xt if self.x.lo - 1e-12 * abs(self.x.lo) <= v <= self.x.hi + 1e-12 * abs(self.x.hi)]
        yt = [(v, s) for v, s in yt if min(self.y.lo, self.y.hi) <= v <= max(self.y.lo, self.y.hi)]
        if self.grid:
            g = [f'<line x1="{num(self.x(v))}" x2="{num(self.x(v))}" y1="{num(self.y0)}" y2="{num(self.y0 + self.h)}"/>'
                 for v, _ in xt]
            g += [f'<line x1="{num(self.x0)}" x2="{num(self.x0 + self.w)}" y1="{num(self.y(v))}" y2="{num(self.y(v))}"/>'
                  for v, _ in yt]
            parts.append(f'<g stroke="#b0b0b0" stroke-width="0.5" stroke-opacity="0.6">{"".join(g)}</g>')
        parts.append(f'<g clip-path="url(#{clip_id})">{"".join(self.marks)}</g>')
        parts.append(f'<rect x="{num(self.x0)}" y="{num(self.y0)}" width="{num(self.w)}" height="{num(self.h)}" '
                     f'fill="none" stroke="{FRAME}" stroke-width="0.8"/>')
        bottom = self.y0 + self.h
        ticks = []
        for v, s in xt:
            px = num(self.x(v))
            ticks.append(f'<line x1="{px}" x2="{px}" y1="{num(bottom)}" y2="{num(bottom + 4)}"/>')
            ticks.append(_label(self.x(v), bottom + 6 + f, s, f, "middle"))
        for v, s in yt:
            py = self.y(v)
            ticks.append(f'<line x1="{num(self.x0 - 4)}" x2="{num(self.x0)}" y1="{num(py)}" y2="{num(py)}"/>')
            ticks.append(_label(self.x0 - 6, py + f * 0.35, s, f, "end"))
        parts.append(f'<g class="ticks" stroke="{FRAME}" stroke-width="0.8" font-size="{f:g}" fill="{TEXT}">'
                     f'{"".join(ticks)}</g>')
        if self.title:
            parts.append(f'<text class="title" x="{num(self.x0 + self.w / 2)}" y="{num(self.y0 - 8)}" '
                         f'font-size="{f + 2:g}" text-anchor="middle" fill="{TEXT}">{esc(self.title)}</text>')
        if self.xlabel:
            parts.append(f'<text class="xlabel" x="{num(self.x0 + self.w / 2)}" y="{num(bottom + 2 * f + 14)}" '
                         f'font-size="{f:g}" text-anchor="middle" fill="{TEXT}">{esc(self.xlabel)}</text>')
        if self.ylabel:
            if self.ylabel_horizontal:
                parts.append(f'<text class="ylabel" x="{num(self.x0 - 14 - self.ytick_width())}" '
                             f'y="{num(self.y0 + self.h / 2 + 3)}" font-size="{f - 2:g}" text-anchor="end" '
                             f'fill="{TEXT}">{esc(self.ylabel)}</text>')
            else:
                cx, cy = self.x0 - 14 - self.ytick_width(), self.y0 + self.h / 2
                parts.append(f'<text class="ylabel" transform="translate({num(cx)} {num(cy)}) rotate(-90)" '
                             f'font-size="{f:g}" text-anchor="middle" fill="{TEXT}">{esc(self.ylabel)}</text>')
        if self.legend:
            parts.append(self._legend())
        parts.append("</g>")
        return "".join(parts)

    def ytick_width(self) -> float:
        yt = self.yticks if self.yticks is not None else self.y.ticks(max(4, int(self.h // 22)))
        return max((text_width(_plain(s), self.font) for _, s in yt), default=0.0)

    def legend_size(self) -> tuple[float, float]:
        fs = self.font - 2
        cols = max(1, self.legend_cols)
        rows = math.ceil(len(self.legend) / cols)
        colw = max((text_width(lab, fs) for lab, _, _ in self.legend), default=0.0) + 30
        return colw * cols + 8, rows * (fs + 5) + 8

    def _legend(self) -> str:
        fs = self.font - 2
        cols = max(1, self.legend_cols)
        w, h = self.legend_size()
        colw = (w - 8) / cols
        if self.legend_at == "below":
            lx, ly = self.x0 + (self.w - w) / 2, self.y0 + self.h + 2 * self.font + 26
        elif self.legend_at == "lower right":
            lx, ly = self.x0 + self.w - w - 6, self.y0 + self.h - h - 6
        elif self.legend_at == "upper left":
            lx, ly = self.x0 + 6, self.y0 + 6
        else:
            lx, ly = self.x0 + self.w - w - 6, self.y0 + 6
        out = [f'<g class="legend" font-size="{fs:g}" fill="{TEXT}">',
               f'<rect x="{num(lx)}" y="{num(ly)}" width="{num(w)}" height="{num(h)}" fill="white" '
               f'fill-opacity="0.8" stroke="#cccccc"/>']
        for i, (label, colour, kind) in enumerate(self.legend):
            cx = lx + 4 + (i % cols) * colw
            cy = ly + 4 + (i // cols) * (fs + 5) + fs / 2 + 1
            if kind == "line":
                out.append(f'<line x1="{num(cx)}" x2="{num(cx + 20)}" y1="{num(cy)}" y2="{num(cy)}" stroke="{colour}" '
                           'stroke-width="1.5"/>')
            elif kind == "dot":
                out.append(f'<circle cx="{num(cx + 10)}" cy="{num(cy)}" r="3.5" fill="{colour}"/>')
            else:
                out.append(f'<rect x="{num(cx)}" y="{num(cy - fs / 2 + 1)}" width="20" height="{num(fs - 2)}" '
                           f'fill="{colour}"/>')
            out.append(f'<text x="{num(cx + 25)}" y="{num(cy + fs * 0.35)}">{esc(label)}</text>')
        out.append("</g>")
        return "".join(out)


def _finite(v: Any) -> bool:
    try:
        return math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


def _plain(label: str) -> str:
    return label.replace("^", "")


def _label(x: float, y: float, s: str, size: float, anchor: str) -> str:
    """A tick label; ``10^k`` drawn as 10 with a superscript k."""
    if s.startswith("10^"):
        return (f'<text x="{num(x)}" y="{num(y)}" text-anchor="{anchor}" stroke="none">10<tspan dy="-{size * 0.4:g}" '
                f'font-size="{size * 0.75:g}">{esc(s[3:])}</tspan></text>')
    return f'<text x="{num(x)}" y="{num(y)}" text-anchor="{anchor}" stroke="none">{esc(s)}</text>'


@dataclass
class Figure:
    """Panels on a white page of ``width`` x ``height`` pixels."""

    width: float
    height: float
    axes: list[Axes] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # extra SVG fragments (figure text)

    def svg(self, name: str) -> str:
        body = "".join(ax.render(f"{name}-clip-{i}") for i, ax in enumerate(self.axes))
        w, h = math.ceil(self.width), math.ceil(self.height)
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
                f'font-family="{FONT}" class="chart" data-chart="{esc(name)}">'
                f'<rect width="100%" height="100%" fill="white"/>{body}{"".join(self.notes)}</svg>\n')
