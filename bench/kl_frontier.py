#!/usr/bin/env python3
"""One table and one frontier picture from several `kvcomp eval kl --json` runs.

    bench/kl_frontier.py A.json B.json ... [--plot OUT.png] [--title TEXT]

A 32K evaluation takes most of an hour per method on a small machine, so the
methods of one comparison often come from separate runs that share a saved
reference (`eval kl --ref-out FILE` once, then `--ref FILE`). This merges
their rows into one markdown table, sorted by bytes per token, with the
Pareto front (no other row has both fewer bytes and a lower mean KL) marked,
and draws KL mean against bytes per token as `eval kl --plot` does (gnuplot,
logarithmic KL axis, the front as a staircase).

Runs are merged only when they measured the same thing: the same model, text,
context, continuation, windows and prefill chunk, and the same reference
logits (equal reference perplexity in every window). Anything else is refused
with the field that differs: KL against two different references is not one
comparison. (`eval kl --ref` itself refuses a reference file of another
build, ISA or thread count, so the runs that read one file agree on those.)
The table leaves out the seconds, which depend on what else the machine ran."""
import argparse
import json
import math
import subprocess
import sys

SAME = ("model", "text", "ctx", "cont", "batch")


def load(path):
    try:
        with open(path) as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit("%s: %s" % (path, e))
    if not isinstance(d, dict) or d.get("command") != "eval kl":
        sys.exit("%s: not the --json output of `kvcomp eval kl`" % path)
    for key, kind, name in (("windows", list, "a list"), ("methods", list, "a list"),
                            ("reference", dict, "an object")):
        if not isinstance(d.get(key), kind):
            sys.exit("%s: field %s is missing or not %s" % (path, key, name))
    return d


def check_same(first, d, path):
    """Refuse a run that did not measure against the first run's reference."""
    for key in SAME:
        if d.get(key) != first.get(key):
            sys.exit("%s: %s is %r, the first run's is %r" % (path, key, d.get(key), first.get(key)))
    wa = [(w["start"], w["ref_ppl"]) for w in first["windows"]]
    wb = [(w["start"], w["ref_ppl"]) for w in d["windows"]]
    if wa != wb:
        sys.exit("%s: windows (start, reference PPL) %r, the first run's %r: another reference"
                 % (path, wb, wa))


def rows_of(runs):
    """Every method that ran, once; a spec that appears in two runs is refused. A row
    remembers whether its process also computed the reference (its peak RSS then
    includes the f32 reference's cache and logits)."""
    rows, seen = [], {}
    for path, d in runs:
        with_ref = not d["reference"].get("read_from_file", False)
        for m in d["methods"]:
            if not m.get("ok"):
                print("%s: %s failed (%s), left out" % (path, m["spec"], m.get("error", "")),
                      file=sys.stderr)
                continue
            if m["spec"] in seen:
                sys.exit("%s: %s is also in %s; keep one" % (path, m["spec"], seen[m["spec"]]))
            seen[m["spec"]] = path
            rows.append(dict(m, with_ref=with_ref))
    rows.sort(key=lambda m: m["cache"]["bytes_per_token"])
    return rows


def pareto(rows):
    """True where no other row has fewer or equal bytes and KL, one of them strictly."""
    pts = [(m["cache"]["bytes_per_token"], m["kl"]["mean"]) for m in rows]
    return [not any(bx <= ax and by <= ay and (bx < ax or by < ay) for bx, by in pts)
            for ax, ay in pts]


def table(runs, rows, front):
    ref = runs[0][1]["reference"]
    print("| method | bytes/tok | bits/el | x f16 | read fraction | KL mean | KL p99 | KL max "
          "| same top % | PPL ratio | peak RSS GiB | front |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|")
    for m, f in zip(rows, front):
        c, k = m["cache"], m["kl"]
        rss = "%.2f%s" % (m["peak_rss_bytes"] / 2**30, " (+ref)" if m["with_ref"] else "")
        print("| %s | %.0f | %.2f | %.2f | %.3f | %.4g | %.4g | %.4g | %.2f | %.4f | %s | %s |" % (
            m["spec"], c["bytes_per_token"], c["bits_per_element"], c["ratio_vs_f16"],
            c["read_fraction"], k["mean"], k["p99"], k["max"], 100 * m["same_top"],
            m["ppl_ratio"], rss, "yes" if f else ""))
    print("\n(reference %s: PPL %.3f over %d window(s); %d run(s))"
          % (ref["spec"], ref["ppl"], len(runs[0][1]["windows"]), len(runs)))
    if any(m["with_ref"] for m in rows):
        print("(+ref: the process also computed the reference, so its peak RSS includes the "
              "reference's; the others read it from a file)")


def quoted(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


# Label placement as src/eval/plot_labels.c does it, in the geometry of
# src/eval/plot.c (a 960x640 canvas of about 128 x 40 character cells, fixed
# margins, fixed ranges), so that the two draw the same picture.
SPOTS = [(1, 0.8, False), (1, -0.8, False), (-1, 0.8, True), (-1, -0.8, True), (1, 0, False),
         (-1, 0, True), (1, 1.8, False), (1, -1.8, False), (-1, 1.8, True), (-1, -1.8, True)]
MARGINS = (11, 3, 3, 4)  # left, right, top, bottom, in cells
AREA = (128 - MARGINS[0] - MARGINS[1], 40 - MARGINS[2] - MARGINS[3])
KEY = (0, 0, 22, 3)  # the key, bottom left


def label_box(x, y, n, spot):
    dx, dy, right = spot
    ax, ay = x + dx, y + dy
    return (ax - n, ay - 0.5, ax, ay + 0.5) if right else (ax, ay - 0.5, ax + n, ay + 0.5)


def overlap(a, b):
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    return w * h if w > 0 and h > 0 else 0


def place_labels(cells, lens):
    """The spot of each label: the first free one of SPOTS, else the least covered."""
    w, h = AREA
    points = [(x - 0.6, y - 0.6, x + 0.6, y + 0.6) for x, y in cells]
    placed = []
    for (x, y), n in zip(cells, lens):
        best, least = SPOTS[0], None
        for spot in SPOTS:
            b = label_box(x, y, n, spot)
            c = (b[2] - b[0]) * (b[3] - b[1]) - overlap(b, (0, 0, w, h)) + overlap(b, KEY)
            c += sum(overlap(b, o) for o in placed) + sum(overlap(b, o) for o in points)
            if least is None or c < least:
                best, least = spot, c
            if c == 0:
                break
        placed.append(label_box(x, y, n, best))
        yield best


def frame(pts):
    """x and y ranges as src/eval/plot.c fixes them for a logarithmic y axis."""
    xs, ys = [x for x, _ in pts], [math.log10(y) for _, y in pts]
    span = max(xs) - min(xs) or (abs(max(xs)) * 0.1 or 1)
    x0 = min(xs) - 0.08 * span
    x0 = 0 if x0 < 0 <= min(xs) else x0
    pad = 0.1 * max(max(ys) - min(ys), 1)
    return x0, max(xs) + 0.25 * span, math.floor(min(ys) - pad), math.ceil(max(ys) + pad)


def plot(path, title, rows, front):
    shown = sorted(((m, f) for m, f in zip(rows, front) if m["kl"]["mean"] > 0),  # log axis: no 0
                   key=lambda r: r[0]["cache"]["bytes_per_token"])
    if not shown:
        sys.exit("--plot %s: no method with a KL above 0 (the KL axis is logarithmic)" % path)
    pts = [(m["cache"]["bytes_per_token"], m["kl"]["mean"]) for m, _ in shown]
    x0, x1, d0, d1 = frame(pts)
    cells = [((x - x0) / (x1 - x0) * AREA[0], (math.log10(y) - d0) / (d1 - d0) * AREA[1])
             for x, y in pts]
    labels = ["set label %d %s at first %.9g, first %.9g offset char %g,%g %s noenhanced front"
              % (i + 1, quoted(m["spec"]), x, y, dx, dy, "right" if right else "left")
              for i, ((m, _), (x, y), (dx, dy, right))
              in enumerate(zip(shown, pts, place_labels(cells, [len(m["spec"]) for m, _ in shown])))]
    stairs = ["%.9g %.9g" % p for p, (_, f) in zip(pts, shown) if f]
    script = [
        "set terminal pngcairo size 960,640 enhanced font 'Sans,11'",
        "set output " + quoted(path),
        "set title %s noenhanced" % quoted(title),
        "set xlabel 'bytes per token (whole cache, all layers)' noenhanced",
        "set ylabel 'KL mean against the reference (nats)' noenhanced",
        "set grid", "set logscale y", "set key bottom left Left reverse",
        "set lmargin %g\nset rmargin %g\nset tmargin %g\nset bmargin %g" % MARGINS,
        "set xrange [%.9g:%.9g]" % (x0, x1), "set yrange [%.9g:%.9g]" % (10 ** d0, 10 ** d1),
        *labels,
        "$data << EOD", *["%.9g %.9g" % p for p in pts], "EOD",
        "$front << EOD", *stairs, "EOD",
        "plot $data using 1:2 with points pt 7 ps 1.5 lc rgb '#1f77b4' title 'method', \\",
        "     $front using 1:2 with steps lw 2 lc rgb '#d62728' title 'Pareto front', \\",
        "     $front using 1:2 with points pt 7 ps 1.8 lc rgb '#d62728' notitle",
    ]
    try:
        subprocess.run(["gnuplot"], input="\n".join(script) + "\n", text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit("--plot %s: gnuplot failed: %s" % (path, e))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", metavar="RUN.json", help="`kvcomp eval kl --json` output")
    ap.add_argument("--plot", metavar="OUT.png", help="draw KL mean against bytes per token")
    ap.add_argument("--title", help="the picture's title")
    a = ap.parse_args()
    runs = [(p, load(p)) for p in a.runs]
    for path, d in runs[1:]:
        check_same(runs[0][1], d, path)
    rows = rows_of(runs)
    front = pareto(rows)
    table(runs, rows, front)
    if a.plot:
        d = runs[0][1]
        plot(a.plot, a.title or "eval kl: %s, %d tokens of context, %d scored"
             % (d["model_name"], d["ctx"], d["cont"] * len(d["windows"])), rows, front)


if __name__ == "__main__":
    main()
