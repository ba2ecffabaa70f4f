#!/usr/bin/env python3
"""Joins attn's CUDA benchmark figures (benchmarks/cuda_bench.cu, Google Benchmark's JSON) with
PyTorch's at the same shapes (torch_sdpa_cuda.py's JSON) by benchmark name, writes them as one
JSON and prints them side by side: attn's TFLOP/s, PyTorch's per backend, and attn's over the
fastest PyTorch backend (above 1: attn is faster). Standard library only. Run by
scripts/gpu-check; either input may be missing or partial (its rows are then blank).

    gpu_figures.py --attn cuda_bench.json --torch torch.json --out figures.json
"""
import argparse
import json
import os
import sys

TORCH_BACKENDS = ("flash", "cudnn", "efficient")


def load(path, what):
    if not os.path.exists(path):
        print("gpu_figures: no %s (%s)" % (what, path))
        return None
    try:
        with open(path) as f:
            return json.load(f)
    except ValueError as e:  # cut short mid-write
        print("gpu_figures: %s is not valid JSON (%s): %s" % (what, path, e))
        return None


def attn_rows(bench):
    """name -> {TFLOP/s, us, GB/s} or {error}, from Google Benchmark's JSON."""
    rows = {}
    for b in (bench or {}).get("benchmarks", []):
        if b.get("run_type", "iteration") != "iteration":
            continue  # aggregates of --benchmark_repetitions
        name = b["name"]
        for suffix in ("/manual_time", "/real_time"):
            if name.endswith(suffix):
                name = name[: -len(suffix)]
        if b.get("error_occurred"):
            rows[name] = {"error": b.get("error_message", "error")}
            continue
        scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[b.get("time_unit", "ns")]
        row = {"us": b["real_time"] * scale}
        for counter in ("TFLOP/s", "GB/s"):
            if counter in b:
                row[counter] = b[counter]
        rows[name] = row
    return rows


def torch_rows(peer):
    """name -> backend -> {TFLOP/s, us, GB/s} or {error}."""
    rows = {}
    for r in (peer or {}).get("results", []):
        entry = {"error": r["error"]} if "error" in r else {
            "TFLOP/s": r["TFLOP/s"], "us": 1e3 * r["ms"]}
        if "GB/s" in r:
            entry["GB/s"] = r["GB/s"]
        rows.setdefault(r["name"], {})[r["backend"]] = entry
    return rows


def fmt(x, width=9):
    return ("%*.2f" % (width, x)) if isinstance(x, (int, float)) else ("%*s" % (width, x))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--attn", required=True)
    p.add_argument("--torch", required=True)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    bench, peer = load(a.attn, "attn figures"), load(a.torch, "PyTorch figures")
    ours, theirs = attn_rows(bench), torch_rows(peer)

    names = list(ours) + [n for n in theirs if n not in ours]
    figures = {
        "attn": {"context": (bench or {}).get("context", {})},
        "torch": {k: v for k, v in (peer or {}).items() if k != "results"},
        "rows": [],
    }
    header = "%-36s %9s | %9s %9s %9s | %s" % ("benchmark (TFLOP/s; decode: GB/s)", "attn",
                                               *TORCH_BACKENDS, "attn / fastest torch")
    print(header)
    print("-" * len(header))
    for name in names:
        mine = ours.get(name, {})
        peers = theirs.get(name, {})
        # A decode step reads K and V: GB/s says more than TFLOP/s (the ratio is the same).
        metric = "GB/s" if name.startswith("decode/") else "TFLOP/s"
        timed = {b: e for b, e in peers.items() if metric in e}
        best = max(timed, key=lambda b: timed[b][metric]) if timed else None
        row = {"name": name, "attn": mine, "torch": peers}
        ratio = ""
        if best and metric in mine:
            row["fastest_torch"] = best
            row["ratio"] = mine[metric] / timed[best][metric]
            ratio = "%.2f (%s)" % (row["ratio"], best)
        figures["rows"].append(row)
        cells = [mine.get(metric, "error" if "error" in mine else "-")]
        for b in TORCH_BACKENDS:
            e = peers.get(b)
            cells.append("-" if e is None else e.get(metric, "n/a"))
        print("%-36s %s | %s %s %s | %s" % (name, *[fmt(c) for c in cells], ratio))
    print("n/a: that PyTorch backend cannot run this case (the reason is in the JSON); "
          "-: not measured")

    with open(a.out, "w") as f:
        json.dump(figures, f, indent=1)
    print("gpu_figures: %d rows -> %s" % (len(names), a.out))
    return 0 if any("TFLOP/s" in r for r in ours.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
