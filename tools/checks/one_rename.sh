#!/usr/bin/env bash
# One way to put a file in place: AtomicFile (src/tessel/core/writable.cpp) is the only code that
# renames, so every file the program writes gets the same temporary names, the same error
# messages, fsync where it must survive a power loss and no temporary left behind. A call of
# rename, renameat, std::rename or std::filesystem::rename anywhere else in src/ or apps/ is
# listed; comment lines do not count.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
forbid_outside \
  "rename called outside src/tessel/core/writable.cpp (write through AtomicFile, core/writable.h):" \
  '(^|[^A-Za-z0-9_])rename(at2?)?[[:space:]]*\(' 'src/tessel/core/writable\.cpp:'
