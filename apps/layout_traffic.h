// tessel layout --traffic FILE: the bytes each rank of a real run moved, read from a `tessel train
// --log-json` file, to shade --svg's boxes by.
#pragma once

#include <string>
#include <vector>

#include "tessel/parallel/layout_svg.h"

namespace tessel {

// Each rank's bytes in the file's last record that has every rank's communication ("ranks"): what
// it sent, received, reduced and gathered over all its groups in that iteration. A rule broken —
// the file unreadable or not JSON lines, no such record, a run of another world than `world` — is
// added to `violations`, naming the file.
LayoutTraffic read_layout_traffic(const std::string& path, int world, std::vector<std::string>& violations);

}  // namespace tessel
