#include "coherence/page_table.hpp"

namespace mdsm::coherence {

page_table::page_table(std::uint32_t units, unit_start (*initial)(void*, std::uint32_t), void* ctx)
    : units_(units), initial_(initial), ctx_(ctx), chunks_((units + k_chunk - 1) / k_chunk) {}

page_table::~page_table() {
  for (auto& c : chunks_) delete[] c.load();
}

page_entry& page_table::at(std::uint32_t u) {
  MDSM_ASSERT(u < units_, "unit out of range");
  auto& slot = chunks_[u / k_chunk];
  page_entry* chunk = slot.load(std::memory_order_acquire);
  if (chunk == nullptr) {
    std::lock_guard lk(grow_mutex_);
    chunk = slot.load(std::memory_order_acquire);
    if (chunk == nullptr) {
      chunk = new page_entry[k_chunk];
      std::uint32_t first = (u / k_chunk) * k_chunk;
      for (std::uint32_t i = 0; i < k_chunk && first + i < units_; ++i) {
        const unit_start s = initial_(ctx_, first + i);
        chunk[i].state = s.state;
        chunk[i].prot = s.prot;
      }
      slot.store(chunk, std::memory_order_release);
    }
  }
  return chunk[u % k_chunk];
}

page_entry* page_table::find(std::uint32_t u) const {
  page_entry* chunk = chunks_[u / k_chunk].load(std::memory_order_acquire);
  return chunk == nullptr ? nullptr : &chunk[u % k_chunk];
}

}  // namespace mdsm::coherence
