#!/usr/bin/python3
"""Where a pipeline's measured idle time comes from, from a `tessel train --pipeline-timeline`
trace. Each rank's actions are replayed in their order under the pipeline's dependencies (F of
model chunk c after F of c - 1, the input gradient (B or I) of c after that of c + 1, for the same
microbatch, in the same pipeline: ranks of other TP, DP or CP coordinates run their own), with
messages taking no time, three ways:

  durations  each action as long as it took: the idle the dependencies force given the real
             durations. What the measured idle has beyond it is the executor's own cost
             (messages, bookkeeping).
  rank means every action of a kind as long as that kind's mean on its rank: what `durations`
             has beyond it comes from durations that vary within a rank (a noisy machine).
  mean costs every action of a kind as long as that kind's mean over all ranks: the idle of the
             schedule itself, as `tessel schedule` simulates it. What `rank means` has beyond it
             comes from stages that differ (the embedding, the head and the loss).

Idle is per rank, over the iteration's span (first action's start to last action's end, all ranks).

  bench/timeline_replay.py TRACE.json [...]
"""
import json
import re
import statistics
import sys


def replay(ranks, pipeline, duration):
    """Per rank: the idle over the replayed span, given `duration(action)`. `pipeline[r]` names
    the pipeline rank r is a stage of (its TP, DP and CP coordinates): each runs its own
    microbatches."""
    end = {}  # (pipeline, kind class, model chunk, microbatch) -> replayed end
    last_chunk = max(a["chunk"] for actions in ranks.values() for a in actions)
    clock = {r: 0.0 for r in ranks}
    next_action = {r: 0 for r in ranks}
    left = sum(len(a) for a in ranks.values())
    while left:
        progressed = False
        for r, actions in ranks.items():
            while next_action[r] < len(actions):
                a = actions[next_action[r]]
                kind, c, m = a["kind"], a["chunk"], a["microbatch"]
                if kind == "F":
                    dep = (pipeline[r], "F", c - 1, m) if c > 0 else None
                elif kind in "BI":
                    dep = (pipeline[r], "BI", c + 1, m) if c < last_chunk else None
                else:
                    dep = None  # W follows its I on the same rank, in the order
                if dep is not None and dep not in end:
                    break
                start = max(clock[r], end[dep] if dep is not None else 0.0)
                clock[r] = start + duration(a)
                end[(pipeline[r], "BI" if kind in "BI" else kind, c, m)] = clock[r]
                next_action[r] += 1
                left -= 1
                progressed = True
        if not progressed:
            raise SystemExit("the trace's actions cannot be ordered by the pipeline's dependencies")
    span = max(clock.values())
    return {r: 1 - sum(duration(a) for a in actions) / span for r, actions in ranks.items()}


def main():
    for path in sys.argv[1:]:
        trace = json.load(open(path))["traceEvents"]
        events = [e for e in trace if e["ph"] == "X" and e["cat"] != "comm"]  # compute, not the calls
        # "rank R (pp P, tp T, dp D, cp C)": the pipeline is (T, D, C).
        pipeline = {e["tid"]: re.sub(r"pp \d+, ", "", e["args"]["name"].split("(", 1)[1])
                    for e in trace if e["name"] == "thread_name"}
        ranks = {}
        for e in sorted(events, key=lambda e: e["ts"]):
            ranks.setdefault(e["tid"], []).append({"kind": e["cat"], "chunk": e["args"]["model_chunk"],
                                                   "microbatch": e["args"]["microbatch"],
                                                   "start": e["ts"], "dur": e["dur"]})
        ranks = dict(sorted(ranks.items()))
        first = min(e["ts"] for e in events)
        span = max(e["ts"] + e["dur"] for e in events) - first
        measured = {r: 1 - sum(a["dur"] for a in actions) / span for r, actions in ranks.items()}
        real = replay(ranks, pipeline, lambda a: a["dur"])
        def mean_costs(actions):
            return {k: statistics.mean(a["dur"] for a in actions if a["kind"] == k)
                    for k in "FBIW" if any(a["kind"] == k for a in actions)}
        mean = mean_costs([a for actions in ranks.values() for a in actions])
        rank_mean = {r: mean_costs(actions) for r, actions in ranks.items()}
        for r, actions in ranks.items():
            for a in actions:
                a["rank"] = r
        per_rank = replay(ranks, pipeline, lambda a: rank_mean[a["rank"]][a["kind"]])
        uniform = replay(ranks, pipeline, lambda a: mean[a["kind"]])
        costs = ", ".join(f"{k} {v / 1e3:.2f}" for k, v in mean.items())
        print(f"{path}: mean ms per action {costs}")
        for r in ranks:
            costs = ", ".join(f"{k} {v / 1e3:.2f}" for k, v in rank_mean[r].items())
            print(f"  rank {r}: idle measured {100 * measured[r]:.1f}% | replayed with its durations "
                  f"{100 * real[r]:.1f}% | with the rank's means {100 * per_rank[r]:.1f}% | with the mean "
                  f"costs {100 * uniform[r]:.1f}% | the rank's ms per action {costs}")


if __name__ == "__main__":
    main()
