#include "coherence/notice_index.hpp"

#include <algorithm>
#include <bit>
#include <iterator>

namespace mdsm::coherence {

notice_index::notice_index(std::size_t ranks, std::uint32_t units)
    : by_creator_(ranks), valid_((std::size_t{units} + 63) / 64, 0) {}

void run_map::paint(const unit_run& run, std::uint32_t value) {
  auto& m = segs_;
  const std::uint32_t a = run.first, b = run.end() - 1;
  // The common case, a run painted again (a block or a page rewritten in every interval): the
  // segment is [a, b] already; only its value changes.
  auto it = m.lower_bound(a);
  if (it != m.end() && it->first == a && it->second.last == b) {
    if (value == 0) m.erase(it);
    else it->second.value = value;
    return;
  }
  // The first segment that may overlap [a, b]: the one starting at or before a, if it reaches a.
  if (it != m.begin() && std::prev(it)->second.last >= a) --it;
  // Cut what lies outside [a, b] off the overlapping segments, drop the rest.
  while (it != m.end() && it->first <= b) {
    const std::uint32_t s = it->first;
    const segment seg = it->second;
    it = m.erase(it);
    if (s < a) m.emplace(s, segment{a - 1, seg.value});
    if (seg.last > b) {
      m.emplace(b + 1, segment{seg.last, seg.value});
      break;
    }
  }
  if (value == 0) return;
  // Insert [a, b], joined with neighbours of the same value.
  std::uint32_t last = b;
  auto next = m.lower_bound(a);
  if (next != m.end() && next->first == b + 1 && next->second.value == value) {
    last = next->second.last;
    next = m.erase(next);
  }
  if (next != m.begin()) {
    auto prev = std::prev(next);
    if (prev->second.last + 1 == a && prev->second.value == value) {
      prev->second.last = last;
      return;
    }
  }
  m.emplace_hint(next, a, segment{last, value});
}

void notice_index::paint(std::uint32_t creator, const std::vector<unit_run>& runs, std::uint32_t index) {
  run_map& m = by_creator_[creator];
  segments_ -= m.segments();
  for (const unit_run& run : runs) m.paint(run, index);
  segments_ += m.segments();
}

std::uint32_t notice_index::latest(std::uint32_t creator, std::uint32_t unit) const {
  return by_creator_[creator].at(unit);
}

void notice_index::forget_through(const vector_time& g) {
  for (std::size_t c = 0; c < by_creator_.size(); ++c) {
    run_map& m = by_creator_[c];
    segments_ -= m.segments();
    m.erase_if([&](std::uint32_t index) { return index <= g[c]; });
    segments_ += m.segments();
  }
}

void notice_index::painted_units(const unit_run& run, std::uint32_t except, std::vector<std::uint32_t>& out) const {
  const std::size_t from = out.size();
  for (std::uint32_t c = 0; c < by_creator_.size(); ++c) {
    if (c == except) continue;
    by_creator_[c].for_each_painted(run, [&](std::uint32_t first, std::uint32_t last) {
      for (std::uint32_t u = first; u <= last; ++u) out.push_back(u);
    });
  }
  std::sort(out.begin() + static_cast<std::ptrdiff_t>(from), out.end());
  out.erase(std::unique(out.begin() + static_cast<std::ptrdiff_t>(from), out.end()), out.end());
}

void notice_index::valid_units(const unit_run& run, std::vector<std::uint32_t>& out) const {
  std::uint32_t u = run.first;
  const std::uint32_t end = run.end();
  while (u < end) {
    const std::uint32_t word = u / 64, bit = u % 64;
    std::uint64_t w = valid_[word] >> bit;
    const std::uint32_t span = std::min<std::uint32_t>(64 - bit, end - u);
    if (span < 64) w &= (std::uint64_t{1} << span) - 1;
    while (w != 0) {
      out.push_back(u + static_cast<std::uint32_t>(std::countr_zero(w)));
      w &= w - 1;
    }
    u += span;
  }
}

}  // namespace mdsm::coherence
