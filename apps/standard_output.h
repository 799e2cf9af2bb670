// The commands print their results (generate's text, plan --json, layout, the inspect commands)
// through stdio's stdout, which buffers: a write that fails (a full disk, /dev/full) shows only at
// a flush. Flushing through here turns it into an error, so that no command exits 0 after its
// output was lost.
#pragma once

namespace tessel {

// Flushes stdout; throws tessel::Error "cannot write the standard output: REASON" when this
// flush, or any write before it, failed.
void flush_standard_output();

}  // namespace tessel
