// The check every collective allocation call makes first: all ranks passed the same value (a
// size, an address). Shared by the coherent and the non-coherent allocator. And the one other
// agreement a collective allocation may need: where rank 0 put a run of the pool.
#pragma once

#include "net/progress.hpp"
#include "net/transport.hpp"

#include <cstdint>
#include <span>

namespace mdsm::regions {

// Collective: waits (delivering frames, named `what` for the failure detector) until every rank
// has called it; throws MDSM_ERR_MISMATCH on every rank if some rank passed another value.
// Application threads only.
void check_same_everywhere(net::transport& t, net::progress& p, std::uint64_t value, const char* what);

// Collective, like check_same_everywhere: `values` becomes rank 0's on every rank (the others'
// are ignored).
void values_of_rank0(net::transport& t, net::progress& p, std::span<std::uint64_t> values, const char* what);

}  // namespace mdsm::regions
