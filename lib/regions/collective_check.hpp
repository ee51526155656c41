// The check every collective allocation call makes first: all ranks passed the same value (a
// size, an address). Shared by the coherent and the non-coherent allocator.
#pragma once

#include "net/progress.hpp"
#include "net/transport.hpp"

#include <cstdint>

namespace mdsm::regions {

// Collective: waits (delivering frames, named `what` for the failure detector) until every rank
// has called it; throws MDSM_ERR_MISMATCH on every rank if some rank passed another value.
// Application threads only.
void check_same_everywhere(net::transport& t, net::progress& p, std::uint64_t value, const char* what);

}  // namespace mdsm::regions
