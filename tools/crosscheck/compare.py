#!/usr/bin/env python3
"""Compares two per-iteration JSON logs (tessel's and torch_reference.py's), iteration by iteration.

Each file holds one JSON object a line: {"iteration": i, "loss": x, "grad_norm": g, "lr": r}.
Exits 1 when any iteration's loss differs by more than --rtol (relative), when the two files do
not cover the same iterations, or, with --grad-norm-rtol, when a gradient norm differs by more (a
norm that is not finite, null in the JSON, agrees only with another); with --mtp, the
multi-token prediction loss too (tessel's "mtp_losses"[0], the reference's "mtp_loss"), to
--rtol; with --loss-scale, each iteration's "loss_scale" and "skipped" (fp16) must be equal.
Standard library only.
"""
import argparse
import json
import sys


def read_log(path):
    """Returns {iteration: record}; a malformed line is an error naming the file and the line."""
    records = {}
    with open(path) as f:
        for line_number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                records[int(record["iteration"])] = record
            except (ValueError, KeyError, TypeError) as e:
                sys.exit(f"{path}:{line_number}: not a log record with an iteration ({e})")
    if not records:
        sys.exit(f"{path}: no log records")
    return records


def relative_difference(a, b):
    if a is None or b is None:  # a norm that was not finite
        return 0.0 if a is None and b is None else float("inf")
    scale = max(abs(a), abs(b))
    return abs(a - b) / scale if scale > 0 else 0.0


def norm(record):
    value = record.get("grad_norm", float("nan"))
    return float("nan") if value is None else value


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("first", help="e.g. tessel.jsonl")
    p.add_argument("second", help="e.g. torch.jsonl")
    p.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance on the loss")
    p.add_argument("--grad-norm-rtol", type=float,
                   help="also check the gradient norm with this relative tolerance")
    p.add_argument("--loss-scale", action="store_true",
                   help="also check that the loss scale and the skipped steps are the same")
    p.add_argument("--mtp", action="store_true",
                   help="also check the MTP loss (both files must have it) with --rtol")
    args = p.parse_args()
    first, second = read_log(args.first), read_log(args.second)

    failures = []
    if set(first) != set(second):
        failures.append(f"iterations differ: only in {args.first}: {sorted(set(first) - set(second))}, "
                        f"only in {args.second}: {sorted(set(second) - set(first))}")
    print(f"{'iter':>5} {'loss 1':>12} {'loss 2':>12} {'rel diff':>9}  "
          f"{'gnorm 1':>10} {'gnorm 2':>10} {'rel diff':>9}  {'lr 1':>10} {'lr 2':>10}")
    for it in sorted(set(first) & set(second)):
        a, b = first[it], second[it]
        loss_diff = relative_difference(a["loss"], b["loss"])
        norm_diff = relative_difference(a.get("grad_norm", 0.0), b.get("grad_norm", 0.0))
        flags = []
        if loss_diff > args.rtol:
            flags.append("LOSS")
        if args.grad_norm_rtol is not None and norm_diff > args.grad_norm_rtol:
            flags.append("GRAD_NORM")
        if args.loss_scale:
            scales = [(r.get("loss_scale"), bool(r.get("skipped", False))) for r in (a, b)]
            print(f"      loss scale {scales[0][0]} {scales[1][0]}, skipped {scales[0][1]} {scales[1][1]}")
            if None in (scales[0][0], scales[1][0]) or scales[0] != scales[1]:
                flags.append("LOSS_SCALE")
        if args.mtp:
            mtp = [r.get("mtp_loss", (r.get("mtp_losses") or [None])[0]) for r in (a, b)]
            if None in mtp:
                flags.append("MTP_MISSING")
            else:
                mtp_diff = relative_difference(*mtp)
                print(f"      mtp loss {mtp[0]:12.6f} {mtp[1]:12.6f} {mtp_diff:9.2e}")
                if mtp_diff > args.rtol:
                    flags.append("MTP_LOSS")
        print(f"{it:5d} {a['loss']:12.6f} {b['loss']:12.6f} {loss_diff:9.2e}  "
              f"{norm(a):10.5f} {norm(b):10.5f} "
              f"{norm_diff:9.2e}  {a.get('lr', float('nan')):10.3e} {b.get('lr', float('nan')):10.3e}"
              f"  {' '.join(flags)}")
        if flags:
            failures.append(f"iteration {it}: {', '.join(flags)} out of tolerance")

    if failures:
        for failure in failures:
            print("MISMATCH:", failure)
        sys.exit(1)
    print(f"OK: {len(first)} iterations agree (loss rtol {args.rtol:g}"
          + (f", grad norm rtol {args.grad_norm_rtol:g})" if args.grad_norm_rtol is not None else ")"))


if __name__ == "__main__":
    main()
