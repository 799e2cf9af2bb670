#!/usr/bin/python3
"""Lists every time limit of the test suite that is under 10x the run time it guards.

Two kinds of limit:
  - each ctest case's TIMEOUT (`ctest --show-only=json-v1`) against its measured run time
    (Testing/Temporary/CTestCostData.txt, which ctest writes after a run: an average over runs);
  - each `timeout N COMMAND` a test runs (tests/parallel/equivalence_test.cpp, tests/support/,
    tests/train/faults/*.sh, tests/mpi/expect_job_fails.sh, ...) against that command's run time:
    with --run, the suite runs (`ctest -j 2 --timeout 600`) with a `timeout` on the PATH that runs
    the real one and logs each limit and how long its command took (build/timeouts.log).

Usage: bench/test_timeouts.py [--build build] [--run [CTEST_ARGS...]]
Exits 1 when it lists any limit under 10x; run it after a suite run on a quiet machine.
"""
import argparse
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile

MARGIN = 10

# Becomes the real timeout (exec: the same process, so that the tests that signal timeout's child
# signal the same process as without it) after starting a watcher, detached from it (not its
# child), that appends "START END<TAB>CALLER<TAB>ARGS" to $TESSEL_TIMEOUT_LOG once it has ended,
# the caller being the process that ran `timeout` (past the `sh -c` of popen).
SHIM = """#!/bin/bash
start=$(date +%s.%N)
pid=$$
parent=$PPID
caller=$(tr '\\0' ' ' < /proc/$parent/cmdline)
case $caller in
  "sh -c "*|"/bin/sh -c "*)
    parent=$(cut -d' ' -f4 /proc/$parent/stat)
    caller=$(tr '\\0' ' ' < /proc/$parent/cmdline) ;;
esac
caller=${{caller//$'\\n'/ }}
args=$*
( (while read -r _ _ state _ < /proc/$pid/stat 2>/dev/null && [ "$state" != Z ]; do sleep 0.05; done
   printf '%s %s\\t%s\\t%s\\n' "$start" "$(date +%s.%N)" "${{caller:0:300}}" "${{args//$'\\n'/ }}" \\
     >> "$TESSEL_TIMEOUT_LOG") < /dev/null > /dev/null 2>&1 & )
exec {real} "$@"
"""


def seconds(text):
    """GNU timeout's DURATION: a number with an optional s, m, h or d suffix."""
    scale = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    return float(text[:-1]) * scale[text[-1]] if text[-1] in scale else float(text)


def test_of(caller):
    """The test a caller is: a GoogleTest case's name, a script's name, or the command itself."""
    if "--gtest_filter=" in caller:
        return caller.split("--gtest_filter=")[1].split()[0]
    scripts = [os.path.basename(w) for w in caller.split() if w.endswith(".sh")]
    return scripts[0] if scripts else caller[:60]


def limit_and_command(args):
    """The DURATION and COMMAND of `timeout [OPTION]... DURATION COMMAND...`."""
    words = args.split()
    i = 0
    while i < len(words) and words[i].startswith("-"):
        i += 2 if words[i] in ("-k", "-s") else 1  # -k DURATION, -s SIGNAL take a value
    return seconds(words[i]), " ".join(words[i + 1:])


def ctest_limits(build):
    """Each test's TIMEOUT (None: ctest's --timeout or its default applies)."""
    listing = json.loads(subprocess.run(["ctest", "--show-only=json-v1"], cwd=build, check=True,
                                        capture_output=True, text=True).stdout)
    limits = {}
    for test in listing["tests"]:
        props = {p["name"]: p["value"] for p in test.get("properties", [])}
        limits[test["name"]] = props.get("TIMEOUT")
    return limits


def ctest_costs(build):
    costs = {}
    path = os.path.join(build, "Testing", "Temporary", "CTestCostData.txt")
    with open(path) as f:
        for line in f:
            if line.startswith("---"):
                break  # the failed tests follow
            name, _, cost = line.rsplit(" ", 2)
            costs[name] = float(cost)
    return costs


def run_suite(build, ctest_args, log):
    shim_dir = tempfile.mkdtemp(prefix="tessel-timeout-shim-")
    shim = os.path.join(shim_dir, "timeout")
    with open(shim, "w") as f:
        f.write(SHIM.format(real=shutil.which("timeout")))
    os.chmod(shim, stat.S_IRWXU)
    if os.path.exists(log):
        os.remove(log)
    env = dict(os.environ, PATH=shim_dir + ":" + os.environ["PATH"], TESSEL_TIMEOUT_LOG=log)
    result = subprocess.run(["ctest", "-j", "2", "--timeout", "600"] + ctest_args, cwd=build, env=env)
    shutil.rmtree(shim_dir)
    print(f"ctest exited {result.returncode}")


def report_ctest(build):
    limits, costs = ctest_limits(build), ctest_costs(build)
    tight = [(name, limit, costs[name]) for name, limit in limits.items()
             if name in costs and costs[name] > 0 and (limit or 600) < MARGIN * costs[name]]
    print(f"ctest TIMEOUTs: {len(limits)} tests, {len(costs)} with a measured time; "
          f"{len(tight)} under {MARGIN}x it")
    for name, limit, cost in sorted(tight, key=lambda t: t[1] / t[2]):
        print(f"  {name}: TIMEOUT {limit} s, measured {cost:.1f} s ({limit / cost:.1f}x)")
    missing = sorted(name for name in limits if name not in costs)
    if missing:
        more = " ..." if len(missing) > 10 else ""
        print(f"  not measured ({len(missing)}): " + ", ".join(missing[:10]) + more)
    return len(tight)


def report_commands(log):
    if not os.path.exists(log):
        print(f"no {log}: run with --run to time the commands tests run under `timeout`")
        return 0
    worst = {}  # (limit, test, command head) -> the longest run
    with open(log, errors="replace") as f:
        for line in f:
            times, caller, args = line.rstrip("\n").split("\t", 2)
            start, end = times.split()
            limit, command = limit_and_command(args)
            key = (limit, test_of(caller), command[:100])
            worst[key] = max(worst.get(key, 0), float(end) - float(start))
    tight = [(k, took) for k, took in worst.items() if k[0] < MARGIN * took]
    print(f"`timeout` commands: {len(worst)} distinct (limit, test, command); {len(tight)} under {MARGIN}x")
    for (limit, test, command), took in sorted(tight, key=lambda t: t[0][0] / t[1]):
        print(f"  limit {limit:g} s, took {took:.1f} s: {test}\n      {command}")
    if worst:
        (limit, test, command), took = max(worst.items(), key=lambda t: t[1] / t[0][0])
        print(f"  the closest: {took:.1f} s of {limit:g} s ({limit / took:.0f}x): {test}: {command}")
    return len(tight)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--run", nargs=argparse.REMAINDER, help="run the suite first (extra ctest arguments)")
    args = parser.parse_args()
    build = os.path.abspath(args.build)
    log = os.path.join(build, "timeouts.log")
    if args.run is not None:
        run_suite(build, args.run, log)
    tight = report_ctest(build) + report_commands(log)
    sys.exit(1 if tight else 0)


if __name__ == "__main__":
    main()
