#!/bin/sh
# Usage: seed_examples.sh CASE TESSEL MPIRUN...
# The seed's worked examples 4, 6 and 13 (the seed text: docs/DESIGN.md), run by `tessel demo` on two
# ranks under MPIRUN (mpirun with its flags, without -n), their printed values checked line by
# line. CASE: tp-column | tp-mlp | dp | one-rank (every demo run without mpirun must refuse).
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
    ;;
  tp-mlp)
    # Seed example 6: MLP 8 → 32 → 8 over TP 2, against the unsplit MLP on every rank.
    demo tp-mlp
    line "rank 0 holds neurons 0–15 (c_fc columns, c_proj rows: shapes [8, 16] and [16, 8])"
    line "rank 1 holds neurons 16–31 (c_fc columns, c_proj rows: shapes [8, 16] and [16, 8])"
    grep -q "^rank 0 partial sum (4×8) norm [0-9]" "$log" && grep -q "^rank 1 partial sum (4×8) norm [0-9]" "$log" ||
      { echo "FAIL: a rank's partial sum is missing"; failed=1; }
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
  one-rank)
    # Without mpirun every demo stops: one line, exit 1.
    for d in tp-column tp-mlp dp; do
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
