#!/usr/bin/python3
"""Planned against measured on this machine: `tessel plan --calibrate`, then real `tessel train`
layouts (DP, TP, SP, PP, VPP, uneven PP, zero-bubble, recompute, CP, EP, mixed) under mpirun, one thread per rank; for
each, every rank's peak RSS (GNU time) and the median step time against the planner's figures for
the same flags. Rounds alternate the order of the layouts; each round calibrates afresh, so load
from other processes hits calibration and runs alike. Prints a markdown table for bench/RESULTS.md.

  bench/plan_cpu.py [--rounds 2] [--iters 6] [--tessel build/tessel] [--layouts REGEX]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import tempfile

GPT = "--num-layers 8 --hidden-size 384 --num-attention-heads 6 --seq-length 256"
LLAMA = "--arch llama --num-layers 8 --hidden-size 384 --num-attention-heads 6 --group-query-attention --num-query-groups 2 --seq-length 256"
MOE = ("--arch llama --num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 256 "
       "--num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 512 "
       # a capacity bounds the routed rows: an untrained router is far from balanced, and dropless
       # buffers follow whatever it does (the planner assumes a balanced load, --moe-load-factor 1)
       "--moe-expert-capacity-factor 1.5")
# A small Qwen3-Next-style hybrid: Gated DeltaNet layers (3 of every 4) and gated attention with its
# own head dimension, QK-norm, partial RoPE, zero-centred norms; MoE in every layer with a gated
# shared expert. Its routed buffers are padded to a capacity, so what they hold does not depend on
# how six iterations of an untrained router happen to balance.
QWEN_NEXT = ("--arch llama --num-layers 8 --hidden-size 256 --num-attention-heads 4 --group-query-attention --num-query-groups 2 "
             "--kv-channels 64 --seq-length 256 --experimental-attention-variant gdn --linear-attention-freq 4 "
             "--linear-num-key-heads 2 --linear-num-value-heads 4 --linear-key-head-dim 64 --linear-value-head-dim 64 "
             "--attention-output-gate --qk-layernorm --apply-layernorm-1p --rotary-percent 0.25 "
             "--num-experts 16 --moe-router-topk 4 --moe-ffn-hidden-size 256 --moe-shared-expert-intermediate-size 256 "
             "--moe-shared-expert-gate --moe-expert-capacity-factor 1.25 --moe-pad-expert-input-to-capacity")
LAYOUTS = [  # name, ranks, flags (model, layout and batch)[, flags for tessel train only]
    ("DP2", 2, f"{GPT} --tp 1 --micro-batch-size 4 --global-batch-size 8"),
    ("DP2 distributed optimizer", 2, f"{GPT} --tp 1 --micro-batch-size 4 --global-batch-size 8 --use-distributed-optimizer"),
    ("TP2", 2, f"{GPT} --tp 2 --micro-batch-size 4 --global-batch-size 8"),
    ("TP2 + SP", 2, f"{GPT} --tp 2 --sequence-parallel --micro-batch-size 4 --global-batch-size 8"),
    ("PP2 (1F1B)", 2, f"{GPT} --pp 2 --micro-batch-size 2 --global-batch-size 8"),
    ("PP2 VPP2 (interleaved)", 2, f"{GPT} --pp 2 --vpp 2 --micro-batch-size 2 --global-batch-size 8"),
    # without clipping: a step that clipping changes is rolled back and its next iteration run
    # again (optim/post_validation.h), which the planner does not predict
    ("PP2 ZB-H1 + post-validation", 2, f"{GPT} --pp 2 --schedule zb-h1 --enable-optimizer-post-validation "
                                       "--micro-batch-size 2 --global-batch-size 8", "--clip-grad 0"),
    ("PP2 ZB-V", 2, f"{GPT} --pp 2 --schedule zb-v --micro-batch-size 2 --global-batch-size 8"),
    ("PP2 DualPipeV", 2, f"{GPT} --pp 2 --schedule dualpipev --micro-batch-size 2 --global-batch-size 8"),
    ("PP2 full recompute", 2, f"{GPT} --pp 2 --recompute-granularity full --recompute-method uniform "
                              "--recompute-num-layers 1 --micro-batch-size 2 --global-batch-size 8"),
    ("PP2 ZB-V full recompute", 2, f"{GPT} --pp 2 --schedule zb-v --recompute-granularity full --recompute-method uniform "
                                   "--recompute-num-layers 1 --micro-batch-size 2 --global-batch-size 8"),
    ("TP2 + SP selective recompute", 2, f"{GPT} --tp 2 --sequence-parallel --recompute-granularity selective "
                                        "--micro-batch-size 4 --global-batch-size 8"),
    ("CP2 (llama)", 2, f"{LLAMA} --cp 2 --micro-batch-size 4 --global-batch-size 4"),
    ("EP2 (MoE)", 2, f"{MOE} --ep 2 --micro-batch-size 4 --global-batch-size 8"),
    ("EP2 (MoE) full recompute", 2, f"{MOE} --ep 2 --recompute-granularity full --recompute-method uniform "
                                    "--recompute-num-layers 1 --micro-batch-size 4 --global-batch-size 8"),
    ("DP4", 4, f"{GPT} --tp 1 --micro-batch-size 2 --global-batch-size 8"),
    ("TP2 x PP2 + SP", 4, f"{GPT} --tp 2 --pp 2 --sequence-parallel --micro-batch-size 2 --global-batch-size 8"),
    ("PP4 uneven (1, 3, 3, 1)", 4, f"{GPT} --pp 4 --decoder-first-pipeline-num-layers 1 "
                                   "--decoder-last-pipeline-num-layers 1 --micro-batch-size 2 --global-batch-size 8"),
    ("EP2 x TP2 + SP (MoE)", 4, f"{MOE} --tp 2 --ep 2 --sequence-parallel --micro-batch-size 4 --global-batch-size 8"),
    ("TP2 x PP2 x DP2", 8, f"{GPT} --tp 2 --pp 2 --micro-batch-size 2 --global-batch-size 8"),
    ("Qwen3-Next-style: 1 process", 1, f"{QWEN_NEXT} --tp 1 --micro-batch-size 4 --global-batch-size 8"),
    ("Qwen3-Next-style: DP2", 2, f"{QWEN_NEXT} --tp 1 --micro-batch-size 4 --global-batch-size 8"),
    ("Qwen3-Next-style: PP2", 2, f"{QWEN_NEXT} --pp 2 --micro-batch-size 2 --global-batch-size 8"),
    ("Qwen3-Next-style: TP2 + SP", 2, f"{QWEN_NEXT} --tp 2 --sequence-parallel --micro-batch-size 4 --global-batch-size 8"),
    ("Qwen3-Next-style: EP2", 2, f"{QWEN_NEXT} --ep 2 --micro-batch-size 4 --global-batch-size 8"),
    ("Qwen3-Next-style: PP2 x EP2 (DP2)", 4, f"{QWEN_NEXT} --pp 2 --ep 2 --micro-batch-size 2 --global-batch-size 8"),
    ("Qwen3-Next-style: TP2 + SP full recompute", 2, f"{QWEN_NEXT} --tp 2 --sequence-parallel --recompute-granularity full "
                                                  "--recompute-method uniform --recompute-num-layers 1 "
                                                  "--micro-batch-size 4 --global-batch-size 8"),
]
MPIRUN = "mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1 -n {} "


def sh(command):
    r = subprocess.run(command, shell=True, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"failed: {command}\n{r.stdout}{r.stderr}")
    return r.stdout + r.stderr


def load():
    return os.getloadavg()[0]


def measure(tessel, ranks, flags, iters):  # flags: tessel train's
    with tempfile.TemporaryDirectory() as d:
        # GNU time writes each rank's peak RSS to its own file (their stderr would interleave)
        wrapped = f"bash -c 'exec /usr/bin/time -f %M -o {d}/rss.$OMPI_COMM_WORLD_RANK {tessel} train {flags} " \
                  f"--train-iters {iters} --log-interval 1'"
        out = sh(MPIRUN.format(ranks) + wrapped)
        rss = {r: int(open(f"{d}/rss.{r}").read().split()[-1]) * 1024 for r in range(ranks)}
    steps = [float(ms) / 1e3 for ms in re.findall(r"^iter +\d+/\d+ .*?\| ([0-9.]+) ms", out, re.M)]
    if len(steps) < 4:
        raise SystemExit(f"could not read the step times:\n{out}")
    return rss, statistics.median(steps[2:])  # the first iterations size buffers and warm caches


def predict(tessel, cluster, ranks, flags):
    plan = json.loads(sh(f"{tessel} plan --cluster {cluster} --num-gpus {ranks} {flags} --json"))
    layout = plan["layouts"][0]
    per_rank = {}
    for stage in layout["memory_gib"]["per_stage"]:
        for r in stage["ranks"]:
            per_rank[r] = stage["total_gib"] * 2**30
    return per_rank, layout["step_time_s"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--iters", type=int, default=6)
    ap.add_argument("--tessel", default="build/tessel")
    ap.add_argument("--layouts", default="", help="only the layouts whose name matches this regular expression")
    args = ap.parse_args()
    layouts = [layout for layout in LAYOUTS if re.search(args.layouts, layout[0])]
    work = tempfile.mkdtemp()
    cpu = sh("lscpu | grep 'Model name' | sed 's/.*: *//'").strip()
    results = {layout[0]: [] for layout in layouts}
    for round_ in range(args.rounds):
        cluster = os.path.join(work, f"cpu-{round_}.json")
        calibration = sh(f"{args.tessel} plan --calibrate --out {cluster}")
        print(f"round {round_ + 1}: load {load():.1f}\n{calibration}", flush=True)
        order = layouts if round_ % 2 == 0 else list(reversed(layouts))
        for name, ranks, flags, *train_only in order:
            before = load()
            rss, step = measure(args.tessel, ranks, " ".join([flags, *train_only]), args.iters)
            planned, planned_step = predict(args.tessel, cluster, ranks, flags)
            results[name].append({"rss": rss, "planned": planned, "step": step, "planned_step": planned_step,
                                  "load": (before + load()) / 2})
            print(f"  {name}: peak RSS {max(rss.values()) / 2**20:.1f} MiB planned {max(planned.values()) / 2**20:.1f}; "
                  f"step {step:.3f} s planned {planned_step:.3f} s (load {results[name][-1]['load']:.1f})", flush=True)

    print(f"\n{cpu}; {args.rounds} rounds of {args.iters} iterations (median step of iterations 3..{args.iters})\n")
    print("| layout | ranks | peak RSS measured (MiB) | planned | error | worst rank's error | step measured (s) | "
          "planned | error | load |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    rss_errors, step_errors = [], []
    for name, ranks, *_ in layouts:
        runs = results[name]
        peak = statistics.median(max(r["rss"].values()) for r in runs)
        planned = statistics.median(max(r["planned"].values()) for r in runs)
        worst = max(abs(r["planned"][k] / r["rss"][k] - 1) for r in runs for k in r["rss"])
        step = statistics.median(r["step"] for r in runs)
        planned_step = statistics.median(r["planned_step"] for r in runs)
        e_rss, e_step = planned / peak - 1, planned_step / step - 1
        rss_errors.append(abs(e_rss))
        step_errors.append(abs(e_step))
        print(f"| {name} | {ranks} | {peak / 2**20:.1f} | {planned / 2**20:.1f} | {100 * e_rss:+.1f} % | {100 * worst:.1f} % | "
              f"{step:.3f} | {planned_step:.3f} | {100 * e_step:+.1f} % | {statistics.mean(r['load'] for r in runs):.1f} |")
    print(f"\npeak RSS: {sum(e <= 0.10 for e in rss_errors)} of {len(rss_errors)} layouts within 10 %, "
          f"max |error| {100 * max(rss_errors):.1f} %; step time: median |error| {100 * statistics.median(step_errors):.1f} %, "
          f"max {100 * max(step_errors):.1f} %")


if __name__ == "__main__":
    main()
