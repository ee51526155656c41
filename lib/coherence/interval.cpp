#include "coherence/interval.hpp"

#include <algorithm>
#include <iterator>

namespace mdsm::coherence {

std::vector<unit_run> merge_runs(const std::vector<unit_run>& a, const std::vector<unit_run>& b) {
  std::vector<unit_run> out;
  out.reserve(a.size() + b.size());
  std::size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    const unit_run r = j == b.size() || (i < a.size() && a[i].first < b[j].first) ? a[i++] : b[j++];
    if (!out.empty() && out.back().end() >= r.first) {
      out.back().count = std::max(out.back().end(), r.end()) - out.back().first;
    } else {
      out.push_back(r);
    }
  }
  return out;
}

std::size_t interval_record::units() const {
  std::size_t n = 0;
  for (const unit_run& r : runs) n += r.count;
  return n;
}

bool interval_record::contains(std::uint32_t unit) const {
  auto it = std::upper_bound(runs.begin(), runs.end(), unit,
                             [](std::uint32_t u, const unit_run& r) { return u < r.first; });
  return it != runs.begin() && unit < std::prev(it)->end();
}

void interval_record::encode(net::byte_writer& out) const {
  out.put(creator);
  out.put(index);
  vt.encode(out);
  out.put(static_cast<std::uint32_t>(runs.size()));
  out.put_array<unit_run>(runs);
}

record_ptr interval_record::decode(net::byte_reader& in, std::size_t ranks, std::uint32_t unit_limit) {
  auto r = std::make_shared<interval_record>();
  r->creator = in.get<std::uint32_t>();
  r->index = in.get<std::uint32_t>();
  if (r->creator >= ranks) net::byte_reader::malformed("interval creator out of range");
  if (r->index == 0) net::byte_reader::malformed("interval index 0");
  r->vt = vector_time::decode(in, ranks);
  if (r->vt[r->creator] != r->index) net::byte_reader::malformed("interval vector time disagrees with its index");
  auto n = in.get<std::uint32_t>();
  in.get_array(n, r->runs);
  for (std::size_t i = 0; i < r->runs.size(); ++i) {
    const unit_run& run = r->runs[i];
    if (run.count == 0) net::byte_reader::malformed("empty run of write notices");
    if (run.first >= unit_limit || run.count > unit_limit - run.first)
      net::byte_reader::malformed("write notice for a unit outside the region");
    if (i > 0 && run.first <= r->runs[i - 1].end()) net::byte_reader::malformed("write notices not sorted");
  }
  return r;
}

void interval_store::add(record_ptr r) {
  MDSM_ASSERT(r->index == newest(r->creator) + 1, "interval records must be added in order");
  bytes_ += r->footprint();
  by_creator_[r->creator].push_back(std::move(r));
}

record_ptr interval_store::find(std::uint32_t creator, std::uint32_t index) const {
  if (creator >= by_creator_.size() || index <= base_[creator] || index > newest(creator)) return nullptr;
  return by_creator_[creator][index - base_[creator] - 1];
}

std::size_t interval_store::collect(const vector_time& upto) {
  std::size_t freed = 0;
  for (std::size_t c = 0; c < by_creator_.size(); ++c) {
    auto& q = by_creator_[c];
    while (!q.empty() && q.front()->index <= upto[c]) {
      freed += q.front()->footprint();
      q.pop_front();
      ++base_[c];
    }
  }
  bytes_ -= freed;
  return freed;
}

}  // namespace mdsm::coherence
