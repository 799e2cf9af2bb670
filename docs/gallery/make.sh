#!/usr/bin/env bash
# Makes docs/gallery/*.png: every picture tessel draws, for the seed's worked examples (README's
# "Learning the parallelisms"), each SVG rendered by rsvg-convert (Debian's librsvg2-bin).
#   docs/gallery/make.sh [path/to/tessel]      (default: build/tessel)
set -euo pipefail
cd "$(dirname "$0")/../.."
tessel=$(realpath "${1:-build/tessel}")
out=docs/gallery
svgs=$(mktemp -d)
trap 'rm -rf "$svgs"' EXIT
command -v rsvg-convert >/dev/null || { echo "rsvg-convert is missing: scripts/install-test-deps.sh" >&2; exit 1; }

draw() { "$tessel" "$@" >/dev/null; }  # a tessel command that writes SVGs into $svgs

# Layouts: examples 2, 3, 9, 10 and 11.
draw layout --world 16 --tp 2 --pp 4 --svg "$svgs/02-dp-size.svg"
draw layout --world 8 --tp 2 --pp 2 --order tp-pp-dp --gpus-per-node 4 --svg "$svgs/03-grid.svg"
draw layout --world 8 --tp 2 --pp 2 --gpus-per-node 4 --svg "$svgs/03-grid-megatron-order.svg"
draw layout --world 2 --pp 2 --vpp 2 --num-layers 8 --svg "$svgs/09-virtual-stages.svg"
draw layout --world 2 --ep 2 --num-experts 8 --svg "$svgs/10-experts.svg"
draw layout --world 2 --cp 2 --seq-length 8 --svg "$svgs/11-context.svg"
# Schedules: example 8, its full tables, interleaved and ZB-V.
draw schedule --pp 2 --microbatches 4 --schedule gpipe --forward-only --svg "$svgs/08-forward-table.svg"
draw schedule --pp 2 --microbatches 4 --schedule gpipe --svg "$svgs/08-gpipe.svg"
draw schedule --pp 2 --microbatches 4 --svg "$svgs/08-1f1b.svg"
draw schedule --pp 2 --vpp 2 --microbatches 4 --svg "$svgs/09-interleaved.svg"
draw schedule --pp 2 --microbatches 4 --schedule zb-v --svg "$svgs/08-zb-v.svg"
# Plans: example 7's model (8 layers over PP 2, micro batch 4, sequence 4, hidden 8), 4
# microbatches, on this machine's CPU cluster; and a published GPT-3 layout on GPUs.
draw plan --cluster cpu --num-gpus 2 --pp 2 --num-layers 8 --hidden-size 8 --num-attention-heads 2 \
  --seq-length 4 --micro-batch-size 4 --global-batch-size 16 \
  --svg-memory "$svgs/07-plan-memory.svg" --svg-time "$svgs/07-plan-time.svg"
draw plan --model gpt3-175b --cluster a100-80gb --num-gpus 64 --tp 8 --pp 8 --vpp 3 --sequence-parallel \
  --recompute-granularity selective --micro-batch-size 1 --global-batch-size 64 \
  --svg-memory "$svgs/plan-gpt3-memory.svg" --svg-time "$svgs/plan-gpt3-time.svg"

rm -f "$out"/*.png
for svg in "$svgs"/*.svg; do
  rsvg-convert --background-color=white -o "$out/$(basename "${svg%.svg}").png" "$svg"
done
ls -l "$out"/*.png
