#!/usr/bin/env bash
# TensorBoard's event files against --log-json (README, "Logging"): a run of PP 2 on two ranks with
# every TensorBoard flag of Megatron's that tessel writes, evaluations included, then an
# independent reader (tensorboard_events.py: Debian's protobuf and the published schema) checks
# every record's CRCs and that each tag, step and value is --log-json's, at Megatron's cadence.
#   tensorboard.sh TESSEL SOURCE_DIR MPIRUN...
set -uo pipefail
tessel=$1
src=$2
shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}

flags=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --lr 3e-3 --min-lr 3e-4
       --lr-warmup-iters 2 --micro-batch-size 2 --global-batch-size 8 --seed 7 --threads 1
       --data-path "$src/data/kjv-genesis-esther.txt" --pipeline-model-parallel-size 2 --train-iters 5
       --eval-interval 2 --eval-iters 1 --log-interval 1 --tensorboard-log-interval 2)
logging=(--log-timers-to-tensorboard --log-throughput --log-params-norm --log-num-zeros-in-grad
         --log-validation-ppl-to-tensorboard --log-world-size-to-tensorboard --log-memory-to-tensorboard)
timeout 120 "$@" -n 2 "$tessel" train "${flags[@]}" "${logging[@]}" --tensorboard-dir "$work/tb" \
  --log-json "$work/run.jsonl" --wandb-project p --wandb-exp-name e > "$work/out" 2>&1 ||
  { cat "$work/out"; fail "the run failed"; }
[ "$(grep -c "W&B is not reachable" "$work/out")" = 1 ] || { cat "$work/out"; fail "the W&B line is not said once"; }
/usr/bin/python3 "$src/tests/train/tensorboard_events.py" "$work/tb" "$work/run.jsonl" \
  --tensorboard-log-interval 2 --log-interval 1 "${logging[@]}" || fail "the events are not --log-json's"

# Megatron's defaults (the loss scale on, nothing optional) and --no-log-loss-scale-to-tensorboard.
for off in "" --no-log-loss-scale-to-tensorboard; do
  rm -rf "$work/tb"
  timeout 120 "$@" -n 2 "$tessel" train "${flags[@]}" $off --tensorboard-dir "$work/tb" \
    --log-json "$work/run.jsonl" > "$work/out" 2>&1 || { cat "$work/out"; fail "the run $off failed"; }
  /usr/bin/python3 "$src/tests/train/tensorboard_events.py" "$work/tb" "$work/run.jsonl" \
    --tensorboard-log-interval 2 --log-interval 1 $off || fail "the events of the run $off are not --log-json's"
done
# A MoE model with a z-loss and two MTP depths: load_balancing_loss, z_loss and mtp_<d> loss every
# iteration.
rm -rf "$work/tb"
timeout 120 "$@" -n 2 "$tessel" train "${flags[@]}" --arch llama --num-experts 4 --moe-router-topk 2 \
  --moe-aux-loss-coeff 0.01 --moe-z-loss-coeff 0.001 --mtp-num-layers 2 --tensorboard-dir "$work/tb" \
  --log-json "$work/run.jsonl" > "$work/out" 2>&1 || { cat "$work/out"; fail "the MoE and MTP run failed"; }
for key in load_balancing_loss z_loss mtp_losses; do
  grep -q "\"$key\"" "$work/run.jsonl" || fail "--log-json of the MoE and MTP run has no $key"
done
/usr/bin/python3 "$src/tests/train/tensorboard_events.py" "$work/tb" "$work/run.jsonl" \
  --tensorboard-log-interval 2 --log-interval 1 || fail "the events of the MoE and MTP run are not --log-json's"
echo "ok: every event file reads, each tag, step and value is --log-json's"
