#!/usr/bin/env bash
# Usage: scripts/train-with-restarts.sh [--max-restarts N] [--restart-delay SECONDS] -- COMMAND...
#
# Runs COMMAND — an `mpirun ... tessel train ... --save DIR --load DIR` job (or srun, or one
# process) — and launches it again when it fails, up to --max-restarts times (default 3), as
# torchrun's --max-restarts does. Each attempt resumes from the newest committed save in DIR
# (`--load` reads DIR/latest_checkpointed_iteration.txt, which only ever names a complete save),
# so with periodic saves (--save-interval) a job killed at any moment finishes with the same
# losses as one never interrupted; --log-json keeps the records up to the save it resumed from.
#
# SIGTERM, SIGINT, SIGUSR1 and SIGUSR2 sent to this script reach the job as SIGUSR1, which Open
# MPI's mpirun forwards to every rank (a SIGTERM to mpirun itself kills the ranks after
# --mca odls_base_sigkill_timeout seconds, and mpirun then exits 1 whatever they did). With
# `tessel train --exit-signal-handler` the ranks finish the iteration, save and exit 0; so does
# this script. A job it was asked to stop is not restarted.
set -u

max_restarts=3
delay=1
usage() {
  echo "usage: $0 [--max-restarts N] [--restart-delay SECONDS] -- COMMAND..." >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case $1 in
    --max-restarts) [ $# -ge 2 ] || usage; max_restarts=$2; shift 2 ;;
    --restart-delay) [ $# -ge 2 ] || usage; delay=$2; shift 2 ;;
    --) shift; break ;;
    -*) usage ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || usage
case $max_restarts in '' | *[!0-9]*) echo "$0: --max-restarts $max_restarts is not a whole number" >&2; exit 2 ;; esac

stopping=0
job=
forward() {
  stopping=1
  if [ -n "$job" ]; then kill -USR1 "$job" 2>/dev/null; fi
}
trap forward TERM INT USR1 USR2

attempt=0
while :; do
  "$@" &
  job=$!
  # wait returns early when a trapped signal arrives: wait again until the job has ended.
  while :; do
    wait "$job"
    rc=$?
    kill -0 "$job" 2>/dev/null || break
  done
  job=
  if [ "$rc" -eq 0 ]; then exit 0; fi
  if [ "$stopping" -eq 1 ]; then
    echo "train-with-restarts: the job was asked to stop and exited with $rc; not restarting" >&2
    exit "$rc"
  fi
  if [ "$attempt" -ge "$max_restarts" ]; then
    echo "train-with-restarts: the job failed (exit $rc) after $attempt restarts; giving up" >&2
    exit "$rc"
  fi
  attempt=$((attempt + 1))
  echo "train-with-restarts: the job exited with $rc; restart $attempt of $max_restarts from the last committed save" >&2
  sleep "$delay"
done
