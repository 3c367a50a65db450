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


def label_sides(pts):
    """Above (True) or below for each point's label: of two points whose
    bytes are within 5% of the axis, the lower one's label goes below it, so
    that each label sits next to its own point; the rest alternate."""
    xs = [x for x, _ in pts]
    near = 0.05 * (max(xs) - min(xs) or 1)
    above = [i % 2 == 0 for i in range(len(pts))]
    for i in range(len(pts) - 1):
        (xa, ya), (xb, yb) = pts[i], pts[i + 1]
        if xb - xa <= near:
            above[i], above[i + 1] = ya >= yb, yb > ya
    return above


def plot(path, title, rows, front):
    shown = [(m, f) for m, f in zip(rows, front) if m["kl"]["mean"] > 0]  # a log axis: no KL 0
    if not shown:
        sys.exit("--plot %s: no method with a KL above 0 (the KL axis is logarithmic)" % path)
    pts = [(m["cache"]["bytes_per_token"], m["kl"]["mean"]) for m, _ in shown]
    lines = ["%.9g %.9g %s" % (x, y, quoted(m["spec"])) for (x, y), (m, _) in zip(pts, shown)]
    above = label_sides(pts)
    stairs = ["%.9g %.9g" % p for p, (_, f) in zip(pts, shown) if f]
    script = [
        "set terminal pngcairo size 960,640 enhanced font 'Sans,11'",
        "set output " + quoted(path),
        "set title %s noenhanced" % quoted(title),
        "set xlabel 'bytes per token (whole cache, all layers)' noenhanced",
        "set ylabel 'KL mean against the reference (nats)' noenhanced",
        "set grid", "set logscale y", "set key top right",
        "set offsets graph 0.08, graph 0.2, graph 0.1, graph 0.1",
        "$data << EOD", *lines, "EOD",
        "$above << EOD", *[l for l, a in zip(lines, above) if a], "EOD",
        "$below << EOD", *[l for l, a in zip(lines, above) if not a], "EOD",
        "$front << EOD", *stairs, "EOD",
        "plot $data using 1:2 with points pt 7 ps 1.5 lc rgb '#1f77b4' title 'method', \\",
        "     $front using 1:2 with steps lw 2 lc rgb '#d62728' title 'Pareto front', \\",
        "     $front using 1:2 with points pt 7 ps 1.8 lc rgb '#d62728' notitle",
    ]
    # labels from the non-empty blocks only (gnuplot warns about an empty one)
    if any(above):
        script[-1] += ", \\\n     $above using 1:2:3 with labels noenhanced offset char 1,0.8 left notitle"
    if not all(above):
        script[-1] += ", \\\n     $below using 1:2:3 with labels noenhanced offset char 1,-0.8 left notitle"
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
