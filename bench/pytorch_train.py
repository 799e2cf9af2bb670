#!/usr/bin/python3
"""PyTorch's training throughput on a GPT-2-style model: the baseline tessel is measured against.

A full step is forward + backward + AdamW (fp32, or bf16 autocast with --bf16) on the model of
tools/crosscheck/torch_reference.py (Hugging Face's GPT-2 semantics), randomly initialised, with
random tokens (or the bytes of --data-path). Prints one JSON line with tokens/s. Run it through
bench/run_pytorch.sh, which sets the allocator and thread environment that PyTorch is fastest
with here (bench/README.md says why). On a GPU (--device cuda, bench/gpu.sh) PyTorch runs at its
best as a user would run it: attention through scaled_dot_product_attention (flash), --bf16
autocast with fp32 master weights, --compile for torch.compile.
"""
import argparse
import json
import os
import subprocess
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--vocab", type=int, default=50304)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--hidden", type=int, default=384)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--iters", type=int, default=10, help="timed iterations")
    p.add_argument("--warmup", type=int, default=3, help="untimed iterations first")
    p.add_argument("--data-path", help="train on this file's bytes instead of random tokens")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--device", default="cpu", help="cpu | cuda")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast (fp32 master weights)")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    return p.parse_args()


def main():
    args = parse_args()
    # Thread pools are sized when torch (and the BLAS under it) loads: set them first.
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(args.threads))
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools",
                                    "crosscheck"))
    import numpy as np
    import torch
    import torch.nn.functional as F
    import torch_reference as ref

    torch.set_num_threads(args.threads)
    cfg = {"arch": "gpt2", "vocab_size": args.vocab, "hidden_size": args.hidden,
           "num_layers": args.layers, "num_heads": args.heads, "num_kv_heads": args.heads,
           "ffn_size": 4 * args.hidden, "max_positions": args.seq, "norm_eps": 1e-5,
           "gelu_approximate": "tanh"}  # GPT-2's gelu_new, tessel's --openai-gelu (bench/configs.sh)
    device = torch.device(args.device)
    if device.type == "cuda":  # PyTorch's fused attention, as any GPU user has it
        ref.causal_attention = lambda q, k, v: F.scaled_dot_product_attention(q, k, v,
                                                                              is_causal=True)
    model = ref.build_model(cfg)
    ref.init_normal(model, 0.02, args.seed)
    model.to(device)
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=3e-4, betas=(0.9, 0.95), eps=1e-8,
                                  **({"fused": True} if device.type == "cuda" else {}))
    forward = torch.compile(model) if args.compile else model

    gen = torch.Generator().manual_seed(args.seed)
    tokens = None
    if args.data_path:
        tokens = torch.from_numpy(np.fromfile(args.data_path, dtype=np.uint8).astype(np.int64))

    def batch(i):  # (B, T + 1) tokens: inputs are [:, :-1], targets [:, 1:]
        if tokens is None:
            return torch.randint(0, args.vocab, (args.batch, args.seq + 1), generator=gen)
        span = args.batch * (args.seq + 1)
        start = (i * span) % max(len(tokens) - span, 1)
        return tokens[start:start + span].view(args.batch, args.seq + 1)

    def step(i):
        chunk = batch(i).to(device)
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.bf16):
            logits = forward(chunk[:, :-1])
        loss = F.cross_entropy(logits.float().view(-1, args.vocab), chunk[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        return loss.item()

    for i in range(args.warmup):
        step(i)
    times, loss = [], 0.0
    for i in range(args.warmup, args.warmup + args.iters):
        start = time.perf_counter()
        loss = step(i)
        times.append(time.perf_counter() - start)
    tokens_per_step = args.batch * args.seq
    total = sum(times)
    print(json.dumps({
        "bench": "pytorch_train", "torch": torch.__version__, "threads": args.threads,
        "vocab": args.vocab, "seq": args.seq, "hidden": args.hidden, "layers": args.layers,
        "heads": args.heads, "batch": args.batch, "iters": args.iters,
        "parameters": sum(p.numel() for p in model.parameters()),
        "tokens_per_s": round(tokens_per_step * args.iters / total, 1),
        "median_step_ms": round(1e3 * sorted(times)[len(times) // 2], 2),
        "last_loss": round(loss, 4),
        "device": args.device, "bf16": args.bf16, "compile": args.compile,
        "gpu": torch.cuda.get_device_name() if device.type == "cuda" else "",
        "ld_preload": os.environ.get("LD_PRELOAD", ""),
        "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", "unset"),
        "openblas_core": openblas_core() if device.type == "cpu" else "",
        "cpu": cpu_model()}))


def cpu_model():
    """lscpu's model name: results are comparable only on the same CPU."""
    for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def openblas_core():
    """The kernels the OpenBLAS under torch runs (its own detection, or OPENBLAS_CORETYPE's)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from openblas_probe import openblas_corename
    return openblas_corename()


if __name__ == "__main__":
    main()
