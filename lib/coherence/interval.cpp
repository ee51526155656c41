#include "coherence/interval.hpp"

namespace mdsm::coherence {

void interval_record::encode(net::byte_writer& out) const {
  out.put(creator);
  out.put(index);
  vt.encode(out);
  out.put(static_cast<std::uint32_t>(pages.size()));
  out.put_array<std::uint32_t>(pages);
}

record_ptr interval_record::decode(net::byte_reader& in, std::size_t ranks, std::uint32_t page_limit) {
  auto r = std::make_shared<interval_record>();
  r->creator = in.get<std::uint32_t>();
  r->index = in.get<std::uint32_t>();
  if (r->creator >= ranks) net::byte_reader::malformed("interval creator out of range");
  if (r->index == 0) net::byte_reader::malformed("interval index 0");
  r->vt = vector_time::decode(in, ranks);
  if (r->vt[r->creator] != r->index) net::byte_reader::malformed("interval vector time disagrees with its index");
  auto n = in.get<std::uint32_t>();
  in.get_array(n, r->pages);
  for (std::size_t i = 0; i < r->pages.size(); ++i) {
    if (r->pages[i] >= page_limit) net::byte_reader::malformed("write notice for a page outside the region");
    if (i > 0 && r->pages[i] <= r->pages[i - 1]) net::byte_reader::malformed("write notices not sorted");
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
