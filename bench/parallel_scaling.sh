#!/bin/bash
# Parallel training throughput on this 2-core machine: data-parallel scaling, tessel DP2 against
# PyTorch on two threads, tensor parallel's overhead, DP bucket sizes and the allocator, and the
# all-reduce bandwidth tessel gets against a plain MPI_Allreduce (issue 3's bench items).
#
#   bench/parallel_scaling.sh [--rounds R] [--iters N] [--warmup W] [--microbatches K] MODE CONFIG
#
# --microbatches K: global batch = K microbatches (default 2) in every mode but tp. tessel itself
# is linked with tcmalloc (CMakeLists.txt); the allreduce mode compares the allocators.
#
# MODE      variants, run in this order every round (the first is the reference of the ratios)
#   dp        1 rank × 1 thread, global batch = K microbatches | DP2 (2 ranks × 1 thread), same
#             global batch | DP2 --overlap-grad-reduce | DP2 + --use-distributed-optimizer
#   torch     tessel DP2, global batch = K microbatches | bench/run_pytorch.sh --threads 2 with
#             batch = that global batch (ratio tessel / PyTorch) | tessel, 1 process × 2 threads,
#             same global batch | two independent tessel processes, one microbatch each (DP2's
#             work without communication: the most DP2 can reach)
#   tp        TP2 (2 ranks × 1 thread) | TP2 + --sequence-parallel | 1 process × 2 threads |
#             1 process × 1 thread, all with micro = global batch = the config's batch
#   buckets   DP2 with --ddp-bucket-size 4M (default, the reference), 1M, 16M floats
#   dpcost    where DP2's step goes: 1 rank with 2 microbatches | 1 rank with 1 microbatch | two
#             independent 1-microbatch processes at once (DP2's work without its communication)
#             | DP2 | DP2 --overlap-grad-reduce; derives one microbatch's cost, the step's fixed
#             cost (optimizer etc., not divided by DP), the two processes' mutual slow-down and
#             DP2's communication time = DP2's step - the independent pair's
#   moe       Mixture of Experts against a dense model with the same active parameters (llama,
#             dense MLP 4·hidden; MoE 8 experts of 2·hidden, top-2): dense 1 rank | MoE 1 rank |
#             dense DP2 | MoE EP2 (2 ranks, experts split, tokens by all-to-all); also the EP
#             all-to-all's bytes and blocked time per iteration (rank 0, --log-json "comm")
#   fsdp      DP2 --use-distributed-optimizer (ZeRO-1, the reference) | DP2 ZeRO-2 (--use-megatron-fsdp
#             --data-parallel-sharding-strategy optim_grads) | DP2 ZeRO-3 (optim_grads_params, units
#             freed after each forward) | DP2 ZeRO-3 units kept over the step
#             (--fsdp-reshard-after-forward never); also ZeRO-3's all-gather bytes and blocked time
#             per iteration (rank 0, --log-json "comm"): the part of the gathers the prefetch hid
#   allreduce build/bench/allreduce_bench on 2 ranks, glibc then tcmalloc, R rounds; per size the
#             medians over rounds of tessel's and plain MPI_Allreduce's GB/s and their ratio
#             (default 3 rounds; CONFIG is ignored, give either)
# CONFIG is tiny (V256 T128 d128 L4 H4, micro batch 8) or small (V50304 T256 d384 L6 H6, micro 4).
#
# Runs alternate A B C A B C ... so that load from other processes falls on every variant; each
# round gives ratios against the reference and the summary shows min / median / max. A tessel
# run's rate is the median tokens_per_s (whole global batch) of its timed iterations (--log-json,
# rank 0), PyTorch's is batch·seq / median_step_ms. Column "others": the cores' worth of CPU
# other processes used during the round's busiest run (/proc/stat less this script's children);
# the summary is repeated over the rounds where that stayed <= 0.25 (the quiet ones). Ranks run with OMP_NUM_THREADS=1 under
# `mpirun --allow-run-as-root -n 2` (Open MPI binds each rank to a core). TESSEL=...,
# ALLREDUCE_BENCH=... point at other binaries (a build of a fixed commit while others rebuild
# build/).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tessel=${TESSEL:-$root/build/tessel}
allreduce_bench=${ALLREDUCE_BENCH:-$root/build/bench/allreduce_bench}
corpus=$root/data/kjv-genesis-esther.txt
tcmalloc=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4

rounds= iters= warmup= microbatches=2
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --microbatches) microbatches=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
    -*) echo "parallel_scaling.sh: unknown flag $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
if [ $# -ne 2 ]; then
  echo "usage: parallel_scaling.sh [--rounds R] [--iters N] [--warmup W] [--microbatches K]" \
    "dp|torch|tp|buckets|dpcost|moe|fsdp|allreduce tiny|small" >&2
  exit 2
fi
mode=$1 config=$2

source "$root/bench/configs.sh"
bench_config "$config" parallel_scaling.sh
[ "$mode" = allreduce ] && def_rounds=3
iters=${iters:-$def_iters} warmup=${warmup:-$def_warmup} rounds=${rounds:-$def_rounds}

case $mode in
  dpcost)
    [ "$microbatches" = 2 ] || { echo "parallel_scaling.sh: dpcost needs 2 microbatches" >&2; exit 2; } ;;&
  dp)      variants=(1rank dp2 dp2-overlap dp2-distopt) ;;
  torch)   variants=(dp2 torch2 1proc-2threads 2procs-1mb) ;;
  tp)      variants=(tp2 tp2-sp 1proc-2threads 1proc-1thread) ;;
  buckets) variants=(dp2-b4M dp2-b1M dp2-b16M) ;;
  dpcost)  variants=(1rank 1rank-1mb 2procs-1mb dp2 dp2-overlap) ;;
  moe)     variants=(dense-1rank moe-1rank dense-dp2 moe-ep2) ;;
  fsdp)    variants=(dp2-distopt dp2-zero2 dp2-zero3 dp2-zero3-keep) ;;
  allreduce) variants=() ;;
  *) echo "parallel_scaling.sh: unknown mode $mode" >&2; exit 2 ;;
esac
# The global batch: two microbatches per step, split over DP2 or taken in turn by one rank; TP
# runs one microbatch (every TP rank sees the same samples).
if [ "$mode" = tp ]; then global=$micro; else global=$((microbatches * micro)); fi

command -v mpirun >/dev/null || { echo "parallel_scaling.sh: mpirun not found" >&2; exit 1; }
mpirun=(mpirun --allow-run-as-root -n 2 -x OMP_NUM_THREADS=1)
load() { cut -d' ' -f1-3 /proc/loadavg; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# CPU the rest of the machine used meanwhile, in cores: the busy time of all CPUs (/proc/stat,
# steal included) less the CPU time of this shell's children (`times`, so the runs are called in
# this shell, not in a subshell).
cpu_mark() {  # sets mark_busy, mark_wall, mark_ours (seconds)
  mark_busy=$(awk '/^cpu /{print ($2 + $3 + $4 + $7 + $8 + $9) / 100}' /proc/stat)
  mark_wall=$(cut -d' ' -f1 /proc/uptime)
  times >"$work/times"
  mark_ours=$(tail -n 1 "$work/times" | awk '{for (i = 1; i <= 2; i++) {
    split($i, t, "m"); s += t[1] * 60 + substr(t[2], 1, length(t[2]) - 1)}; print s}')
}

if [ "$mode" = allreduce ]; then
  [ -x "$allreduce_bench" ] || { echo "parallel_scaling.sh: $allreduce_bench not found (build first)" >&2; exit 1; }
  [ -e "$tcmalloc" ] || { echo "parallel_scaling.sh: $tcmalloc not found" >&2; exit 1; }
  echo "allreduce_bench, 2 ranks, glibc then tcmalloc, $rounds rounds, $(date -u '+%F %T') UTC, load $(load)"
  for r in $(seq 1 "$rounds"); do
    cpu_mark; busy0=$mark_busy wall0=$mark_wall ours0=$mark_ours
    "${mpirun[@]}" "$allreduce_bench" >"$work/glibc_$r"
    "${mpirun[@]}" -x LD_PRELOAD="$tcmalloc" "$allreduce_bench" >"$work/tcmalloc_$r"
    cpu_mark
    echo "round $r done, others $(python3 -c "print(f'{max(0.0, ($mark_busy - $busy0) - ($mark_ours - $ours0)) / ($mark_wall - $wall0):.2f}')") cores, load $(load)"
  done
  echo "--- last round's tables:"; cat "$work/glibc_$rounds" "$work/tcmalloc_$rounds"
  python3 - "$work" "$rounds" <<'EOF'
import statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def table(path):  # bytes -> (tessel GB/s, mpi GB/s, ratio, faults/call)
    rows = {}
    for line in open(path):
        f = line.split()
        if f and f[0].isdigit():
            rows[int(f[0])] = (float(f[3]), float(f[5]), float(f[6]), float(f[7]))
    return rows
print(f"--- medians over {rounds} rounds (GB/s = bytes / median call time; ratio = plain time / tessel time)")
for alloc in ("glibc", "tcmalloc"):
    tables = [table(f"{work}/{alloc}_{r}") for r in range(1, rounds + 1)]
    print(f"{alloc}:")
    print(f"{'bytes':>10} {'tessel_GB/s':>12} {'mpi_GB/s':>10} {'ratio min/med/max':>22} {'faults/call':>12}")
    for size in sorted(tables[0]):
        cols = list(zip(*[t[size] for t in tables]))
        ratio = cols[2]
        print(f"{size:>10} {statistics.median(cols[0]):>12.3f} {statistics.median(cols[1]):>10.3f} "
              f"{min(ratio):>7.3f}/{statistics.median(ratio):.3f}/{max(ratio):.3f} "
              f"{statistics.median(cols[3]):>12.1f}")
EOF
  exit 0
fi

[ -x "$tessel" ] || { echo "parallel_scaling.sh: $tessel not found (build first)" >&2; exit 1; }
# The moe mode's models are llama (SwiGLU MLPs); the others GPT-2.
if [ "$mode" = moe ]; then
  model=(--arch llama --ffn-hidden-size $((4 * hidden)) --hidden-dropout 0 --attention-dropout 0)
  moe_flags=(--num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size $((2 * hidden)))
else
  model=("${gpt2_bench_model[@]}")
fi
tessel_args() {  # $1: global batch; sets the array args
  args=(train "${model[@]}" --vocab-size "$vocab" --seq-length "$seq" --hidden-size "$hidden"
    --num-layers "$layers" --num-attention-heads "$heads" --micro-batch-size "$micro"
    --global-batch-size "$1" --train-iters $((warmup + iters)) --eval-iters 0 --log-interval 1
    --data-path "$corpus")
}

tessel_rate() {  # $1: --log-json file; prints "median_tok_s mean_tok_s" of the timed iterations
  python3 - "$1" "$warmup" <<'EOF'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
timed = [r for r in rows if r["iteration"] > int(sys.argv[2])]
tokens = timed[0]["tokens_per_s"] * timed[0]["iteration_time_ms"] / 1e3  # tokens per iteration
mean = tokens * len(timed) / (sum(r["iteration_time_ms"] for r in timed) / 1e3)
print(f'{statistics.median(r["tokens_per_s"] for r in timed):.1f} {mean:.1f}')
EOF
}

one_process() {  # $1: threads, $2: output prefix; runs tessel with args, no mpirun
  (cd "$work" && OMP_NUM_THREADS=$1 "$tessel" "${args[@]}" --threads "$1" \
    --log-json "$2.json" >"$2.log")
}

run_variant() {  # $1: variant, $2: output prefix; prints "median_tok_s mean_tok_s"
  local name=$1 out=$2 extra=() args
  tessel_args "$global"
  case $name in
    1rank|1proc-1thread|dense-1rank) one_process 1 "$out"; tessel_rate "$out.json"; return ;;
    moe-1rank) args+=("${moe_flags[@]}"); one_process 1 "$out"; tessel_rate "$out.json"; return ;;
    1proc-2threads) one_process 2 "$out"; tessel_rate "$out.json"; return ;;
    1rank-1mb)  # one microbatch per step
      tessel_args "$micro"; one_process 1 "$out"; tessel_rate "$out.json"; return ;;
    2procs-1mb)  # two independent 1-microbatch processes at once: DP2 without communication
      tessel_args "$micro"
      one_process 1 "$out.a" & one_process 1 "$out.b"; wait
      # The pair's rate: both processes' tokens at the slower one's rate.
      read -r a_med a_mean < <(tessel_rate "$out.a.json")
      read -r b_med b_mean < <(tessel_rate "$out.b.json")
      python3 -c "print(f'{2 * min($a_med, $b_med):.1f} {2 * min($a_mean, $b_mean):.1f}')"
      return ;;
    torch2)
      "$root/bench/run_pytorch.sh" --threads 2 --vocab "$vocab" --seq "$seq" --hidden "$hidden" \
        --layers "$layers" --heads "$heads" --batch "$global" --iters "$iters" \
        --warmup "$warmup" --data-path "$corpus" >"$out.log"
      python3 - "$out.log" <<'EOF'
import json, sys
r = json.loads(open(sys.argv[1]).read().splitlines()[-1])
print(f'{r["batch"] * r["seq"] / (r["median_step_ms"] / 1e3):.1f} {r["tokens_per_s"]:.1f}')
EOF
      return ;;
    dp2|dense-dp2) ;;
    dp2-overlap) extra=(--overlap-grad-reduce) ;;
    moe-ep2) extra=("${moe_flags[@]}" --ep 2) ;;
    dp2-distopt) extra=(--use-distributed-optimizer) ;;
    dp2-zero2) extra=(--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads) ;;
    dp2-zero3) extra=(--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params) ;;
    dp2-zero3-keep)
      extra=(--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params --fsdp-reshard-after-forward never) ;;
    tp2) extra=(--tp 2) ;;
    tp2-sp) extra=(--tp 2 --sequence-parallel) ;;
    dp2-b*)
      local size=${name#dp2-b}
      extra=(--ddp-bucket-size $((${size%M} * 1024 * 1024))) ;;
    *) echo "parallel_scaling.sh: unknown variant $name" >&2; exit 2 ;;
  esac
  (cd "$work" && "${mpirun[@]}" "$tessel" "${args[@]}" --threads 1 \
    "${extra[@]}" --log-json "$out.json" >"$out.log")
  tessel_rate "$out.json"
}

echo "mode $mode, config $config: ${model[*]} ${moe_flags[*]} V$vocab T$seq d$hidden L$layers H$heads, micro batch $micro," \
  "global batch $global, $warmup warm-up + $iters timed iterations, $rounds rounds, $(nproc) CPUs," \
  "$(date -u '+%F %T') UTC"
cpu=$(cpu_model)
echo "tessel: $tessel"
echo "cpu: $cpu"
[ "$mode" = torch ] && pick_openblas_coretype 2 "$work"
echo "load before: $(load)"
printf '%-5s' round; printf ' %16s' "${variants[@]}"
printf '  %8s   %-18s %s\n' others "load (1 5 15 min)" cpu
: >"$work/median_rows"; : >"$work/mean_rows"
for r in $(seq 1 "$rounds"); do
  medians=() means=() others=()
  for v in "${variants[@]}"; do
    cpu_mark; busy0=$mark_busy wall0=$mark_wall ours0=$mark_ours
    run_variant "$v" "$work/${v}_$r" >"$work/rate"
    cpu_mark
    read -r med mean <"$work/rate"
    medians+=("$med") means+=("$mean")
    others+=("$(python3 -c "print(f'{max(0.0, ($mark_busy - $busy0) - ($mark_ours - $ours0)) / ($mark_wall - $wall0):.2f}')")")
  done
  most=$(printf '%s\n' "${others[@]}" | sort -g | tail -n 1)
  printf '%-5s' "$r"; printf ' %16s' "${medians[@]}"; printf '  %8s   %-18s %s\n' "$most" "$(load)" "$cpu"
  echo "$most ${medians[*]}" >>"$work/median_rows"
  echo "$most ${means[*]}" >>"$work/mean_rows"
done
echo "others: cores' worth of CPU that other processes used during the round's busiest run"
echo "cpu: $cpu${BENCH_OPENBLAS_CORETYPE:+, OpenBLAS core type for PyTorch $BENCH_OPENBLAS_CORETYPE}"

python3 - "$work" "$mode" $((global * seq)) $((micro * seq)) "${variants[@]}" <<'EOF'
import statistics, sys
work, mode, step_tokens, micro_tokens, names = sys.argv[1], sys.argv[2], int(sys.argv[3]), \
    int(sys.argv[4]), sys.argv[5:]
QUIET = 0.25  # cores; the summary repeats over the rounds where others used at most this
def rows(kind):
    return [list(map(float, line.split())) for line in open(f"{work}/{kind}_rows") if line.strip()]
def line(label, values):
    return (f"{label:<40} min {min(values):>9.3f}  median {statistics.median(values):>9.3f}  "
            f"max {max(values):>9.3f}  ({len(values)})")
def report(median_rows, mean_rows, title):
    print(f"{title}; tok/s = median of the timed iterations:")
    for i, name in enumerate(names):
        print(line(f"{name} tok/s", [r[i] for r in median_rows]))
    print(f"ratios to {names[0]}, per round (second line: from mean rates, total tokens / total time):")
    for i, name in enumerate(names[1:], 1):
        print(line(f"{name} / {names[0]}", [r[i] / r[0] for r in median_rows]))
        print(line(f"  mean-based", [r[i] / r[0] for r in mean_rows]))
        print(line(f"{names[0]} / {name}", [r[0] / r[i] for r in median_rows]))
all_median, all_mean = rows("median"), rows("mean")
median_rows, mean_rows = [r[1:] for r in all_median], [r[1:] for r in all_mean]
report(median_rows, mean_rows, f"summary over all {len(median_rows)} rounds")
quiet = [i for i, r in enumerate(all_median) if r[0] <= QUIET]
if quiet and len(quiet) < len(all_median):
    report([median_rows[i] for i in quiet], [mean_rows[i] for i in quiet],
           f"quiet rounds only (others <= {QUIET} cores in every run): {len(quiet)}")
if mode == "dpcost":
    # Step times (ms) from the median rates; every variant but 1rank-1mb and 2procs-1mb does the
    # whole global batch (two microbatches) per step.
    use = [median_rows[i] for i in quiet] or median_rows
    print(f"where DP2's step time goes, ms per step, over the {'quiet' if quiet else 'all'} rounds:")
    derived = {k: [] for k in ("1 rank, 2 microbatches (T2)", "1 rank, 1 microbatch (T1)",
                               "one microbatch's fwd+bwd (C = T2 - T1)",
                               "per-step fixed cost (O = T1 - C)",
                               "2 independent procs, 1 microbatch (P)", "contention P / T1",
                               "DP2 step (D)", "DP2 communication (D - P)",
                               "DP2 --overlap-grad-reduce communication", "bound without comm T2 / P",
                               "bound, no contention T2 / T1")}
    for r in use:
        ms = dict(zip(names, r))
        t2, t1 = 1e3 * step_tokens / ms["1rank"], 1e3 * micro_tokens / ms["1rank-1mb"]
        par = 1e3 * 2 * micro_tokens / ms["2procs-1mb"]
        dp, dp_ov = 1e3 * step_tokens / ms["dp2"], 1e3 * step_tokens / ms["dp2-overlap"]
        for key, value in zip(derived, (t2, t1, t2 - t1, 2 * t1 - t2, par, par / t1, dp, dp - par,
                                        dp_ov - par, t2 / par, t2 / t1)):
            derived[key].append(value)
    for key, values in derived.items():
        print(line(key, values))
EOF

if [ "$mode" = moe ] || [ "$mode" = fsdp ]; then
  comm_variants=(moe-ep2)
  [ "$mode" = fsdp ] && comm_variants=(dp2-distopt dp2-zero3 dp2-zero3-keep)
  for variant in "${comm_variants[@]}"; do
  python3 - "$work" "$rounds" "$warmup" "$variant" <<'EOF'
import json, statistics, sys
work, rounds, warmup, variant = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
print(f"{variant}, rank 0's communication per iteration (medians of the timed iterations), per round:")
for r in range(1, rounds + 1):
    timed = [json.loads(l) for l in open(f"{work}/{variant}_{r}.json")]
    timed = [t for t in timed if t["iteration"] > warmup]
    cells = {}
    for t in timed:
        for group, ops in t.get("comm", {}).items():
            for op, c in ops.items():
                cells.setdefault(f"{group} {op}", []).append(c)
    step = statistics.median(t["iteration_time_ms"] for t in timed)
    print(f"round {r}: step {step:.1f} ms")
    for name, cs in sorted(cells.items()):
        ms = statistics.median(c["ms"] for c in cs)
        print(f"  {name:<24} {statistics.median(c['calls'] for c in cs):5.0f} calls "
              f"{statistics.median(c['bytes'] for c in cs) / 1e6:9.3f} MB  blocked {ms:8.2f} ms "
              f"({100 * ms / step:.1f}% of the step)")
EOF
  done
fi
