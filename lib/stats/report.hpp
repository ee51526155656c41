// Statistics output at finalize: MDSM_STATS=1 prints a per-rank and total table on rank 0;
// MDSM_STATS=json:FILE writes the same numbers as JSON. Both are collective over `comm`.
#pragma once

#include "stats/counters.hpp"

#include <mpi.h>

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace mdsm::stats {

// Every rank's counters, gathered on every rank: result[rank][counter]. Collective.
std::vector<std::vector<std::uint64_t>> gather_all(MPI_Comm comm);

void print_table(std::ostream& out, const std::vector<std::vector<std::uint64_t>>& per_rank);
void write_json(std::ostream& out, const std::vector<std::vector<std::uint64_t>>& per_rank);

// Acts on the MDSM_STATS setting `spec` ("", "0", "1", "json:FILE"). Collective.
// Throws mdsm::error(MDSM_ERR_INVALID_ARGUMENT) for an unknown setting.
void report(MPI_Comm comm, const std::string& spec);

// Validates a MDSM_STATS setting without acting on it (init checks it early).
void check_spec(const std::string& spec);

}  // namespace mdsm::stats
