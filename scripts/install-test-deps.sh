#!/usr/bin/env bash
# What the test suite needs beyond the build: the build and run dependencies, and Debian's numpy
# and PyTorch, the independent references of the dataset tests (tests/data/*.py) and of the
# PyTorch cross-check (tests/train/crosscheck.sh), and Debian's protobuf, whose reader of
# TensorBoard's event files checks tessel's writer (tests/train/tensorboard_events.py), and
# librsvg2-bin's rsvg-convert, which renders every SVG tessel draws to check that nothing of it is
# clipped (tests/support/svg_render.h).
# Development and CI only: the main job needs none of them.
set -euo pipefail
exec "$(dirname "$0")/install-deps.sh" python3-numpy python3-torch python3-protobuf librsvg2-bin
