// Which write notices of other ranks this rank knows, per unit, without a list per unit.
//
// A unit is out of date when some creator c wrote it in an interval this rank knows of and the
// copy does not hold those writes yet. What a fetch needs from c is only the range of c's
// intervals (applied_through[c], newest interval of c that wrote the unit] (a writer serves every
// notice of its own in a range), so this rank keeps, per creator, the newest known interval that
// wrote each unit: an interval map from runs of units to an interval index, "painted" by each
// record it applies. A record costs one paint per run, whatever the number of units; a grid
// rewritten every interval stays one segment; memory grows with the number of distinct runs,
// not with intervals (a list of notices per unit grew by one entry per unit and interval, 71 MB
// per rank in SOR at 100 iterations).
//
// The index also holds which units are `valid` (a bit per unit, kept by the engine), so that an
// acquire visits only the units it must invalidate: a unit already invalid needs nothing more
// than the paint. A unit allocated but never looked at has only its bit, no page-table entry
// (engine::units_allocated); its entry is made from the bit when needed. Both are guarded by one
// mutex, a leaf in the engine's lock order (it may be taken under a page lock, the metadata lock
// or the page table's growth lock, and nothing is taken under it). Reading the
// paint and setting a unit's valid bit happen under it together, and an acquire paints before it
// reads the bits, so an invalidation and a fetch finishing at the same moment cannot miss each
// other: either the fetch sees the new paint or the acquire sees the unit valid.
#pragma once

#include "coherence/interval.hpp"
#include "coherence/run_map.hpp"
#include "coherence/vector_time.hpp"

#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

namespace mdsm::coherence {

class notice_index {
 public:
  notice_index(std::size_t ranks, std::uint32_t units);

  std::mutex& mutex() { return mutex_; }

  // All of the following: the caller holds mutex().

  // Records that `creator` wrote the units of `runs` in interval `index` (newer than every
  // interval of that creator painted before).
  void paint(std::uint32_t creator, const std::vector<unit_run>& runs, std::uint32_t index);
  // The newest interval of `creator` known to have written `unit`, 0 if none.
  std::uint32_t latest(std::uint32_t creator, std::uint32_t unit) const;
  // Forgets every interval up to g[creator] (garbage collection: nothing is pending through g).
  void forget_through(const vector_time& g);
  std::size_t bytes() const { return segments_ * run_map::k_segment_bytes; }

  bool valid(std::uint32_t u) const { return (valid_[u / 64] >> (u % 64)) & 1; }
  void set_valid(std::uint32_t u, bool v) {
    if (v) valid_[u / 64] |= std::uint64_t{1} << (u % 64);
    else valid_[u / 64] &= ~(std::uint64_t{1} << (u % 64));
  }
  // Appends the units of `run` that some creator other than `except` has painted (sorted, no
  // repeats): the units of a fresh allocation that have write notices already.
  void painted_units(const unit_run& run, std::uint32_t except, std::vector<std::uint32_t>& out) const;
  // Appends the valid units of `run` to `out`, in increasing order.
  void valid_units(const unit_run& run, std::vector<std::uint32_t>& out) const;

 private:
  std::mutex mutex_;
  std::vector<run_map> by_creator_;
  std::size_t segments_ = 0;
  std::vector<std::uint64_t> valid_;
};

}  // namespace mdsm::coherence
