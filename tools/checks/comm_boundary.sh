#!/usr/bin/env bash
# All communication goes through Comm (docs/DESIGN.md, invariant 5): MPI and NCCL are named only in
# src/tessel/comm/ and in parallel/groups.cpp, which creates the communicators. One grep over the
# tree; comments and string literals (an environment variable's name) do not count.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
forbid_outside "MPI or NCCL called outside src/tessel/comm/ (go through Comm, comm/comm.h):" \
  '(^|[^"A-Za-z0-9_])(MPI_[A-Z][A-Za-z_]*|nccl[A-Z][A-Za-z]*)\b' \
  'src/tessel/comm/|src/tessel/parallel/groups\.cpp:'
