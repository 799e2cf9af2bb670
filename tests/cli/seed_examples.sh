#!/bin/sh
# Usage: seed_examples.sh CASE TESSEL MPIRUN...
# The seed's worked examples 4, 6, 7, 10, 11 and 13 (the seed text: docs/DESIGN.md), run by `tessel
# demo` on two ranks under MPIRUN (mpirun with its flags, without -n), their printed values checked
# line by line. CASE: tp-column | tp-mlp | dp | pp | ep | cp | one-rank (every demo run without
# mpirun must refuse).
# Each case also runs other inputs than the seed's, so that a value printed from a constant
# instead of computed fails.
case_name=$1
tessel=$2
shift 2
mpirun=$*  # split again where used: paths without spaces
log=$(mktemp)
trap 'rm -f "$log"' EXIT
failed=0

# demo ARGS...: runs `tessel demo ARGS` on 2 ranks; its output goes to $log and is shown.
demo() {
  echo "\$ mpirun -n 2 tessel demo $*"
  timeout --kill-after=5 60 $mpirun -n 2 "$tessel" demo "$@" >"$log" 2>&1
  rc=$?
  cat "$log"
  if [ "$rc" -ne 0 ]; then
    echo "FAIL: exit code $rc"
    failed=1
  fi
}
# line TEXT: the output has TEXT as a whole line.
line() {
  if ! grep -qxF -- "$1" "$log"; then
    echo "FAIL: no line \"$1\""
    failed=1
  fi
}

# small_differences COUNT: COUNT lines say "max difference D", every D at most 1e-5.
small_differences() {
  sed -n 's/.*max difference \([0-9.e+-]*\).*/\1/p' "$log" | awk -v want="$1" '
    { n++; if ($1 == "" || $1 + 0 > 1e-5) bad = bad " " $1 }
    END { if (n != want || bad != "") { print "FAIL: " n " differences (want " want "), too large:" bad; exit 1 } }' ||
    failed=1
}

# after PREFIX: what follows PREFIX on the output's first line that starts with it.
after() {
  awk -v p="$1" 'index($0, p) == 1 { print substr($0, length(p) + 1); exit }' "$log"
}

# same_text A B: the two texts are equal and not empty (what one rank sent, what the other got).
same_text() {
  if [ -z "$1" ] || [ "$1" != "$2" ]; then
    echo "FAIL: \"$1\" and \"$2\" differ"
    failed=1
  fi
}

# same_on_every_rank PATTERN: the lines matching PATTERN ("rank R ..." each) say the same after
# their rank.
same_on_every_rank() {
  count=$(grep -- "$1" "$log" | sed 's/^rank [0-9]* //' | sort -u | wc -l)
  if [ "$count" -ne 1 ]; then
    echo "FAIL: the ranks disagree on \"$1\""
    failed=1
  fi
}

case "$case_name" in
  tp-column)
    # Seed example 4: identity W (4×4) split by columns, X = [1,2,3,4].
    demo tp-column
    line "rank 0 holds columns 0–1 of W (shape [4, 2])"
    line "rank 0 computes [1, 2]"
    line "rank 1 holds columns 2–3 of W (shape [4, 2])"
    line "rank 1 computes [3, 4]"
    line "rank 0 gathered [1, 2, 3, 4] (unsplit X·W: max difference 0.0e+00)"
    line "rank 1 gathered [1, 2, 3, 4] (unsplit X·W: max difference 0.0e+00)"
    demo tp-column --x "2,4,6,8,10,12"
    line "rank 0 computes [2, 4, 6]"
    line "rank 1 computes [8, 10, 12]"
    line "rank 1 gathered [2, 4, 6, 8, 10, 12] (unsplit X·W: max difference 0.0e+00)"
    demo tp-column --weight random --seed 7
    small_differences 2
    same_on_every_rank "gathered"
    # A result that is not a number is never confirmed: NaN in X makes the check fail, exit 1.
    echo "\$ mpirun -n 2 tessel demo tp-column --x nan,1,2,3"
    timeout --kill-after=5 60 $mpirun -n 2 "$tessel" demo tp-column --x nan,1,2,3 >"$log" 2>&1
    rc=$?
    cat "$log"
    [ "$rc" -ne 0 ] || { echo "FAIL: exit code 0 for a NaN result"; failed=1; }
    line "rank 0 gathered [nan, nan, nan, nan] (unsplit X·W: max difference inf)"
    line "tessel: error: demo tp-column: the gathered Y differs from one process's by inf"
    ;;
  tp-mlp)
    # Seed example 6: MLP 8 → 32 → 8 over TP 2, against the unsplit MLP on every rank.
    demo tp-mlp
    line "rank 0 holds neurons 0–15 (c_fc columns, c_proj rows: shapes [8, 16] and [16, 8])"
    line "rank 1 holds neurons 16–31 (c_fc columns, c_proj rows: shapes [8, 16] and [16, 8])"
    # Every token's two partial sums, as printed, add up to the all-reduced values printed.
    for t in 0 1 2 3; do
      printf '%s\n%s\n%s\n' "$(after "rank 0 partial sum, token $t: ")" \
        "$(after "rank 1 partial sum, token $t: ")" \
        "$(after "rank 0 all-reduced (the partial sums added), token $t: ")" | tr -d '[]' | awk -F', ' '
        { for (i = 1; i <= NF; i++) v[NR, i] = $i; n = NF }
        END { if (NR != 3 || n != 8) { print "FAIL: token rows missing"; exit 1 }
              for (i = 1; i <= n; i++) { d = v[1, i] + v[2, i] - v[3, i]; if (d < 0) d = -d
                if (d > 1e-3 * (1 + (v[3, i] < 0 ? -v[3, i] : v[3, i]))) { print "FAIL: column " i " does not add up"; exit 1 } } }' ||
        failed=1
    done
    small_differences 2
    same_on_every_rank "output norm"
    demo tp-mlp --hidden-size 6 --ffn-hidden-size 20 --tokens 3 --seed 5
    line "rank 0 holds neurons 0–9 (c_fc columns, c_proj rows: shapes [6, 10] and [10, 6])"
    line "rank 1 holds neurons 10–19 (c_fc columns, c_proj rows: shapes [6, 10] and [10, 6])"
    small_differences 2
    ;;
  dp)
    # Seed example 13: w = 0.5, gradients 0.1 and 0.3, lr 1: averaged 0.2, w = 0.3 on both.
    demo dp
    line "rank 0 before: w = 0.5, gradient from its own data 0.1 (sent as 0.1 / 2 = 0.05)"
    line "rank 1 before: w = 0.5, gradient from its own data 0.3 (sent as 0.3 / 2 = 0.15)"
    line "rank 0 after all-reduce: gradient 0.2"
    line "rank 1 after all-reduce: gradient 0.2"
    line "rank 0 after the step: w = 0.5 - 1 × 0.2 = 0.3"
    line "rank 1 after the step: w = 0.5 - 1 × 0.2 = 0.3"
    line "replicas identical: w = 0.3 on all 2 ranks"
    demo dp --w 1 --grads "0.2,0.6" --lr 0.5
    line "rank 0 after all-reduce: gradient 0.4"
    line "rank 1 after the step: w = 1 - 0.5 × 0.4 = 0.8"
    line "replicas identical: w = 0.8 on all 2 ranks"
    ;;
  pp)
    # Seed example 7: 8 layers over PP 2; rank 0 sends H4 [4, 4, 8], rank 1 sends dL/dH4 back.
    demo pp
    line "rank 0 is stage 0: layers 1–4"
    line "rank 1 is stage 1: layers 5–8"
    sent=$(after "rank 0 forward layers 1–4, sends H4 to rank 1: [4, 4, 8]; ")
    same_text "$sent" "$(after "rank 1 receives H4 from rank 0: [4, 4, 8]; ")"
    same_text "$(after "rank 1 backward layers 8–5, sends dL/dH4 to rank 0: [4, 4, 8]; ")" \
      "$(after "rank 0 receives dL/dH4 from rank 1: [4, 4, 8]; ")"
    grep -q "^rank 1 forward layers 5–8, loss ½·ΣH8² = [0-9]" "$log" || { echo "FAIL: no loss"; failed=1; }
    grep -q "^rank 0 backward layers 4–1: dL/dX \[4, 4, 8\]; " "$log" || { echo "FAIL: no dL/dX"; failed=1; }
    small_differences 2
    demo pp --seed 7
    other=$(after "rank 0 forward layers 1–4, sends H4 to rank 1: [4, 4, 8]; ")
    same_text "$other" "$(after "rank 1 receives H4 from rank 0: [4, 4, 8]; ")"
    [ "$other" != "$sent" ] || { echo "FAIL: --seed 7 sends the same H4"; failed=1; }
    small_differences 2
    ;;
  ep)
    # Seed example 10: 8 experts over EP 2; tokens A, B (rank 0) and C (rank 1) to experts 1, 6, 3.
    demo ep
    line "rank 0 holds experts 0–3 and tokens A B"
    line "rank 1 holds experts 4–7 and tokens C"
    for route in "A on rank 0: the router picks expert 1 (" "B on rank 0: the router picks expert 6 (" \
                 "C on rank 1: the router picks expert 3 ("; do
      grep -qF -- "token $route" "$log" || { echo "FAIL: no route \"token $route\""; failed=1; }
    done
    line "token A → expert 1: stays on rank 0"
    line "token B → expert 6: sent to rank 1"
    line "token C → expert 3: sent to rank 0"
    line "rank 1 runs expert 6 on token B (from rank 0)"
    line "rank 0 runs expert 3 on token C (from rank 1)"
    grep -q "^token A back on rank 0 = 0\.[0-9]* · expert 1(A) + 0\.[0-9]* · expert [0-7](A) = \[" "$log" ||
      { echo "FAIL: token A's weighted sum is missing"; failed=1; }
    small_differences 2
    demo ep --route "4,0,7,2" --moe-router-topk 1
    line "rank 1 holds experts 4–7 and tokens C D"
    line "token A → expert 4: sent to rank 1"
    line "token C → expert 7: stays on rank 1"
    line "token D → expert 2: sent to rank 0"
    grep -q "^token B back on rank 0 = 1\.0000 · expert 0(B) = \[" "$log" ||
      { echo "FAIL: token B's sum is missing"; failed=1; }
    small_differences 2
    # Every bad flag in one message, exit 1, before any communication.
    echo "\$ mpirun -n 2 tessel demo ep --route 9,1.5 --moe-router-topk 0"
    timeout --kill-after=5 60 $mpirun -n 2 "$tessel" demo ep --route 9,1.5 --moe-router-topk 0 >"$log" 2>&1
    rc=$?
    cat "$log"
    [ "$rc" -ne 0 ] || { echo "FAIL: exit code 0"; failed=1; }
    line "tessel: error: --route: 9 is not an expert (0–7); --route: 1.5 is not an expert (0–7); --moe-router-topk 0: not between 1 and 8"
    ;;
  cp)
    # Seed example 11: 8 positions over CP 2, Megatron's causal balance: chunks {0, 3} and {1, 2}.
    demo cp
    line "rank 0 holds positions 0, 1, 6, 7 (chunks 0 and 3): 18 pairs; the simple split's positions 0–3 would be 10"
    line "rank 1 holds positions 2, 3, 4, 5 (chunks 1 and 2): 18 pairs; the simple split's positions 4–7 would be 26"
    grep -qF "rank 0 step 0: K/V of positions 0, 1, 6, 7 (its own) → partial lse [" "$log" &&
      grep -qF "rank 0 step 1: K/V of positions 2, 3, 4, 5 (from rank 1) → partial lse [-inf, -inf, " "$log" &&
      grep -qF "rank 1 step 1: K/V of positions 0, 1, 6, 7 (from rank 0) → partial lse [" "$log" ||
      { echo "FAIL: a ring step is missing"; failed=1; }
    # The ring's merged result, as printed, is the one-process attention's.
    for r in 0 1; do
      merged=$(after "rank $r merged by lse: ")
      full=$(grep "^rank $r full attention in one process" "$log" | sed 's/^[^:]*: //; s/; max difference.*//')
      same_text "$merged" "$full"
    done
    small_differences 2
    demo cp --seq-length 16 --seed 3
    line "rank 0 holds positions 0, 1, 2, 3, 12, 13, 14, 15 (chunks 0 and 3): 68 pairs; the simple split's positions 0–7 would be 36"
    line "rank 1 holds positions 4, 5, 6, 7, 8, 9, 10, 11 (chunks 1 and 2): 68 pairs; the simple split's positions 8–15 would be 100"
    small_differences 2
    ;;
  one-rank)
    # Without mpirun every demo stops: one line, exit 1.
    for d in tp-column tp-mlp dp pp ep cp; do
      echo "\$ tessel demo $d"
      timeout 30 "$tessel" demo "$d" >"$log" 2>&1
      rc=$?
      cat "$log"
      [ "$rc" -eq 1 ] || { echo "FAIL: exit code $rc, want 1"; failed=1; }
      line "tessel: error: tessel demo $d needs 2 ranks, this run has 1: run it as \`mpirun -n 2 tessel demo $d\`"
      [ "$(wc -l <"$log")" -eq 1 ] || { echo "FAIL: more than one line"; failed=1; }
    done
    ;;
  *)
    echo "unknown case $case_name"
    exit 2
    ;;
esac

[ "$failed" -eq 0 ] && echo "ok: seed example $case_name"
exit "$failed"
