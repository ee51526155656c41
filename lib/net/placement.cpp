#include "net/placement.hpp"

#include "common/check.hpp"
#include "os/vm.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <vector>

namespace mdsm::net {

namespace {

// Fallback addresses, tried after the ranks' own proposals: high, rarely used, 1 TiB apart.
constexpr std::uintptr_t k_fallbacks[] = {0x100000000000, 0x200000000000, 0x300000000000, 0x500000000000};

void mpi_ok(int rc, const char* what, const char* region) {
  if (rc != MPI_SUCCESS) detail::fail(MDSM_ERR_MPI, what, " failed while mapping the ", region);
}

}  // namespace

std::string hex_address(std::uintptr_t a) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%" PRIxPTR, a);
  return buf;
}

placement place_collectively(MPI_Comm comm, const placement_request& req) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &ranks);
  const std::size_t page = os::page_size();
  std::vector<std::uintptr_t> candidates;
  for (std::uintptr_t a : req.preferred)
    if (a != 0) candidates.push_back(a);
  if (!req.strict) {
    for (int r = 0; r < std::min(ranks, 4); ++r) candidates.push_back(0);  // 0: rank r proposes
    candidates.insert(candidates.end(), std::begin(k_fallbacks), std::end(k_fallbacks));
  }
  placement out;
  std::string tried;
  int proposer = 0;
  for (std::uintptr_t candidate : candidates) {
    unsigned long long addr = candidate;
    if (candidate == 0) {
      // A rank's kernel suggests a free range.
      addr = rank == proposer ? reinterpret_cast<std::uintptr_t>(os::propose_address(req.size)) : 0;
      mpi_ok(PMPI_Bcast(&addr, 1, MPI_UNSIGNED_LONG_LONG, proposer, comm), "MPI_Bcast", req.what);
      ++proposer;
      if (addr == 0) continue;
    }
    const bool fits = addr % page == 0 && addr + req.size <= os::address_space_end() && addr + req.size > addr;
    int ok = fits && req.map(static_cast<std::uintptr_t>(addr)) ? 1 : 0;
    int all = 0;
    mpi_ok(PMPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce", req.what);
    if (all == 1) {
      out.base = reinterpret_cast<std::byte*>(addr);
      break;
    }
    if (ok) os::unmap(reinterpret_cast<void*>(addr), req.size);
    tried += (tried.empty() ? "" : ", ") + hex_address(static_cast<std::uintptr_t>(addr));
  }
  if (out.base == nullptr)
    detail::fail(MDSM_ERR_REGION_MAP, "could not map the ", req.size, "-byte ", req.what, " at one address on all ",
                 ranks, " ranks (tried ", tried.empty() ? std::string("nothing") : tried,
                 "); something else is mapped there on some rank: ", req.advice);
  out.description = hex_address(reinterpret_cast<std::uintptr_t>(out.base)) +
                    (tried.empty() ? std::string() : " (after collisions at " + tried + ")");
  return out;
}

}  // namespace mdsm::net
