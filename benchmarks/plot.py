#!/usr/bin/env python3
"""GFLOP/s against T for the forward attention, from attn_bench's JSON output.

Reads the rows that benchmarks/forward.cpp registers, at batch 1 (H 12, d 64):
  attention/cpu_float/B:1/T:<T>/causal:<c>/threads:<n>   the fused kernel
  unfused/cpu_float/B:1/T:<T>/causal:<c>/threads:1       the stages one after another
  eigen_gemm/attention_flops/B:1/T:<T>/causal:0/threads:1  Eigen GEMMs of the same FLOPs
  roof/fp32_fma/threads:<n>                             the fp32 FMA roof
and draws one panel per mask (not causal, causal): a line per kernel and thread count, the roofs
as horizontal lines. With repetitions it plots the median aggregate where there is one.

    build/release/benchmarks/attn_bench --benchmark_min_time=0.2 \\
      --benchmark_filter='^(roof|attention/cpu_float/B:1/|unfused/cpu_float/|eigen_gemm/attention_flops/)' \\
      --benchmark_out=bench.json --benchmark_out_format=json
    python3 benchmarks/plot.py bench.json -o docs/images/forward_gflops.svg

Needs matplotlib (e.g. python3 -m venv /tmp/plotvenv && /tmp/plotvenv/bin/pip install matplotlib).
"""

import argparse
import json
import re
import statistics
from collections import defaultdict

ROW = re.compile(
    r"^(?P<family>attention/cpu_float|unfused/cpu_float|eigen_gemm/attention_flops)"
    r"/B:(?P<B>\d+)/T:(?P<T>\d+)/causal:(?P<causal>[01])/threads:(?P<threads>\d+)")
ROOF = re.compile(r"^roof/fp32_fma/threads:(?P<threads>\d+)")
LABELS = {
    "attention/cpu_float": "fused attention (attn::cpu)",
    "unfused/cpu_float": "unfused stages",
    "eigen_gemm/attention_flops": "Eigen GEMMs of non-causal attention's FLOPs",
}
COLOURS = {
    "attention/cpu_float": "tab:blue",
    "unfused/cpu_float": "tab:orange",
    "eigen_gemm/attention_flops": "tab:green",
}


def read(path, batch):
    """{(family, causal, threads): {T: GFLOP/s}} and {threads: roof GFLOP/s}."""
    with open(path) as f:
        doc = json.load(f)
    rows = doc["benchmarks"]
    has_median = any(r.get("aggregate_name") == "median" for r in rows)
    samples = defaultdict(list)
    for r in rows:
        if has_median and r.get("aggregate_name") != "median":
            continue
        if not has_median and r.get("run_type", "iteration") != "iteration":
            continue
        name = r.get("run_name", r["name"])
        if "GFLOP/s" not in r:
            continue
        m = ROW.match(name)
        if m and int(m["B"]) == batch:
            key = (m["family"], m["causal"] == "1", int(m["threads"]))
            samples[key, int(m["T"])].append(r["GFLOP/s"])
        m = ROOF.match(name)
        if m:
            samples["roof", int(m["threads"])].append(r["GFLOP/s"])
    series, roofs = defaultdict(dict), {}
    for (key, x), values in samples.items():
        value = statistics.median(values)
        if key == "roof":
            roofs[x] = value
        else:
            series[key][x] = value
    return doc.get("context", {}), series, roofs


def plot(context, series, roofs, batch, machine, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.fonttype"] = "none"  # text stays text: small, searchable SVG
    plt.rcParams["svg.hashsalt"] = "attn"  # the same data gives the same file
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6), sharey=True)
    ts = sorted({t for points in series.values() for t in points})
    for ax, causal in zip(axes, (False, True)):
        for threads, style in ((1, "-"), (2, "--")):
            if threads in roofs:
                ax.axhline(roofs[threads], color="grey", linestyle=style, linewidth=1)
                ax.annotate(f"FMA roof, {threads} thread{'s' if threads > 1 else ''}",
                            (ts[-1] if ts else 1, roofs[threads]), textcoords="offset points",
                            xytext=(0, 3), ha="right", fontsize=8, color="dimgrey")
        for family in LABELS:
            for threads, style, marker in ((1, "-", "o"), (2, "--", "s")):
                # Eigen's GEMMs do the non-causal FLOPs: the same line on both panels, a rate to
                # compare with.
                points = series.get((family, causal and family != "eigen_gemm/attention_flops",
                                     threads))
                if not points:
                    continue
                xs = sorted(points)
                ax.plot(xs, [points[x] for x in xs], style, marker=marker, color=COLOURS[family],
                        label=f"{LABELS[family]}, {threads} thread{'s' if threads > 1 else ''}")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ts, [str(t) for t in ts])
        ax.minorticks_off()
        ax.set_xlabel("T (queries = keys)")
        ax.set_title("causal" if causal else "not causal")
        ax.grid(True, alpha=0.3)
        ax.set_ylim(0, 1.12 * max([*roofs.values(), *(v for p in series.values() for v in p.values())]))
    axes[0].set_ylabel("GFLOP/s (4 B H T² d, halved when causal)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8, frameon=False)
    cpus = context.get("num_cpus")
    note = (f"attn_bench, float, B {batch}, H 12, d 64"
            + (f"; {machine}" if machine else f"; {cpus} CPUs" if cpus else "")
            + (f"; {context['date'][:10]}" if "date" in context else ""))
    fig.suptitle("Forward attention on the CPU: " + note, fontsize=10)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    fig.savefig(out, metadata={"Date": None} if out.endswith(".svg") else None)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", help="attn_bench --benchmark_out=... --benchmark_out_format=json")
    parser.add_argument("-o", "--out", default="forward_gflops.svg", help="image (.svg or .png)")
    parser.add_argument("--batch", type=int, default=1, help="the B of the rows to plot")
    parser.add_argument("--machine", default="", help="what ran it, for the title")
    args = parser.parse_args()
    context, series, roofs = read(args.json, args.batch)
    if not series:
        raise SystemExit(f"{args.json}: no forward attention rows at B {args.batch}")
    plot(context, series, roofs, args.batch, args.machine, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
