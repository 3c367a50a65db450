#!/usr/bin/env python3
"""Plot `kvcomp bench attn --json` output: effective GB/s against context length,
one line per method, with the measured read bandwidth (`bench bw`, same run) as
a dashed line. Draws with gnuplot (no Python packages needed).

usage: kvcomp bench attn --json ... > attn.json
       python3 bench/plot_attn.py attn.json attn.png
"""
import json
import subprocess
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    d = json.load(open(sys.argv[1]))
    specs = []
    for r in d["rows"]:
        if r["spec"] not in specs:
            specs.append(r["spec"])
    script = [
        "set terminal pngcairo size 960,640 enhanced font 'Sans,11'",
        f"set output '{sys.argv[2]}'",
        "set title 'bench attn: %d q heads / %d kv heads x %d, %s, %d threads (%s clock)' noenhanced"
        % (d["n_heads"], d["n_kv_heads"], d["head_dim"], d["kv_source"],
           d["machine"]["threads"], d.get("clock", "wall")),
        "set xlabel 'context (tokens)'",
        "set ylabel 'effective GB/s (cache bytes / time per layer step)'",
        "set logscale x 2",
        "set grid",
        "set key bottom right noenhanced box opaque",
        "set yrange [0:*]",
    ]
    plots = []
    for i, s in enumerate(specs):
        rows = [r for r in d["rows"] if r["spec"] == s and r["ok"]]
        script.append(f"$d{i} << EOD")
        script += [f"{r['ctx']} {r['gbps']}" for r in rows]
        script.append("EOD")
        plots.append(f"$d{i} using 1:2 with linespoints lw 2 pt 7 title '{s}'")
    if d.get("bw_gbps"):
        plots.append(f"{d['bw_gbps']} with lines dt 2 lc rgb 'black' title 'bench bw'")
        plots.append(f"{0.8 * d['bw_gbps']} with lines dt 4 lw 2 lc rgb '#d62728' title '80% of bench bw'")
    script.append("plot " + ", \\\n     ".join(plots))
    subprocess.run(["gnuplot"], input="\n".join(script) + "\n", text=True, check=True)


if __name__ == "__main__":
    main()
