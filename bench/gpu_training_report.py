#!/usr/bin/python3
"""bench/gpu.sh's training figures, as Markdown: GPT-2 124M --bf16 tokens/s and MFU, tessel against
PyTorch on the same GPU; the loss of --bf16 on the GPU against fp32 on the CPU from the same
weights; one process against TP2 and DP2 on one GPU. Reads the logs gpu.sh wrote into WORK_DIR.

MFU is model FLOPs over the bf16 dense peak (989.4 TFLOP/s, the H100/H200 SXM datasheet), with
PaLM's count of model FLOPs per token: 6·N + 12·L·C·T (N parameters, L layers, width C, context T;
the causal mask's saving not subtracted, as PaLM and nanoGPT count).
"""
import json
import os
import statistics
import sys

PEAK_BF16 = 989.4e12
LAYERS, WIDTH, SEQ, VOCAB, POSITIONS = 12, 768, 1024, 50304, 1024
# GPT-2 124M with the vocabulary padded to 50304: embeddings, 12 blocks, the final norm (the LM
# head is tied to the token embedding).
BLOCK = 12 * WIDTH * WIDTH + 13 * WIDTH
PARAMS = VOCAB * WIDTH + POSITIONS * WIDTH + LAYERS * BLOCK + 2 * WIDTH
FLOPS_PER_TOKEN = 6 * PARAMS + 12 * LAYERS * WIDTH * SEQ
LOSS_TOLERANCE = 2e-2    # bf16 noise: relative, any iteration of the 50
LAYOUT_TOLERANCE = 1e-4  # the equivalence suite's, per iteration


def lines(path):
    try:
        with open(path) as f:
            return [json.loads(l) for l in f if l.strip()]
    except (OSError, ValueError):
        return []


def losses(path):
    return [r["loss"] for r in lines(path) if "split" not in r]


def furthest(got, want):
    """The largest relative difference over the iterations both have, or None."""
    n = min(len(got), len(want))
    if n == 0:
        return None
    return max(abs(g - w) / abs(w) for g, w in zip(got[:n], want[:n]))


def verdict(value, tolerance):
    return "NOT RUN" if value is None else ("PASS" if value <= tolerance else "FAIL")


def main():
    work = sys.argv[1]
    path = lambda name: os.path.join(work, name)
    print("\n| | tokens/s | MFU (bf16 peak) |")
    print("| --- | --- | --- |")
    steps = lines(path("speed.jsonl"))[5:]  # the first five warm up (plans, allocations)
    ours = statistics.median(r["tokens_per_s"] for r in steps) if steps else None
    theirs = (lines(path("pytorch.json")) or [{}])[0].get("tokens_per_s")
    for name, rate in (("tessel --device cuda --bf16", ours),
                       ("PyTorch bf16 autocast + torch.compile", theirs)):
        cell = f"{rate:,.0f} | {100 * rate * FLOPS_PER_TOKEN / PEAK_BF16:.1f} %" if rate else "– | –"
        print(f"| {name} | {cell} |")
    if ours and theirs:
        print(f"\n- tessel / PyTorch tokens/s: {ours / theirs:.2f} (acceptance: ≥ 1); tessel MFU "
              f"{100 * ours * FLOPS_PER_TOKEN / PEAK_BF16:.1f} % (acceptance: ≥ 50 %); "
              f"{FLOPS_PER_TOKEN / 1e9:.3f} GFLOP per token, N = {PARAMS:,}")

    gpu, cpu = losses(path("loss_gpu.jsonl")), losses(path("loss_cpu.jsonl"))
    gap = furthest(gpu, cpu)
    print(f"\n- loss, GPU --bf16 against CPU fp32 over {min(len(gpu), len(cpu))} iterations: "
          f"largest relative difference {gap if gap is None else f'{gap:.2e}'} "
          f"(≤ {LOSS_TOLERANCE}: {verdict(gap, LOSS_TOLERANCE)})")
    if gpu and cpu:
        print(f"  first {cpu[0]:.4f} / {gpu[0]:.4f}, last {cpu[-1]:.4f} / {gpu[-1]:.4f} (CPU / GPU)")
        print("  every 5th: " + ", ".join(f"{c:.3f}/{g:.3f}" for c, g in list(zip(cpu, gpu))[::5]))

    one = losses(path("layout_1.jsonl"))
    for name in ("tp2", "dp2"):
        gap = furthest(losses(path(f"layout_{name}.jsonl")), one)
        print(f"- {name.upper()} on one GPU against one process, {len(one)} iterations: largest "
              f"relative loss difference {gap if gap is None else f'{gap:.2e}'} "
              f"(≤ {LAYOUT_TOLERANCE}: {verdict(gap, LAYOUT_TOLERANCE)})")


if __name__ == "__main__":
    main()
