#include "stats/report.hpp"

#include "common/check.hpp"

#include <fstream>
#include <iomanip>
#include <iostream>

namespace mdsm::stats {

std::vector<std::vector<std::uint64_t>> gather_all(MPI_Comm comm) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  std::vector<std::uint64_t> mine(k_counters);
  for (unsigned i = 0; i < k_counters; ++i) mine[i] = get(static_cast<counter>(i));
  std::vector<std::uint64_t> all(static_cast<std::size_t>(size) * k_counters);
  if (PMPI_Allgather(mine.data(), static_cast<int>(k_counters), MPI_UINT64_T, all.data(), static_cast<int>(k_counters),
                    MPI_UINT64_T, comm) != MPI_SUCCESS)
    detail::fail(MDSM_ERR_MPI, "MPI_Allgather of statistics failed");
  std::vector<std::vector<std::uint64_t>> out(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r)
    out[static_cast<std::size_t>(r)].assign(all.begin() + r * k_counters, all.begin() + (r + 1) * k_counters);
  return out;
}

void print_table(std::ostream& out, const std::vector<std::vector<std::uint64_t>>& per_rank) {
  const std::size_t ranks = per_rank.size();
  out << "mdsm statistics (" << ranks << " ranks)\n";
  out << std::left << std::setw(32) << "counter" << std::right;
  for (std::size_t r = 0; r < ranks; ++r) out << std::setw(14) << ("rank " + std::to_string(r));
  out << std::setw(16) << "total" << "\n";
  for (unsigned i = 0; i < k_counters; ++i) {
    std::uint64_t total = 0;
    for (const auto& row : per_rank) total += row[i];
    if (total == 0) continue;  // a table of zeros hides the numbers that matter
    out << std::left << std::setw(32) << name(static_cast<counter>(i)) << std::right;
    for (const auto& row : per_rank) out << std::setw(14) << row[i];
    out << std::setw(16) << total << "\n";
  }
  std::uint64_t frames = 0, bytes = 0;
  for (const auto& row : per_rank) {
    frames += row[static_cast<unsigned>(counter::frames_sent)];
    bytes += row[static_cast<unsigned>(counter::frame_bytes_sent)];
  }
  out << "messages " << frames << ", average size " << (frames ? bytes / frames : 0) << " bytes\n";
}

void write_json(std::ostream& out, const std::vector<std::vector<std::uint64_t>>& per_rank) {
  auto row_json = [&](const std::vector<std::uint64_t>& row) {
    out << "{";
    for (unsigned i = 0; i < k_counters; ++i)
      out << (i ? ", " : "") << '"' << name(static_cast<counter>(i)) << "\": " << row[i];
    out << "}";
  };
  std::vector<std::uint64_t> total(k_counters, 0);
  for (const auto& row : per_rank)
    for (unsigned i = 0; i < k_counters; ++i) total[i] += row[i];
  out << "{\n  \"ranks\": [\n";
  for (std::size_t r = 0; r < per_rank.size(); ++r) {
    out << "    ";
    row_json(per_rank[r]);
    out << (r + 1 < per_rank.size() ? ",\n" : "\n");
  }
  out << "  ],\n  \"total\": ";
  row_json(total);
  out << "\n}\n";
}

void check_spec(const std::string& spec) {
  if (spec.empty() || spec == "0" || spec == "1") return;
  if (spec.rfind("json:", 0) == 0 && spec.size() > 5) return;
  detail::fail(MDSM_ERR_INVALID_ARGUMENT, "MDSM_STATS='", spec, "' is not 0, 1 or json:FILE");
}

void report(MPI_Comm comm, const std::string& spec) {
  check_spec(spec);
  if (spec.empty() || spec == "0") return;
  auto per_rank = gather_all(comm);
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  if (rank != 0) return;
  if (spec == "1") {
    print_table(std::cout, per_rank);
    std::cout.flush();
    return;
  }
  std::string file = spec.substr(5);
  std::ofstream out(file);
  if (!out) {
    std::cerr << "mdsm: cannot write statistics to '" << file << "'\n";
    return;
  }
  write_json(out, per_rank);
}

}  // namespace mdsm::stats
