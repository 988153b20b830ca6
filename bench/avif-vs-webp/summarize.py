#!/usr/bin/env python3
"""Tables from avif-vs-webp's CSV (bench/avif-vs-webp.sh).

1. Encode CPU per megapixel, per encoder and speed (median over images and
   qualities, and over the qualities that match ladder rungs).
2. The WebP ladder as crates/fidelity/src/image.rs makes it (qualities 85, 75, 65, 55,
   45, 35, each rung <= 70% of the bytes of the one above, the first of the
   original's), its quality-only rungs (rungs that need a resize are left out: both
   encoders would get the same smaller pixels), and for each the AVIF bytes at the
   same SSIMULACRA2 score (and at the same SSIM, and PSNR) at each speed: log(bytes)
   interpolated linearly between the two AVIF sweep qualities whose scores bracket
   the WebP rung's. A rung whose score no AVIF quality in the sweep reaches is
   counted apart (not in the ratio).
3. The same ratio over every WebP sweep point (q90..10), not only ladder rungs.
4. What a 6-rung ladder costs per megapixel (8 encodes, as main's WebP ladders take,
   at the mean CPU of the rung-matching qualities), and wall seconds of the
   background maker at cpu_share 0.5 (its work plus an equal pause).
"""

import csv
import math
import statistics
import sys
from collections import defaultdict

LADDER_QUALITIES = [85, 75, 65, 55, 45, 35]
STEP = 0.7
CPU_SHARE = 0.5


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def load(path):
    rows = list(csv.DictReader(open(path)))
    images = {}
    for r in rows:
        img = images.setdefault(
            r["image"],
            {
                "mp": int(r["width"]) * int(r["height"]) / 1e6,
                "size": f'{r["width"]}×{r["height"]}',
                "format": r["original_format"],
                "original": int(r["original_bytes"]),
                "webp": {},
                "avif": defaultdict(dict),
            },
        )
        point = {
            "q": int(r["quality"]),
            "bytes": int(r["bytes"]),
            "cpu": float(r["cpu_ms"]),
            "ssimulacra2": float(r["ssimulacra2"]),
            "ssim": float(r["ssim"]),
            "psnr": float(r["psnr"]),
        }
        if r["codec"] == "webp":
            img["webp"][point["q"]] = point
        else:
            img["avif"][int(r["speed"])][point["q"]] = point
    return images


def ladder(img):
    """Main's walk: returns the quality-only rungs and the encodes they took."""
    rungs, encodes, qi, previous = [], 0, 0, img["original"]
    for _ in range(6):
        target = previous * STEP
        while True:
            p = img["webp"][LADDER_QUALITIES[qi]]
            encodes += 1
            if p["bytes"] <= target:
                rungs.append(p)
                previous = p["bytes"]
                break
            if qi + 1 < len(LADDER_QUALITIES):
                qi += 1
            else:
                return rungs, encodes  # main would resize from here on
    return rungs, encodes


def at_equal(avif_points, metric, value):
    """AVIF (bytes, cpu) at `metric` == value, interpolated between the two sweep
    qualities that bracket it; None outside the sweep."""
    pts = sorted(avif_points.values(), key=lambda p: p["q"])
    for lo, hi in zip(pts, pts[1:]):
        a, b = lo[metric], hi[metric]
        if min(a, b) <= value <= max(a, b) and a != b:
            t = (value - a) / (b - a)
            log_bytes = math.log(lo["bytes"]) + t * (math.log(hi["bytes"]) - math.log(lo["bytes"]))
            cpu = lo["cpu"] + t * (hi["cpu"] - lo["cpu"])
            return math.exp(log_bytes), cpu
    return None


def reach(avif_points, metric, value):
    """'above' when every AVIF sweep point scores below value, 'below' when above."""
    scores = [p[metric] for p in avif_points.values()]
    return "above" if value > max(scores) else "below" if value < min(scores) else "inside"


METRICS = ("ssimulacra2", "ssim", "psnr")


def main(path):
    images = load(path)
    speeds = sorted({s for img in images.values() for s in img["avif"]}, reverse=True)

    print("## Images and WebP rungs\n")
    print("| image | pixels | original | quality-only WebP rungs (quality: % of original, SSIMULACRA2) | encodes |")
    print("|---|---|---|---|---|")
    ladders = {}
    for name, img in images.items():
        rungs, encodes = ladder(img)
        ladders[name] = (rungs, encodes)
        desc = ", ".join(
            f'q{p["q"]}: {100 * p["bytes"] / img["original"]:.1f}% ({p["ssimulacra2"]:.1f})' for p in rungs
        )
        print(f'| `{name}` | {img["size"]} | {img["format"].upper()} {img["original"]:,} B | {desc} | {encodes} |')

    rung_ratio = defaultdict(list)  # (speed, metric, kind) -> ratios
    sweep_ratio = defaultdict(list)
    rung_cpu = defaultdict(list)
    unreached = defaultdict(int)
    print("\n## AVIF bytes / WebP bytes at equal SSIMULACRA2, per image (median over its quality-only rungs)\n")
    print("| image | " + " | ".join(f"speed {s}" for s in speeds) + " |")
    print("|---" * (1 + len(speeds)) + "|")
    for name, img in images.items():
        cells = []
        for s in speeds:
            for metric in METRICS:
                ratios = []
                for p in ladders[name][0]:
                    hit = at_equal(img["avif"][s], metric, p[metric])
                    if hit is None:
                        unreached[(s, metric, reach(img["avif"][s], metric, p[metric]))] += 1
                        continue
                    ratios.append(hit[0] / p["bytes"])
                    if metric == "ssimulacra2":
                        rung_cpu[s].append(hit[1] / img["mp"])
                rung_ratio[(s, metric, img["format"])] += ratios
                rung_ratio[(s, metric, "all")] += ratios
                for p in img["webp"].values():
                    hit = at_equal(img["avif"][s], metric, p[metric])
                    if hit is not None:
                        sweep_ratio[(s, metric)].append(hit[0] / p["bytes"])
                if metric == "ssimulacra2":
                    cells.append(f"{median(ratios):.2f}" if ratios else "—")
        print(f"| `{name}` | " + " | ".join(cells) + " |")

    webp_rung_cpu = [p["cpu"] / img["mp"] for name, img in images.items() for p in ladders[name][0]]
    encodes = median([e for _, e in ladders.values()])
    rungs = sum(len(r) for r, _ in ladders.values())

    print(f"\n## Summary ({len(images)} images, {rungs} quality-only WebP rungs; main's walk took a median of "
          f"{encodes:g} encodes per image for them)\n")
    print("AVIF/WebP bytes at equal quality, median over rungs (over every WebP sweep point q90–10 in brackets):\n")
    print("| encoder | SSIMULACRA2 | photos | illustrations | SSIM | PSNR |")
    print("|---|---|---|---|---|---|")
    for s in speeds:
        r = lambda m, k="all": median(rung_ratio[(s, m, k)])
        print(f"| AVIF speed {s} | {r('ssimulacra2'):.2f} ({median(sweep_ratio[(s, 'ssimulacra2')]):.2f}) "
              f"| {r('ssimulacra2', 'jpeg'):.2f} | {r('ssimulacra2', 'png'):.2f} "
              f"| {r('ssim'):.2f} ({median(sweep_ratio[(s, 'ssim')]):.2f}) "
              f"| {r('psnr'):.2f} ({median(sweep_ratio[(s, 'psnr')]):.2f}) |")
    if unreached:
        print("\nRungs no AVIF sweep quality matches (above: AVIF's best score is below the WebP rung's): "
              + ", ".join(f"speed {s} {m} {w}: {n}" for (s, m, w), n in sorted(unreached.items())))

    print("\nCPU (one thread, user + sys) per megapixel, per encode, at the qualities matching the rungs "
          "(AVIF: interpolated like the bytes); ravif's high qualities cost more:\n")
    print("| encoder | median at rungs | mean at rungs | sweep, quality >= 60 | sweep, quality <= 50 "
          "| 6-rung ladder, 8 encodes at the mean: CPU s/MP | maker wall s/MP at cpu_share 0.5 |")
    print("|---|---|---|---|---|---|---|")

    def row(label, rung_ms, points):
        mean = statistics.fmean(rung_ms)
        hi = [c for q, c in points if q >= 60]
        lo = [c for q, c in points if q <= 50]
        ladder_cpu = 8 * mean / 1e3
        print(f"| {label} | {median(rung_ms):,.0f} | {mean:,.0f} | {median(hi):,.0f} | {median(lo):,.0f} "
              f"| {ladder_cpu:.1f} | {ladder_cpu / CPU_SHARE:.1f} |")

    row("WebP (libwebp `encode_simple`)", webp_rung_cpu,
        [(p["q"], p["cpu"] / img["mp"]) for img in images.values() for p in img["webp"].values()])
    for s in speeds:
        row(f"AVIF ravif speed {s}", rung_cpu[s],
            [(p["q"], p["cpu"] / img["mp"]) for img in images.values() for p in img["avif"][s].values()])


if __name__ == "__main__":
    main(sys.argv[1])
