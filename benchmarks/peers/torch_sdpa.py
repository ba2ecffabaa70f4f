#!/usr/bin/env python3
"""Times PyTorch's CPU scaled_dot_product_attention: forward, backward, forward + backward or a
decode step, at one shape; prints the median milliseconds. A decode step first reads a 256 MiB
buffer (outside the timing), as attn's decode benchmark does, so K and V come from memory. Run
by benchmarks/peers/run.py (in a venv with torch from PyPI); never part of the test suite.

    torch_sdpa.py --kind fwd --B 1 --H 12 --Hkv 12 --Tq 1024 --Tk 1024 --D 64 --causal 1 \
                  --threads 1 --reps 10
"""
import argparse
import statistics
import time

import torch


def main():
    p = argparse.ArgumentParser()
    for name in ("B", "H", "Hkv", "Tq", "Tk", "D", "threads", "reps"):
        p.add_argument("--" + name, type=int, required=True)
    p.add_argument("--causal", type=int, default=0)
    p.add_argument("--kind", choices=("fwd", "bwd", "fwd_bwd", "decode"), required=True)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    needs_grad = a.kind in ("bwd", "fwd_bwd")
    q = torch.randn(a.B, a.H, a.Tq, a.D, requires_grad=needs_grad)
    k = torch.randn(a.B, a.Hkv, a.Tk, a.D, requires_grad=needs_grad)
    v = torch.randn(a.B, a.Hkv, a.Tk, a.D, requires_grad=needs_grad)
    # PyTorch's is_causal is aligned top-left; attn's bottom-right. They agree for Tq == Tk, and
    # a decode step (one query sees every key) is the non-causal call.
    causal = bool(a.causal) and a.Tq == a.Tk
    gqa = a.Hkv != a.H

    def forward():
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=causal, enable_gqa=gqa)

    grad = torch.randn(a.B, a.H, a.Tq, a.D)
    flush = torch.ones(64 << 20) if a.kind == "decode" else None  # 256 MiB of float
    times = []
    with torch.no_grad() if not needs_grad else torch.enable_grad():
        for rep in range(a.reps + 2):  # two warm-up calls
            if a.kind == "bwd":
                out = forward()
                t0 = time.perf_counter()
                out.backward(grad)
            else:
                if flush is not None:
                    float(flush.sum())
                t0 = time.perf_counter()
                out = forward()
                if a.kind == "fwd_bwd":
                    out.backward(grad)
            t = time.perf_counter() - t0
            if needs_grad:
                q.grad = k.grad = v.grad = None
            if rep >= 2:
                times.append(t)
    print("%.6f" % (1e3 * statistics.median(times)))


if __name__ == "__main__":
    main()
