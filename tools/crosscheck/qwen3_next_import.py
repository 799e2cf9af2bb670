#!/usr/bin/env python3
"""tessel's import and export of Qwen3-Next / Qwen3.5 folders against this reference's layouts.

For each family a random folder is written the way qwen3_next_selfcheck.py writes it (Qwen3-Next:
grouped GDN projections, per-expert experts; Qwen3.5: flat projections, packed experts; both with
MTP weights under mtp.*), then converted by
`tessel export --init-from` into every model_type. Each output must equal, bitwise, the
reference's own conversion of the input (qwen3_next_layout.convert, mtp.* included), hold exactly
its tensors, and its config.json must read to the same model. Exit status 1 on any difference.

Usage: /usr/bin/python3 tools/crosscheck/qwen3_next_import.py TESSEL
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qwen3_next_layout import config_from_hf, convert  # noqa: E402
from qwen3_next_selfcheck import write_folder  # noqa: E402
from safetensors_io import read_safetensors  # noqa: E402

# model_type -> (grouped GDN, packed experts, packed MTP experts, VL prefix), as each family ships.
LAYOUTS = {"qwen3_next": (True, False, False, False),
           "qwen3_5_moe": (False, True, False, True),
           "qwen3_5_moe_text": (False, True, False, False)}


def config_of(folder):
    with open(os.path.join(folder, "config.json")) as f:
        return config_from_hf(json.load(f), folder)


def main():
    tessel = sys.argv[1]
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for family in ("qwen3_next", "qwen3_5_moe"):
            src = os.path.join(tmp, family)
            # A vocabulary over the byte tokenizer's 256, which `tessel export` falls back to.
            write_folder(src, family, seed=3, vocab=300)
            cfg = config_of(src)
            tensors = read_safetensors(os.path.join(src, "model.safetensors"))
            for model_type, layout in LAYOUTS.items():
                out = os.path.join(tmp, f"{family}-to-{model_type}")
                subprocess.run([tessel, "export", "--init-from", src, "--out", out,
                                "--hf-model-type", model_type], check=True,
                               stdout=subprocess.DEVNULL)
                got = read_safetensors(os.path.join(out, "model.safetensors"))
                want = convert(tensors, cfg, *layout)
                what = f"{family} -> {model_type}"
                if set(got) != set(want):
                    failures.append(f"{what}: tensors differ: only tessel's "
                                    f"{sorted(set(got) - set(want))[:3]}, only the reference's "
                                    f"{sorted(set(want) - set(got))[:3]}")
                    continue
                for name, value in want.items():
                    if got[name].shape != value.shape or not np.array_equal(got[name], value):
                        failures.append(f"{what}: tensor {name} differs")
                out_cfg = config_of(out)
                for key in cfg:
                    if key != "arch" and out_cfg[key] != cfg[key]:
                        failures.append(f"{what}: config.json's {key} {out_cfg[key]} != {cfg[key]}")
                print(f"{what}: {len(got)} tensors, bitwise equal to the reference's layout")
    if failures:
        sys.exit("\n".join(failures))


if __name__ == "__main__":
    main()
