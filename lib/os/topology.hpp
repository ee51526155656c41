// Machine topology through hwloc: page sizes and where the progress thread may run.
#pragma once

#include <cstddef>
#include <string>

namespace mdsm::os::topology {

// Smallest memory page size hwloc reports, or 0 if it reports none.
std::size_t base_page_size();

// Number of processing units (hardware threads) this process may run on.
unsigned usable_pus();

// Pins the calling thread to a hardware thread that the application ranks on this node do not
// need: a spare PU exists when the node has more PUs than local ranks. `local_rank` and
// `local_size` describe this rank among the ranks sharing the node. Returns a description of
// what was done ("pu 3", or "not pinned: 2 PUs for 2 ranks"). `*dedicated` is set when the
// thread now runs where no application thread does (spinning there costs the application nothing).
std::string pin_to_spare_pu(int local_rank, int local_size, bool* dedicated);

}  // namespace mdsm::os::topology
