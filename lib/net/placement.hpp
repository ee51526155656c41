// Collective placement: one virtual address range, the same on every rank, for a shared region.
//
// Every region whose pointers must mean the same thing on every rank (the coherent region, the
// non-coherent region) is placed here, so there is one way to agree on an address. Candidates, in
// order: the requested addresses (if any); unless `strict`, an address proposed by each of the
// first four ranks' kernels (a free range there), then a few fixed high addresses 1 TiB apart.
// Every rank tries to map each candidate with MAP_FIXED_NOREPLACE (an existing mapping is never
// clobbered); the first candidate every rank could map wins, the others are undone.
//
// Collective over `comm`: every rank calls it with the same size (the caller checks that).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace mdsm::net {

struct placement_request {
  const char* what = "region";  // names the region in messages ("coherent region")
  std::size_t size = 0;         // bytes, a multiple of the page size
  std::vector<std::uintptr_t> preferred;  // the first candidates, in order (0s are skipped)
  bool strict = false;                    // try `preferred` only
  const char* advice = "";      // what to change when nothing fits (ends the error message)
  // Maps `size` bytes at exactly `at`, never replacing a mapping; false if it cannot. The
  // placement unmaps (os::unmap) a candidate some other rank could not map.
  std::function<bool(std::uintptr_t at)> map;
};

struct placement {
  std::byte* base = nullptr;
  std::string description;  // "0x7f... (after collisions at 0x...)"
};

// Throws MDSM_ERR_REGION_MAP (on every rank alike) when no candidate fits everywhere, with the
// addresses tried and req.advice; MDSM_ERR_MPI if a collective fails.
placement place_collectively(MPI_Comm comm, const placement_request& req);

// "0x7f12...": an address as the messages print it.
std::string hex_address(std::uintptr_t a);

}  // namespace mdsm::net
