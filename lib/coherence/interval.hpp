// Interval records and the store that holds them.
//
// An interval record = (creator, index, the creator's vector time when it closed the interval,
// write notices = the coherence units written in it, as runs of contiguous units). Records are
// immutable once made and shared by pointer between the store and messages.
//
// Notices are runs because programs write runs: a grid's block, a matrix's rows. A record's size
// (in memory and on the wire) and the work of applying it then grow with the number of runs, not
// with the number of units written (SOR rewrites 4096 contiguous pages per half-sweep: one run).
#pragma once

#include "coherence/vector_time.hpp"

#include <deque>
#include <memory>
#include <vector>

namespace mdsm::coherence {

// Units [first, first + count).
struct unit_run {
  std::uint32_t first;
  std::uint32_t count;
  std::uint32_t end() const { return first + count; }
  bool operator==(const unit_run&) const = default;
};

// Appends unit u (greater than every unit appended before) to a list of runs.
inline void append_unit(std::vector<unit_run>& runs, std::uint32_t u) {
  if (!runs.empty() && runs.back().end() == u) ++runs.back().count;
  else runs.push_back(unit_run{u, 1});
}

// The union of two lists of sorted, disjoint runs, as sorted runs with adjacent ones joined.
std::vector<unit_run> merge_runs(const std::vector<unit_run>& a, const std::vector<unit_run>& b);

struct interval_record {
  std::uint32_t creator;
  std::uint32_t index;          // 1-based; vt[creator] == index
  vector_time vt;               // creator's vector time at closing
  std::vector<unit_run> runs;   // write notices: sorted, non-empty, disjoint, not adjacent

  std::size_t units() const;                // number of units written
  bool contains(std::uint32_t unit) const;  // binary search
  void encode(net::byte_writer& out) const;
  // Validates everything: creator < ranks, index >= 1, vt[creator] == index, runs non-empty,
  // sorted, disjoint, not adjacent and below unit_limit.
  static std::shared_ptr<const interval_record> decode(net::byte_reader& in, std::size_t ranks,
                                                       std::uint32_t unit_limit);
  // Bytes this record accounts for in the metadata statistics.
  std::size_t footprint() const { return sizeof(*this) + vt.size() * 4 + runs.size() * sizeof(unit_run); }
};

using record_ptr = std::shared_ptr<const interval_record>;

// Every interval record this rank knows, by creator and index, minus those garbage collected.
// Not synchronised: the owner (the coherence engine) guards it with its metadata lock.
class interval_store {
 public:
  explicit interval_store(std::size_t ranks) : by_creator_(ranks), base_(ranks, 0) {}

  // Pre: r->index == newest(r->creator) + 1.
  void add(record_ptr r);
  // The record, or nullptr if collected or unknown.
  record_ptr find(std::uint32_t creator, std::uint32_t index) const;
  std::uint32_t newest(std::uint32_t creator) const {
    return base_[creator] + static_cast<std::uint32_t>(by_creator_[creator].size());
  }
  std::uint32_t collected_through(std::uint32_t creator) const { return base_[creator]; }
  // Drops every record with index <= upto[creator]; returns the bytes freed.
  std::size_t collect(const vector_time& upto);
  std::size_t bytes() const { return bytes_; }

 private:
  std::vector<std::deque<record_ptr>> by_creator_;
  std::vector<std::uint32_t> base_;  // indices <= base_ were collected
  std::size_t bytes_ = 0;
};

}  // namespace mdsm::coherence
