// A first-fit allocator over address ranges (one to begin with, more added by grow), with
// coalescing: adjacent ranges become one, so an allocation may span them. Its metadata lives in
// private memory (never in the region it manages), so allocating never touches coherent pages.
// Also used over abstract index spaces (the coherent pool's chunks). Not synchronised; the
// owner guards it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string_view>

namespace mdsm::regions {

class arena {
 public:
  arena(std::uintptr_t begin, std::size_t bytes);

  // Adds the free range [begin, begin + bytes), which overlaps nothing managed already.
  void grow(std::uintptr_t begin, std::size_t bytes);

  // An address aligned to `align` (a power of two) with `bytes` free after it, or nullopt.
  std::optional<std::uintptr_t> allocate(std::size_t bytes, std::size_t align);
  // allocate(), or fails with MDSM_ERR_OUT_OF_MEMORY: "<who> has F bytes free (largest block L)
  // of C; <advice>" (who names the call and the arena, advice says what to change).
  std::uintptr_t allocate_or_fail(std::size_t bytes, std::size_t align, std::string_view who, std::string_view advice);
  // The size of the allocation that starts at `addr`, which is now free; nullopt if no
  // allocation starts there.
  std::optional<std::size_t> release(std::uintptr_t addr);
  // The allocation containing `addr`: (start, size), or nullopt.
  std::optional<std::pair<std::uintptr_t, std::size_t>> find(std::uintptr_t addr) const;

  std::size_t free_bytes() const noexcept { return free_total_; }
  std::size_t largest_free() const;
  std::size_t capacity() const noexcept { return bytes_; }

 private:
  void insert_free(std::uintptr_t start, std::size_t len);  // coalescing with its neighbours

  std::size_t bytes_;
  std::size_t free_total_;
  std::map<std::uintptr_t, std::size_t> free_;  // start -> size, never adjacent
  std::map<std::uintptr_t, std::size_t> used_;  // start -> size
};

}  // namespace mdsm::regions
