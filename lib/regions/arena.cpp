#include "regions/arena.hpp"

#include "common/check.hpp"

#include <algorithm>

namespace mdsm::regions {

arena::arena(std::uintptr_t begin, std::size_t bytes) : bytes_(bytes), free_total_(bytes) {
  if (bytes > 0) free_.emplace(begin, bytes);
}

void arena::grow(std::uintptr_t begin, std::size_t bytes) {
  if (bytes == 0) return;
  bytes_ += bytes;
  free_total_ += bytes;
  insert_free(begin, bytes);
}

std::optional<std::uintptr_t> arena::allocate(std::size_t bytes, std::size_t align) {
  if (bytes == 0 || bytes > free_total_) return std::nullopt;
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    const std::uintptr_t start = it->first;
    const std::size_t size = it->second;
    const std::uintptr_t aligned = (start + align - 1) & ~(static_cast<std::uintptr_t>(align) - 1);
    const std::size_t pad = aligned - start;
    if (pad > size || size - pad < bytes) continue;
    free_.erase(it);
    if (pad > 0) free_.emplace(start, pad);
    const std::size_t tail = size - pad - bytes;
    if (tail > 0) free_.emplace(aligned + bytes, tail);
    used_.emplace(aligned, bytes);
    free_total_ -= bytes;
    return aligned;
  }
  return std::nullopt;
}

std::uintptr_t arena::allocate_or_fail(std::size_t bytes, std::size_t align, std::string_view who,
                                       std::string_view advice) {
  if (auto addr = allocate(bytes, align)) return *addr;
  detail::fail(MDSM_ERR_OUT_OF_MEMORY, who, " has ", free_bytes(), " bytes free (largest block ", largest_free(), ") of ",
               capacity(), "; ", advice);
}

std::optional<std::size_t> arena::release(std::uintptr_t addr) {
  auto u = used_.find(addr);
  if (u == used_.end()) return std::nullopt;
  std::size_t size = u->second;
  used_.erase(u);
  free_total_ += size;
  insert_free(addr, size);
  return size;
}

void arena::insert_free(std::uintptr_t start, std::size_t len) {
  const std::uintptr_t end = start + len;
  auto next = free_.lower_bound(start);
  if (next != free_.end() && next->first == end) {
    len += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      len += prev->second;
      free_.erase(prev);
    }
  }
  free_.emplace(start, len);
}

std::optional<std::pair<std::uintptr_t, std::size_t>> arena::find(std::uintptr_t addr) const {
  auto it = used_.upper_bound(addr);
  if (it == used_.begin()) return std::nullopt;
  --it;
  if (addr >= it->first + it->second) return std::nullopt;
  return *it;
}

std::size_t arena::largest_free() const {
  std::size_t best = 0;
  for (const auto& [start, size] : free_) best = std::max(best, size);
  return best;
}

}  // namespace mdsm::regions
