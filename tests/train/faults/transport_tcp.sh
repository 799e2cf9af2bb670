#!/usr/bin/env bash
# The transport between nodes: TP2 × DP2 with sequence parallel and the distributed optimizer
# over Open MPI's TCP transport (--mca btl tcp,self --mca pml ob1, here over the loopback
# interface) follows the shared-memory run bitwise: the same calls, the same reduction order.
. "$(dirname "$0")/lib.sh"
flags=("${model[@]}" --train-iters 8 --eval-iters 0 --tp 2 --sequence-parallel --use-distributed-optimizer)
timeout 120 "${mpirun[@]}" -n 4 "$tessel" train "${flags[@]}" --log-json "$work/shm.jsonl" \
  > "$work/shm.out" 2>&1 || { cat "$work/shm.out"; fail "the shared-memory run failed"; }
timeout 120 "${mpirun[@]}" -n 4 --mca btl tcp,self --mca pml ob1 --mca btl_tcp_if_include lo \
  "$tessel" train "${flags[@]}" --log-json "$work/tcp.jsonl" > "$work/tcp.out" 2>&1 ||
  { cat "$work/tcp.out"; fail "the TCP run failed"; }
same_records "$work/shm.jsonl" "$work/tcp.jsonl"
