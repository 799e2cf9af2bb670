#!/usr/bin/env bash
# Usage: bench/loaded_suite.sh [--load busy|build] [--loaded-only] [--fresh] [BUILD]
# The whole test suite as the machine is, then again while a CPU-heavy job runs beside it, to
# show that no test fails for lack of time on a loaded machine (bench/RESULTS.md, "Test tiers"):
#   busy   two busy loops (`yes > /dev/null`), one per core of a 2-core machine (the default);
#   build  a second build of tessel from scratch in a folder of its own (cmake --build -j 2, no
#          compiler cache), started again whenever it finishes, until the suite ends.
# The suite is `ctest --timeout 600 -j 2` in BUILD (default build: scripts/test.sh's last step,
# on a built tree), or with --fresh `bash scripts/test.sh` in a fresh clone of this checkout (its
# build included; the clone's tokenizer references come from the npm registry). Prints each run's
# wall time, its result and /proc/loadavg at its end; exits 1 when a run failed.
set -uo pipefail
cd "$(dirname "$0")/.."
load=busy
quiet=1
fresh=0
build=build
while [ $# -gt 0 ]; do
  case $1 in
    --load) load=$2; shift 2 ;;
    --loaded-only) quiet=0; shift ;;
    --fresh) fresh=1; shift ;;
    *) build=$1; shift ;;
  esac
done
work=$(mktemp -d)
load_pids=()
stop_load() {
  for pid in "${load_pids[@]}"; do kill -- "-$pid" 2>/dev/null; done
  load_pids=()
}
trap 'stop_load; rm -rf "$work"' EXIT

start_load() {
  case $load in
    busy)
      for _ in 1 2; do setsid bash -c 'exec yes > /dev/null' & load_pids+=($!); done ;;
    build)
      setsid bash -c 'while true; do
                        rm -rf "$0" && cmake -S . -B "$0" -DCMAKE_BUILD_TYPE=Release > /dev/null &&
                          cmake --build "$0" -j 2 --target tessel > /dev/null 2>&1
                      done' "$work/load-build" &
      load_pids+=($!) ;;
    *) echo "loaded_suite: unknown load $load (busy or build)" >&2; exit 2 ;;
  esac
}

# Runs the suite once; NAME labels its lines. Returns the suite's exit code.
run_suite() {
  local name=$1 start rc
  start=$(date +%s)
  if [ "$fresh" = 1 ]; then
    rm -rf "$work/clone" && git clone -q . "$work/clone" &&
      (cd "$work/clone" && bash scripts/test.sh) > "$work/$name.log" 2>&1
  else
    (cd "$build" && ctest --timeout 600 -j 2) > "$work/$name.log" 2>&1
  fi
  rc=$?
  echo "$name: $(($(date +%s) - start)) s wall, exit $rc, load average $(cut -d' ' -f1-3 /proc/loadavg)"
  grep -E 'tests passed|tests failed' "$work/$name.log" | sed 's/^/  /'
  sed -n '/The following tests FAILED/,$p' "$work/$name.log" | sed 's/^/  /'
  return $rc
}

status=0
if [ "$quiet" = 1 ]; then run_suite "as the machine is" || status=1; fi
start_load
echo "load: $load (started; load average $(cut -d' ' -f1-3 /proc/loadavg))"
run_suite "under load" || status=1
stop_load
exit $status
