#!/usr/bin/env bash
# The model answers its own shapes: a parameter (ParamRegistry::add, which takes its ParamInit) and
# a tensor the model keeps (a TensorList's entry, model/layer.h) are declared only by the layer
# that owns them in src/tessel/model/, where nothing is allocated but through a TensorList (so the
# declare-only build lists everything); src/tessel/plan/ writes no tessel tensor shape of its own
# (the per-rank sizes N_l, H_l, G_l, F_l the layers name theirs by). Allowed elsewhere, with why:
#   apps/demo_command.cpp            the seed text's worked examples declare their own toy
#                                    parameters (a TP-split matrix, an MLP), not tessel's model
#   src/tessel/core/params.*         the registry itself
#   src/tessel/pipeline/executor.*   the executor's slot buffers, its own, declared the same way
#                                    for the planner to read
set -euo pipefail
cd "$(dirname "$0")/../.."
{ grep -rnE --include=*.h --include=*.cpp --include=*.cu --include=*.cuh \
  'ParamInit::[A-Z]|TensorList|zeros\(|\b(N_l|H_l|G_l|F_l)\b' src apps || true; } |
  awk '
    { file = $0; sub(/:.*/, "", file); text = $0; sub(/^[^:]*:[0-9]+:/, "", text) }
    text ~ /ParamInit::[A-Z]/ && file !~ /^src\/tessel\/(model|core\/params)/ && file != "apps/demo_command.cpp" {
      print file ": declares a parameter outside src/tessel/model/: " text; bad = 1 }
    text ~ /TensorList/ && file !~ /^src\/tessel\/(model|pipeline\/executor)/ {
      print file ": declares a model tensor outside src/tessel/model/: " text; bad = 1 }
    text ~ /zeros\(/ && file ~ /^src\/tessel\/model\// && file != "src/tessel/model/layer.cpp" {
      print file ": allocates outside a TensorList (the declare-only build would miss it): " text; bad = 1 }
    text ~ /(^|[^A-Za-z0-9_])(N_l|H_l|G_l|F_l)([^A-Za-z0-9_]|$)/ && file ~ /^src\/tessel\/plan\// {
      print file ": writes a tessel tensor shape by hand (read the declare-only build): " text
      bad = 1 }
    END { exit bad }'
