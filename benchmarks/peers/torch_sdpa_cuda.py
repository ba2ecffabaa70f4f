#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention on the GPU at the shapes of benchmarks/cuda_bench.cu, the
peer beside each attn figure. Run by scripts/gpu-check (never by the test suite):

    python3 benchmarks/peers/torch_sdpa_cuda.py --out torch.json [--seconds 90]

Shapes (B 8, H 12, d 64, as cuda_bench): attention at T 1024 and 4096, causal and not, in
float32, float16 and bfloat16; decode steps (one query per sequence against Tk 4096 or 16384 keys,
Hkv 12 or 4). Each runs on every backend that torch.nn.attention.sdpa_kernel can force here:
FLASH_ATTENTION and CUDNN_ATTENTION (the peers the issue names) and EFFICIENT_ATTENTION (the
only fused one for float32). Timing: CUDA events around one call, as cuda_bench does, after three
warm-up calls, until 0.1 s or 200 calls; TFLOP/s from the mean time (FLOPs 4 B H Tq Tk d, halved
when causal with Tq = Tk). Every failure (an unsupported backend, a dtype, an old PyTorch) is
caught and written as that row's "error". The JSON is rewritten after every row, so a run cut
short keeps what it measured; --seconds stops it cleanly before a time box would.
"""
import argparse
import json
import sys
import time
import warnings

B, H, D = 8, 12, 64
BACKENDS = ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION")
DTYPES = {"float": "float32", "half": "float16", "bf16": "bfloat16"}


def shapes():
    """(name, Hkv, Tq, Tk, causal), named as cuda_bench names them."""
    for T in (1024, 4096):
        for causal in (0, 1):
            yield "attention/{dtype}/T:%d/causal:%d" % (T, causal), H, T, T, bool(causal)
    for Hkv in (12, 4):
        for Tk in (4096, 16384):
            # attn's causal mask is aligned bottom-right, so its causal decode step sees every
            # key; PyTorch's is_causal is aligned top-left: the same step is its non-causal call.
            yield "decode/{dtype}/Hkv:%d/Tk:%d" % (Hkv, Tk), Hkv, 1, Tk, False


def flops(Tq, Tk, causal):
    return 4.0 * B * H * Tq * Tk * D / (2.0 if causal and Tq == Tk else 1.0)


def first_line(e):
    text = str(e).strip().splitlines()
    return "%s: %s" % (type(e).__name__, text[0] if text else "")


def time_call(torch, fn, min_seconds=0.1, max_calls=200):
    """Mean and median milliseconds per call, CUDA events around each call."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    while len(times) < max_calls and (sum(times) < 1e3 * min_seconds or len(times) < 5):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    return sum(times) / len(times), times[len(times) // 2], len(times)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="the JSON to write")
    p.add_argument("--seconds", type=float, default=300.0, help="stop measuring after this long")
    a = p.parse_args()
    t_start = time.time()
    report = {"peer": "torch.nn.functional.scaled_dot_product_attention", "B": B, "H": H, "D": D,
              "results": []}

    def save():
        with open(a.out, "w") as f:
            json.dump(report, f, indent=1)

    try:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
        report["torch"] = torch.__version__
        report["cuda"] = torch.version.cuda
        report["cudnn"] = torch.backends.cudnn.version()
        if not torch.cuda.is_available():
            raise RuntimeError("torch.cuda.is_available() is False")
        report["device"] = torch.cuda.get_device_name(0)
    except Exception as e:  # no torch, a CPU build, no GPU, a PyTorch without sdpa_kernel
        report["error"] = first_line(e)
        save()
        print("torch_sdpa_cuda: " + report["error"], file=sys.stderr)
        return 1
    print("torch %s, CUDA %s, cuDNN %s, %s" % (report["torch"], report["cuda"], report["cudnn"],
                                               report["device"]))

    F = torch.nn.functional
    gen = torch.Generator(device="cuda").manual_seed(0)
    out_of_time = False
    for template, Hkv, Tq, Tk, causal in shapes():
        for dtype_name, torch_dtype in DTYPES.items():
            name = template.format(dtype=dtype_name)
            dt = getattr(torch, torch_dtype)
            try:
                q = torch.rand(B, H, Tq, D, device="cuda", dtype=dt, generator=gen) * 2 - 1
                k = torch.rand(B, Hkv, Tk, D, device="cuda", dtype=dt, generator=gen) * 2 - 1
                v = torch.rand(B, Hkv, Tk, D, device="cuda", dtype=dt, generator=gen) * 2 - 1
            except Exception as e:
                q = k = v = None
                alloc_error = first_line(e)
            for backend_name in BACKENDS:
                row = {"name": name, "backend": backend_name.split("_")[0].lower(),
                       "B": B, "H": H, "Hkv": Hkv, "Tq": Tq, "Tk": Tk, "D": D, "causal": causal,
                       "dtype": torch_dtype}
                if time.time() - t_start > a.seconds:
                    out_of_time = True
                    row["error"] = "not run: --seconds %.0f reached" % a.seconds
                elif q is None:
                    row["error"] = alloc_error
                else:
                    backend = getattr(SDPBackend, backend_name, None)
                    kwargs = {"is_causal": causal}
                    if Hkv != H:
                        kwargs["enable_gqa"] = True  # PyTorch 2.5 and later
                    caught = []
                    try:
                        if backend is None:
                            raise RuntimeError("this PyTorch has no SDPBackend." + backend_name)
                        with warnings.catch_warnings(record=True) as caught:
                            warnings.simplefilter("always")
                            with sdpa_kernel(backend), torch.no_grad():
                                def call():
                                    return F.scaled_dot_product_attention(q, k, v, **kwargs)
                                mean, median, calls = time_call(torch, call)
                        row.update(ms=mean, ms_median=median, calls=calls)
                        row["TFLOP/s"] = flops(Tq, Tk, causal) / (mean * 1e-3) / 1e12
                        if Tq == 1:  # K and V read
                            kv_bytes = 2.0 * B * Hkv * Tk * D * q.element_size()
                            row["GB/s"] = kv_bytes / (mean * 1e-3) / 1e9
                    except Exception as e:  # PyTorch warns why a forced backend cannot run
                        reasons = [str(w.message).strip().splitlines()[0] for w in caught]
                        row["error"] = first_line(e) + ("; " + reasons[0] if reasons else "")
                report["results"].append(row)
                save()
                if "error" in row:
                    print("%-36s %-9s %s" % (name, row["backend"], row["error"][:100]))
                else:
                    print("%-36s %-9s %9.3f ms %8.2f TFLOP/s" % (name, row["backend"], row["ms"],
                                                                  row["TFLOP/s"]))
            del q, k, v
            torch.cuda.empty_cache()
    report["seconds"] = time.time() - t_start
    save()
    ok = [r for r in report["results"] if "error" not in r]
    print("torch_sdpa_cuda: %d of %d rows measured in %.0f s -> %s" % (
        len(ok), len(report["results"]), report["seconds"], a.out))
    return 1 if out_of_time or not ok else 0


if __name__ == "__main__":
    sys.exit(main())
