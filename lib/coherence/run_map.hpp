// A map from units to a value, kept as segments of contiguous units with the same value: what
// the notice index (the newest interval per creator) and the homes of units are made of. Memory
// and the cost of painting a run grow with the number of distinct runs painted, not with units.
// Not synchronized: the owner guards it.
#pragma once

#include "coherence/interval.hpp"

#include <algorithm>
#include <cstdint>
#include <map>

namespace mdsm::coherence {

class run_map {
 public:
  // Sets every unit of `run` to `value` (0 erases: 0 is what unpainted units read).
  void paint(const unit_run& run, std::uint32_t value);
  // The value of `unit`, 0 if none.
  std::uint32_t at(std::uint32_t unit) const {
    auto it = segs_.upper_bound(unit);
    if (it == segs_.begin()) return 0;
    --it;
    return unit <= it->second.last ? it->second.value : 0;
  }
  // Calls f(first, last) for each part of `run` that some segment covers, in increasing order.
  template <class F>
  void for_each_painted(const unit_run& run, F&& f) const {
    if (run.count == 0) return;
    const std::uint32_t last = run.end() - 1;
    auto it = segs_.upper_bound(run.first);
    if (it != segs_.begin()) --it;
    for (; it != segs_.end() && it->first <= last; ++it) {
      if (it->second.last < run.first) continue;
      f(std::max(it->first, run.first), std::min(it->second.last, last));
    }
  }
  // Erases every segment whose value satisfies `pred`.
  template <class Pred>
  void erase_if(Pred&& pred) {
    for (auto it = segs_.begin(); it != segs_.end();) it = pred(it->second.value) ? segs_.erase(it) : std::next(it);
  }
  std::size_t segments() const noexcept { return segs_.size(); }
  static constexpr std::size_t k_segment_bytes = 48;  // a map node, roughly (metadata statistics)

 private:
  struct segment {
    std::uint32_t last;  // the segment is units [first (the key), last]
    std::uint32_t value;
  };
  std::map<std::uint32_t, segment> segs_;
};

}  // namespace mdsm::coherence
