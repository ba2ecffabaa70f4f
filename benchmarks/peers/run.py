#!/usr/bin/env python3
"""attn beside its CPU peers, measured in the same rounds: PyTorch's scaled_dot_product_attention
(from PyPI, in a venv) and ggml's flash_attn_ext (built from a checkout outside this tree). Run by
hand, never in CI:

    python3 -m venv /tmp/peers-venv && /tmp/peers-venv/bin/pip install torch
    git clone https://github.com/ggml-org/ggml /tmp/ggml          # (or any checkout)
    benchmarks/peers/run.py --python /tmp/peers-venv/bin/python --ggml /tmp/ggml \\
        --suite forward --rounds 5 > peers.md

Each configuration runs as its own process per side (attn's own benchmark binary with a filter
that selects exactly that benchmark, torch_sdpa.py, ggml_flash), after a quiet check (the CPU
must be idle for half a second, up to 30 s of waiting), with the sides' order alternating from
round to round. It prints a Markdown table of medians and, per peer, the median and range of the
per-round time ratio attn / peer (below 1: attn is faster).

Suites: forward (T 256 to 16384, causal and not, 1 and 2 threads), backward (the backward and
forward + backward at T 1024 and 4096; PyTorch only, ggml has none), decode (1 or 4 queries against
a long cache; every side reads a 256 MiB buffer before each call, so K and V come from memory).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def cpu_busy(interval=0.5):
    """Fraction of CPU time not idle over `interval` seconds (all CPUs)."""
    def read():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[3] + v[4]
    t0, i0 = read()
    time.sleep(interval)
    t1, i1 = read()
    return 1.0 - (i1 - i0) / max(1, t1 - t0)


def quiet_check(limit=0.10, wait=30.0):
    start = time.time()
    while cpu_busy() > limit and time.time() - start < wait:
        pass


class Config:
    def __init__(self, kind, B, H, Hkv, Tq, Tk, D, causal, threads):
        self.kind, self.B, self.H, self.Hkv = kind, B, H, Hkv
        self.Tq, self.Tk, self.D, self.causal, self.threads = Tq, Tk, D, causal, threads

    def flops(self):
        f = 4.0 * self.B * self.H * self.Tq * self.Tk * self.D / (2 if self.causal and self.Tq == self.Tk else 1)
        return f * {"fwd": 1.0, "bwd": 2.5, "fwd_bwd": 3.5, "decode": 1.0}[self.kind]

    def kv_bytes(self):
        return 2 * 4.0 * self.B * self.Hkv * self.Tk * self.D

    def bench_name(self):
        """The attn_bench benchmark of this configuration."""
        s = "/B:%d/T:%d/causal:%d/threads:%d" % (self.B, self.Tk, self.causal, self.threads)
        if self.kind == "fwd":
            return "attention/cpu_float" + s
        if self.kind == "bwd":
            return "attention_backward/cpu_float" + s
        if self.kind == "fwd_bwd":
            return "attention_fwd_bwd/cpu_float" + s
        return "decode/cpu_float/B:%d/Hkv:%d/Tq:%d/Tk:%d/threads:%d" % (
            self.B, self.Hkv, self.Tq, self.Tk, self.threads)

    def label(self):
        c = " causal" if self.causal else ""
        if self.kind == "decode":
            return "decode B %d Hkv %d Tq %d Tk %d, %d thr" % (self.B, self.Hkv, self.Tq, self.Tk, self.threads)
        return "%s T %d%s, %d thr" % (self.kind, self.Tk, c, self.threads)


def suite(name):
    out = []
    if name == "forward":
        for T in (256, 1024, 4096, 16384):
            for causal in (0, 1):
                for threads in (1, 2):
                    if T == 16384 and threads == 1:
                        continue
                    out.append(Config("fwd", 1, 12, 12, T, T, 64, causal, threads))
    elif name == "backward":
        for kind in ("bwd", "fwd_bwd"):
            for T in (1024, 4096):
                for causal in (0, 1):
                    for threads in (1, 2):
                        out.append(Config(kind, 1, 12, 12, T, T, 64, causal, threads))
    elif name == "decode":
        for B in (1, 8):
            for Hkv in (12, 4):
                for Tk in (1024, 4096, 16384, 65536):
                    for Tq in (1, 4):
                        for threads in (1, 2):
                            if B == 8 and Tk == 65536:
                                continue
                            out.append(Config("decode", B, 12, Hkv, Tq, Tk, 64, 1, threads))
    return out


def run_attn(bench, c):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        subprocess.run([bench, "--benchmark_filter=^%s/" % c.bench_name().replace("/", "/"),
                        "--benchmark_min_time=0.3", "--benchmark_repetitions=3",
                        "--benchmark_report_aggregates_only=true",
                        "--benchmark_out=" + f.name, "--benchmark_out_format=json"],
                       check=True, stdout=subprocess.DEVNULL)
        rows = json.load(open(f.name))["benchmarks"]
    med = [r for r in rows if r.get("aggregate_name") == "median"]
    if not med:
        raise RuntimeError("attn_bench has no benchmark " + c.bench_name())
    t = med[0]["real_time"]
    return t if med[0]["time_unit"] == "ms" else t / 1e3


def run_torch(python, c, reps):
    r = subprocess.run([python, os.path.join(HERE, "torch_sdpa.py"), "--kind", c.kind,
                        "--B", str(c.B), "--H", str(c.H), "--Hkv", str(c.Hkv), "--Tq", str(c.Tq),
                        "--Tk", str(c.Tk), "--D", str(c.D), "--causal", str(c.causal),
                        "--threads", str(c.threads), "--reps", str(reps)],
                       check=True, capture_output=True, text=True)
    return float(r.stdout.strip())


def run_ggml(binary, c, reps):
    r = subprocess.run([binary, str(c.B), str(c.H), str(c.Hkv), str(c.Tq), str(c.Tk), str(c.D),
                        str(c.causal), str(c.threads), str(reps), str(int(c.kind == "decode"))],
                       check=True, capture_output=True, text=True)
    return float(r.stdout.strip())


def build_ggml(src, build):
    """Builds ggml (static, native) and ggml_flash.cpp against it; returns the binary."""
    os.makedirs(build, exist_ok=True)
    subprocess.run(["cmake", "-S", src, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                    "-DGGML_NATIVE=ON", "-DBUILD_SHARED_LIBS=OFF", "-DGGML_BUILD_TESTS=OFF",
                    "-DGGML_BUILD_EXAMPLES=OFF"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", build, "--target", "ggml"], check=True,
                   stdout=subprocess.DEVNULL)
    libs = []
    for root, _, files in os.walk(build):
        libs += [os.path.join(root, f) for f in files if f.endswith(".a")]
    order = sorted(libs, key=lambda p: ("ggml-base" in p, "ggml-cpu" not in p))
    binary = os.path.join(build, "ggml_flash")
    subprocess.run(["g++", "-std=c++17", "-O2", "-I", os.path.join(src, "include"),
                    os.path.join(HERE, "ggml_flash.cpp"), "-o", binary] + order +
                   ["-lgomp", "-lpthread", "-lm"], check=True)
    return binary


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bench", default=os.path.join(ROOT, "build/release/benchmarks/attn_bench"))
    p.add_argument("--python", help="a python with torch (omit: no PyTorch column)")
    p.add_argument("--ggml", help="a ggml source checkout (omit: no ggml column)")
    p.add_argument("--ggml-build", default="/tmp/attn-peers-ggml")
    p.add_argument("--suite", choices=("forward", "backward", "decode"), default="forward")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--only", help="substring of the configurations' labels to run")
    a = p.parse_args()

    ggml = build_ggml(a.ggml, a.ggml_build) if a.ggml and a.suite != "backward" else None
    configs = [c for c in suite(a.suite) if not a.only or a.only in c.label()]
    sides = [("attn", lambda c: run_attn(a.bench, c))]
    if a.python:
        sides.append(("torch", lambda c: run_torch(a.python, c, a.reps)))
    if ggml:
        sides.append(("ggml", lambda c: run_ggml(ggml, c, a.reps)))
    times = {(c.label(), s): [] for c in configs for s, _ in sides}
    for r in range(a.rounds):
        for c in configs:
            order = sides if r % 2 == 0 else list(reversed(sides))
            for name, run in order:
                quiet_check()
                times[(c.label(), name)].append(run(c))
        print("round %d of %d done" % (r + 1, a.rounds), file=sys.stderr)

    names = [s for s, _ in sides]
    head = "| configuration | " + " | ".join("%s ms" % n for n in names)
    rate_name = "attn K+V read" if a.suite == "decode" else "attn GFLOP/s"
    head += " | " + rate_name + "".join(" | attn / %s (range)" % n for n in names[1:]) + " |"
    print(head)
    print("|" + "---|" * (len(names) * 2 + 1))
    for c in configs:
        med = {n: statistics.median(times[(c.label(), n)]) for n in names}
        row = "| %s | " % c.label() + " | ".join("%.3f" % med[n] for n in names)
        rate = c.flops() / (med["attn"] * 1e-3) / 1e9
        if c.kind == "decode":
            row += " | %.1f GB/s" % (c.kv_bytes() / (med["attn"] * 1e-3) / 1e9)
        else:
            row += " | %.1f" % rate
        for n in names[1:]:
            ratios = [x / y for x, y in zip(times[(c.label(), "attn")], times[(c.label(), n)])]
            # Three decimals: a floor of 1.5x is a ratio of 0.667.
            row += " | %.3f (%.3f-%.3f)" % (statistics.median(ratios), min(ratios), max(ratios))
        print(row + " |")


if __name__ == "__main__":
    main()
