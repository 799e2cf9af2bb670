"""PyTorch on the same GPU and the same GPT-2 124M shapes as cuda_bench, for the report's ratios:
each linear layer's forward and backward (fp32 with TF32 off, as tessel's fp32 GEMMs, and bf16),
and causal scaled_dot_product_attention forward and backward (fp32 and bf16). CUDA-event timing,
warm-up, median of rounds; one JSON object per line on stdout.

Usage: python3 bench/gpu_reference.py [--batch 8 --seq 1024 --reps 20 --rounds 5]
"""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F


def median_ms(call, reps, rounds):
    for _ in range(3):
        call()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(rounds):
        start.record()
        for _ in range(reps):
            call()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / reps)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=768)
    p.add_argument("--vocab", type=int, default=50304)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda"
    N, C, V, H, T, B = a.batch * a.seq, a.hidden, a.vocab, a.heads, a.seq, a.batch
    D = C // H

    def emit(group, name, ms, work, unit):
        print(json.dumps({"group": group, "name": name, "ms": round(ms, 5),
                          "rate": round(work / (ms * 1e-3) / (1e12 if unit == "TFLOP/s" else 1e9), 3),
                          "unit": unit, "reference": "pytorch " + torch.__version__}), flush=True)

    for dtype, tag in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        for name, fin, fout in (("qkv", C, 3 * C), ("attn-proj", C, C), ("mlp-up", C, 4 * C),
                                ("mlp-down", 4 * C, C), ("lm-head", C, V)):
            x = torch.randn(N, fin, device=dev, dtype=dtype, requires_grad=True)
            w = (torch.randn(fout, fin, device=dev, dtype=dtype) * 0.02).requires_grad_()
            dy = torch.randn(N, fout, device=dev, dtype=dtype)
            flops = 2.0 * N * fin * fout
            emit("gemm", f"{name} fwd {tag}", median_ms(lambda: F.linear(x, w), a.reps, a.rounds), flops,
                 "TFLOP/s")
            y = F.linear(x, w)
            emit("gemm", f"{name} bwd {tag}",
                 median_ms(lambda: torch.autograd.grad(y, (x, w), dy, retain_graph=True), a.reps, a.rounds),
                 2 * flops, "TFLOP/s")
        q, k, v = (torch.randn(B, H, T, D, device=dev, dtype=dtype, requires_grad=True) for _ in range(3))
        dout = torch.randn(B, H, T, D, device=dev, dtype=dtype)
        flops = 2.0 * B * H * T * T * D
        emit("attention", f"causal fwd {tag}",
             median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), a.reps, a.rounds),
             flops, "TFLOP/s")
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        emit("attention", f"causal bwd {tag}",
             median_ms(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True), a.reps, a.rounds),
             2.5 * flops, "TFLOP/s")


if __name__ == "__main__":
    main()
