#!/bin/sh
# Usage: expect_job_fails.sh SECONDS TEXT COMMAND...
# Passes when COMMAND (an mpirun job whose rank fails on purpose) exits non-zero within SECONDS
# and its output contains TEXT (a fixed string; empty: anything). Fails when the job succeeds,
# says something else, or is still running after SECONDS (a hang: then it is killed).
limit=$1
text=$2
shift 2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s)
timeout --kill-after=5 "$limit" "$@" >"$log" 2>&1
rc=$?
elapsed=$(($(date +%s) - start))
cat "$log"
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  echo "FAIL: the job was still running after $limit s (a dead rank left the others waiting)"
  exit 1
fi
if [ "$rc" -eq 0 ]; then
  echo "FAIL: the job exited 0 although a rank failed"
  exit 1
fi
if [ -n "$text" ] && ! grep -qF -- "$text" "$log"; then
  echo "FAIL: the output lacks \"$text\""
  exit 1
fi
echo "ok: the job ended with exit code $rc after $elapsed s"
