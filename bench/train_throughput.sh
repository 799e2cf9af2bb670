#!/bin/bash
# Training throughput of tessel against PyTorch (bench/run_pytorch.sh, its best setting) on one of
# the two benchmark models, same model, batch, corpus and thread count on both sides. The runs
# alternate A B A B ... so that load from other processes on the shared machine falls on both;
# each pair gives a ratio and the summary is the median ratio (bench/README.md).
#
#   bench/train_throughput.sh [--rounds R] [--iters N] [--warmup W] CONFIG THREADS
#   bench/train_throughput.sh --gemm [--rounds R] CONFIG THREADS
#   bench/train_throughput.sh --against OTHER_TESSEL [--rounds R] CONFIG THREADS
#   bench/train_throughput.sh --isa avx2 [any of the above]
#
# CONFIG is tiny or small. Each run does W untimed iterations, then N timed ones. tessel's rate is
# the median tokens_per_s of the timed iterations in its --log-json; PyTorch's is batch·seq over
# its median_step_ms (the same statistic), with its own tokens_per_s (total tokens / total time)
# shown beside the mean-based tessel figure.
#
# --gemm instead alternates `tessel train --profile-report` (under /usr/bin/time -v) with
# build/bench/gemm_bench on the same model: tessel's GFLOP/s inside gemm calls, and its whole
# step's (the step's GEMM flops over the step's time), each as a percentage of oneDNN's on the
# model's shapes as gemm_bench measures them alone; and tessel's peak RSS against the analytic
# sum --profile-report prints.
#
# --against OTHER_TESSEL alternates this build's tessel with another tessel binary (e.g. one built
# from the commit before a change) on the same run: tok/s and peak RSS (/usr/bin/time -v) of
# each, and their ratios.
#
# --isa avx2 measures what a user with an AVX2-only CPU gets, on any x86-64 machine: tessel from
# build-avx2/ (scripts/build-avx2.sh builds it; on a CPU without AVX-512 the native build already
# is one) with oneDNN capped at AVX2 (ONEDNN_MAX_CPU_ISA), PyTorch with the faster of OpenBLAS's
# AVX2 kernels (Haswell, Zen), gemm_bench from build-avx2/ too.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tessel=${TESSEL:-$root/build/tessel}
gemm_bench=${GEMM_BENCH:-$root/build/bench/gemm_bench}
corpus=$root/data/kjv-genesis-esther.txt

mode=throughput rounds= iters= warmup= other= isa=native
while [ $# -gt 0 ]; do
  case $1 in
    --gemm) mode=gemm; shift ;;
    --against) mode=against; other=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --isa) isa=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    -h|--help) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "train_throughput.sh: unknown flag $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
if [ $# -ne 2 ]; then
  echo "usage: train_throughput.sh [--gemm] [--rounds R] [--iters N] [--warmup W] tiny|small THREADS" >&2
  exit 2
fi
config=$1 threads=$2
case $isa in
  native) ;;
  avx2)
    if grep -qw avx512f /proc/cpuinfo; then
      tessel=${TESSEL:-$root/build-avx2/tessel} gemm_bench=${GEMM_BENCH:-$root/build-avx2/bench/gemm_bench}
    fi
    export ONEDNN_MAX_CPU_ISA=AVX2 BENCH_OPENBLAS_CANDIDATES="Haswell Zen" ;;
  *) echo "train_throughput.sh: --isa must be native or avx2, not $isa" >&2; exit 2 ;;
esac

source "$root/bench/configs.sh"
bench_config "$config" train_throughput.sh
batch=$micro
iters=${iters:-$def_iters} warmup=${warmup:-$def_warmup} rounds=${rounds:-$def_rounds}
for f in "$tessel" "$root/bench/run_pytorch.sh"; do
  [ -x "$f" ] || { echo "train_throughput.sh: $f not found (build first)" >&2; exit 1; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

tessel_args=(train "${gpt2_bench_model[@]}" --vocab-size "$vocab" --seq-length "$seq" --hidden-size "$hidden"
  --num-layers "$layers" --num-attention-heads "$heads" --micro-batch-size "$batch"
  --global-batch-size "$batch" --train-iters $((warmup + iters)) --eval-iters 0 --log-interval 1
  --data-path "$corpus" --threads "$threads")

load() { cut -d' ' -f1-3 /proc/loadavg; }

cpu=$(cpu_model)
echo "config $config: gpt2 V$vocab T$seq d$hidden L$layers H$heads B$batch, $threads thread(s)," \
  "$warmup warm-up + $iters timed iterations, $rounds rounds, $(nproc) CPUs, $(date -u '+%F %T') UTC"
echo "cpu: $cpu; ISA $isa ($tessel)"
echo "load before: $(load)"

run_tessel() {  # $1: log file [$2: binary, $3: /usr/bin/time -v output]; prints "median mean" tok/s
  local timer=()
  [ -n "${3:-}" ] && timer=(/usr/bin/time -v -o "$3")
  (cd "$work" && OMP_NUM_THREADS=$threads "${timer[@]}" "${2:-$tessel}" "${tessel_args[@]}" \
     --log-json "$1" >/dev/null)
  python3 - "$1" "$warmup" <<'EOF'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
timed = [r for r in rows if r["iteration"] > int(sys.argv[2])]
tokens = timed[0]["tokens_per_s"] * timed[0]["iteration_time_ms"] / 1e3  # tokens per iteration
mean = tokens * len(timed) / (sum(r["iteration_time_ms"] for r in timed) / 1e3)
print(f'{statistics.median(r["tokens_per_s"] for r in timed):.1f} {mean:.1f}')
EOF
}

run_pytorch() {  # $1: output file; prints "median_tok_s mean_tok_s"
  "$root/bench/run_pytorch.sh" --threads "$threads" --vocab "$vocab" --seq "$seq" \
    --hidden "$hidden" --layers "$layers" --heads "$heads" --batch "$batch" --iters "$iters" \
    --warmup "$warmup" --data-path "$corpus" >"$1"
  python3 - "$1" <<'EOF'
import json, sys
r = json.loads(open(sys.argv[1]).read().splitlines()[-1])
print(f'{r["batch"] * r["seq"] / (r["median_step_ms"] / 1e3):.1f} {r["tokens_per_s"]:.1f}')
EOF
}

summary() {  # stdin: one line of numbers per round; $@: column names
  python3 -c '
import statistics, sys
names = sys.argv[1:]
cols = list(zip(*[map(float, line.split()) for line in sys.stdin if line.strip()]))
for name, col in zip(names, cols):
    print(f"{name:<28} min {min(col):>9.3f}  median {statistics.median(col):>9.3f}  max {max(col):>9.3f}")
' "$@"
}

if [ "$mode" = throughput ]; then
  pick_openblas_coretype "$threads" "$work"
  printf '%-5s %12s %12s %7s   %12s %12s %7s   %-18s %s\n' round "tessel" "pytorch" ratio \
    "tessel mean" "torch mean" ratio "load (1 5 15 min)" "cpu, OpenBLAS core type"
  : >"$work/rows"
  for r in $(seq 1 "$rounds"); do
    read -r t_med t_mean < <(run_tessel "$work/tessel_$r.json")
    read -r p_med p_mean < <(run_pytorch "$work/pytorch_$r.json")
    ratio=$(python3 -c "print(f'{$t_med / $p_med:.3f}')")
    ratio_mean=$(python3 -c "print(f'{$t_mean / $p_mean:.3f}')")
    round_load=$(load)
    printf '%-5s %12s %12s %7s   %12s %12s %7s   %-18s %s\n' "$r" "$t_med" "$p_med" "$ratio" \
      "$t_mean" "$p_mean" "$ratio_mean" "$round_load" "$cpu, $BENCH_OPENBLAS_CORETYPE"
    echo "$t_med $p_med $ratio $ratio_mean ${round_load%% *}" >>"$work/rows"
  done
  echo "summary over $rounds rounds (tok/s are medians of the timed iterations), cpu $cpu," \
    "PyTorch's OpenBLAS core type $BENCH_OPENBLAS_CORETYPE:"
  summary "tessel tok/s" "pytorch tok/s" "ratio tessel/pytorch" "ratio, mean-based" \
    <"$work/rows"
  # The result as a row of RESULTS.md's throughput table, with the CPU and the core type.
  python3 -c '
import statistics, sys
command, cpu, core = sys.argv[1:4]
rows = [list(map(float, line.split())) for line in sys.stdin if line.strip()]
tessel, torch, ratio, _, load = zip(*rows)
print(f"RESULTS.md row: | `{command}` | {cpu} | OpenBLAS {core} | {min(load):.1f}–{max(load):.1f} | "
      f"{statistics.median(tessel):,.0f} | {statistics.median(torch):,.0f} | "
      f"{min(ratio):.2f} / **{statistics.median(ratio):.2f}** / {max(ratio):.2f} |")
' "$([ "$isa" = avx2 ] && echo '--isa avx2 ')$config $threads" "$cpu" "$BENCH_OPENBLAS_CORETYPE" <"$work/rows"
  exit 0
fi

if [ "$mode" = against ]; then
  [ -x "$other" ] || { echo "train_throughput.sh: $other not found" >&2; exit 1; }
  [ -x /usr/bin/time ] || { echo "train_throughput.sh: /usr/bin/time not found (apt-get install time)" >&2; exit 1; }
  echo "this: $tessel"
  echo "other: $other"
  rss_of() { awk -F': ' '/Maximum resident set size/ {printf "%.1f", $2 / 1024}' "$1"; }
  printf '%-5s %12s %12s %7s   %10s %10s %7s   %s\n' round "this tok/s" "other tok/s" ratio \
    "this MiB" "other MiB" ratio "load (1 5 15 min)"
  : >"$work/rows"
  for r in $(seq 1 "$rounds"); do
    read -r a_med _ < <(run_tessel "$work/a_$r.json" "$tessel" "$work/time_a")
    read -r b_med _ < <(run_tessel "$work/b_$r.json" "$other" "$work/time_b")
    a_rss=$(rss_of "$work/time_a") b_rss=$(rss_of "$work/time_b")
    ratio=$(python3 -c "print(f'{$a_med / $b_med:.3f}')")
    rss_ratio=$(python3 -c "print(f'{$a_rss / $b_rss:.3f}')")
    printf '%-5s %12s %12s %7s   %10s %10s %7s   %s\n' "$r" "$a_med" "$b_med" "$ratio" "$a_rss" "$b_rss" \
      "$rss_ratio" "$(load)"
    echo "$a_med $b_med $ratio $a_rss $b_rss $rss_ratio" >>"$work/rows"
  done
  echo "summary over $rounds rounds, cpu $cpu:"
  summary "this tok/s" "other tok/s" "ratio this/other" "this peak RSS MiB" "other peak RSS MiB" \
    "RSS ratio this/other" <"$work/rows"
  exit 0
fi

# --gemm: tessel --profile-report under /usr/bin/time -v, alternating with gemm_bench on the same model.
[ -x "$gemm_bench" ] || { echo "train_throughput.sh: $gemm_bench not found" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "train_throughput.sh: /usr/bin/time not found (apt-get install time)" >&2; exit 1; }
printf '%-5s %10s %10s %10s %7s %7s   %9s %9s %9s %6s   %s\n' round "tessel" "oneDNN,all" \
  "oneDNN,step" "% step" "% whole" "RSS MiB" "time -v" "analytic" ratio "load"
: >"$work/rows"
for r in $(seq 1 "$rounds"); do
  (cd "$work" && OMP_NUM_THREADS=$threads /usr/bin/time -v -o "$work/time_$r" "$tessel" \
    "${tessel_args[@]}" --profile-report >"$work/profile_$r")
  "$gemm_bench" --model "$config" --threads "$threads" --min-seconds 0.2 >"$work/gemm_$r"
  # The step-weighted oneDNN rate: every product at gemm_bench's rate, weighted by how often a
  # training step does it: each linear product once per layer, the LM head's once, and each of
  # the two attention shapes 3 times (forward, two backward products) per layer, sample and head.
  row=$(python3 - "$work/profile_$r" "$work/time_$r" "$work/gemm_$r" "$layers" "$batch" "$heads" <<'EOF'
import re, sys
profile, timev, gemm = (open(p).read() for p in sys.argv[1:4])
layers, batch, heads = map(int, sys.argv[4:7])
tessel_gflops = float(re.search(r"profile: gemm ([\d.]+) GFLOP/s", profile).group(1))
whole_step_gflops = float(re.search(r"whole step ([\d.]+) GFLOP/s", profile).group(1))
rss, analytic = map(float, re.search(r"peak RSS ([\d.]+) MiB; analytic ([\d.]+) MiB", profile).groups())
time_rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", timev).group(1)) / 1024
all_rate = float(re.search(r"time-weighted GFLOP/s: oneDNN ([\d.]+)", gemm).group(1))
flops = seconds = 0.0
for line in gemm.splitlines():
    row = re.match(r"(\S+)\s+(.+?)\s+[NT]{2}\s+(\d+)\s+(\d+)\s+(\d+)\s+([\d.]+)\s", line)
    if not row or row.group(1) == "peak":
        continue
    name = row.group(2)
    m, n, k, rate = int(row.group(3)), int(row.group(4)), int(row.group(5)), float(row.group(6))
    count = layers * batch * heads * 3 if name.startswith("attn ") and "head" in name \
        else 1 if name.startswith("lm-head") else layers
    flops += count * 2.0 * m * n * k
    seconds += count * 2.0 * m * n * k / (rate * 1e9)
step_rate = flops / seconds / 1e9
print(f"{tessel_gflops:.1f} {all_rate:.1f} {step_rate:.1f} {100 * tessel_gflops / step_rate:.1f} "
      f"{100 * whole_step_gflops / step_rate:.1f} "
      f"{rss:.1f} {time_rss:.1f} {analytic:.1f} {rss / analytic:.3f}")
EOF
)
  printf '%-5s %10s %10s %10s %7s %7s   %9s %9s %9s %6s   %s\n' "$r" $row "$(load)"
  echo "$row" >>"$work/rows"
done
echo "summary over $rounds rounds (GFLOP/s inside gemm calls; oneDNN alone on the model's shapes)," \
  "cpu $cpu:"
summary "tessel gemm GFLOP/s" "oneDNN, products once" "oneDNN, step-weighted" \
  "tessel % of step-weighted" "whole step % of step-weighted" "peak RSS MiB (--profile-report)" "peak RSS MiB (time -v)" \
  "analytic MiB" "RSS / analytic" <"$work/rows"
echo "last tessel profile:"; grep '^profile' "$work/profile_$rounds"
