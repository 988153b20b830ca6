#!/usr/bin/env python3
"""Plots of bench/fidelity.sh's runs, as SVG (no plotting library needed).

Usage: bench/fidelity-plot.py RUN_DIR OUT_DIR "60 90"
  RUN_DIR holds report-{with,without}-FRACTION.json (the surge reports) and
  client-{with,without}-{3g,56k}.txt (one load time in seconds a line).
Writes OUT_DIR/server.svg (completed requests/s against clients, log2 axis) and
OUT_DIR/client.svg (cumulative share of page loads against load time).
"""
import json
import math
import os
import sys

WIDTH, HEIGHT = 680, 360
LEFT, RIGHT, TOP, BOTTOM = 64, 210, 34, 48
# Blue with negotiation, red without; dark for the last fraction (or the slow link).
COLOURS = {("with", True): "#1f77b4", ("without", True): "#d62728",
           ("with", False): "#6baed6", ("without", False): "#fc9272"}


def nice_ticks(top, count=5):
    """Round tick values from 0 to at least `top`."""
    raw = top / count
    magnitude = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    return [step * i for i in range(count + 2) if step * (i - 1) < top]


def chart(path, title, xlabel, ylabel, series, xticks, xpos, marker=None):
    """series: [(label, colour, [(x, y), ...])]; xpos maps x to [0, 1]; marker, an
    (x, label) drawn as a dashed vertical line."""
    ys = [y for _, _, pts in series for _, y in pts] or [1]
    yticks = nice_ticks(max(ys))
    ymax = yticks[-1]
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    px = lambda x: LEFT + plot_w * xpos(x)
    py = lambda y: TOP + plot_h * (1 - y / ymax)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
           'font-family="DejaVu Sans, sans-serif" font-size="12">',
           f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
           f'<text x="{LEFT + plot_w / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>']
    for y in yticks:
        out.append(f'<line x1="{LEFT}" y1="{py(y):.1f}" x2="{LEFT + plot_w}" y2="{py(y):.1f}" stroke="#e0e0e0"/>')
        out.append(f'<text x="{LEFT - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{y:g}</text>')
    for x in xticks:
        out.append(f'<text x="{px(x):.1f}" y="{TOP + plot_h + 16}" text-anchor="middle">{x:g}</text>')
    out.append(f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{LEFT + plot_w}" y2="{TOP + plot_h}" stroke="black"/>')
    out.append(f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + plot_h}" stroke="black"/>')
    out.append(f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 10}" text-anchor="middle">{xlabel}</text>')
    mid = TOP + plot_h / 2
    out.append(f'<text x="16" y="{mid}" text-anchor="middle" transform="rotate(-90 16 {mid})">{ylabel}</text>')
    if marker:
        x, label = marker
        out.append(f'<line x1="{px(x):.1f}" y1="{TOP}" x2="{px(x):.1f}" y2="{TOP + plot_h}" '
                   'stroke="#555" stroke-dasharray="4 3"/>')
        out.append(f'<text x="{px(x) + 4:.1f}" y="{TOP + 12}" fill="#555">{label}</text>')
    for n, (label, colour, pts) in enumerate(series):
        points = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        out.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2"/>')
        out.extend(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}"/>' for x, y in pts)
        y = TOP + 14 + 20 * n
        x = LEFT + plot_w + 14
        out.append(f'<line x1="{x}" y1="{y - 4}" x2="{x + 22}" y2="{y - 4}" stroke="{colour}" stroke-width="3"/>')
        out.append(f'<text x="{x + 28}" y="{y}">{label}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    run, out, fractions = sys.argv[1], sys.argv[2], sys.argv[3].split()
    os.makedirs(out, exist_ok=True)
    series = []
    for fraction in fractions:
        for arm in ("with", "without"):
            path = os.path.join(run, f"report-{arm}-{fraction}.json")
            if os.path.exists(path):
                steps = json.load(open(path))["steps"]
                pts = [(s["clients"], s["requests_per_second"]) for s in steps]
                label = f"{fraction}% negotiable: {arm}"
                series.append((label, COLOURS[arm, fraction == fractions[-1]], pts))
    if series:
        clients = sorted({x for _, _, pts in series for x, _ in pts})
        top = math.log2(max(clients)) or 1
        chart(os.path.join(out, "server.svg"), "Completed requests/s behind a 1.5 Mbit/s egress",
              "clients (log scale)", "requests/s", series, clients, lambda x: math.log2(x) / top)
    series = []
    for kind in ("3g", "56k"):
        for arm in ("with", "without"):
            path = os.path.join(run, f"client-{arm}-{kind}.txt")
            if os.path.exists(path):
                times = sorted(float(line) for line in open(path) if line.strip())
                pts = [(t, (i + 1) / len(times)) for i, t in enumerate(times)]
                series.append((f"{kind} link: {arm}", COLOURS[arm, kind == "56k"], pts))
    if series:
        xticks = nice_ticks(max(x for _, _, pts in series for x, _ in pts))
        chart(os.path.join(out, "client.svg"), "Page load times over slow links",
              "seconds", "share of loads", series, xticks, lambda x: x / xticks[-1],
              marker=(3, "3 s target"))


if __name__ == "__main__":
    main()
