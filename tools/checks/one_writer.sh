#!/usr/bin/env bash
# Files are written through core/writable.h (AtomicFile, open_growing_file): created exclusively
# beside their name and never through a link. A std::ofstream, an fopen for writing or an open
# that may write or create anywhere else would follow a link planted at the name, and truncate
# the file it points to; the save lock (ckpt/save_lock.cpp) opens its file O_NOFOLLOW itself.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
forbid_outside \
  "a file opened for writing outside src/tessel/core/writable.cpp (write through core/writable.h):" \
  'std::ofstream|fopen[[:space:]]*\([^;]*"[wa+r]*[wa+][^"]*"|O_WRONLY|O_RDWR|O_CREAT|[^f]truncate[[:space:]]*\(' \
  'src/tessel/core/writable\.cpp:|src/tessel/ckpt/save_lock\.cpp:'
