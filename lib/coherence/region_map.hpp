// The coherent region's mapping and layout.
//
// The region is mapped at one virtual address on every rank, agreed collectively at init with
// MAP_FIXED_NOREPLACE (an existing mapping is never clobbered: if any rank cannot map the
// candidate address, all ranks try another one). Its memory is reserved, not committed.
//
// Layout, in coherence units (a unit is `unit_pages` OS pages):
//   [0, collective_units)                      the collective arena (an eighth of the region):
//                                              every rank allocates the same objects at the
//                                              same addresses
//   then one arena of arena_units per rank     non-collective allocations by that rank (together
//                                              an eighth of the region)
//   then the pool, the rest, in chunks         runs of chunks claimed on demand, for one rank's
//                                              non-collective allocations or for the collective
//                                              arena, once the fixed arenas are full; never
//                                              given back (regions/coherent_allocator.cpp)
// So one rank may allocate most of the region (a main process that allocates everything), and
// so may the collective allocations; the fixed arenas keep small programs off the pool.
// The owner of a claimed chunk is in the chunk directory, which every rank has recorded before
// the claim's address is returned (so before any rank can hold a pointer into it).
// Default home of a unit (who keeps an authoritative copy after garbage collection, and who
// serves whole-unit fetches): the arena or chunk owner, or unit % ranks for collective units.
// The engine gives the units of a collective allocation blocks of it instead (engine::home_of).
//
// Registered ranges (make_coherent): memory the program already has (its globals) joins the
// region. Their units are numbered after the region's own, up to a capacity fixed at init
// (region_config::register_max), so that every per-unit table is sized once; the backing and the
// library view cover the capacity, and a registration maps the range onto its part of the
// backing. Rank 0 is their home (it is the process that set the globals up). A unit's address in
// the application view is therefore app_base() + u * unit() only for the region's own units:
// use app_unit / unit_of / contains / app_runs, never arithmetic on app_base().
#pragma once

#include <mdsm/mdsm.h>
#include <mpi.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <memory>
#include <cstdint>
#include <string>

namespace mdsm::coherence {

struct region_config {
  std::size_t size = std::size_t{1} << 30;  // bytes; rounded up to whole units
  std::size_t unit_pages = 1;               // coherence unit, in OS pages
  std::uintptr_t address = 0;               // requested address; 0 = let the ranks agree on one
  bool strict_address = false;              // fail rather than move away from `address`
  // Interval closes a unit written in two consecutive intervals stays writable for (0: none;
  // at most 255). See engine::close_interval_locked.
  unsigned hot_intervals = 32;
  // Push the diffs of units a rank keeps re-reading along with our RELEASEs to it
  // (engine::encode_pushed_locked).
  bool push_diffs = true;
  // Ask for the next window of a walk through another rank's units while the current one is
  // fetched (engine::start_prefetch).
  bool prefetch = true;
  // Collect garbage in the background, without a barrier, past 1.5x the threshold
  // (background_gc.cpp).
  bool background_gc = true;
  // Bytes that make_coherent may register in all (rounded up to whole units; reserved address
  // space and table room only).
  std::size_t register_max = std::size_t{64} << 20;
  // MDSM_COHERENT_SIZE, _UNIT_PAGES, _ADDRESS, MDSM_HOT_UNIT_INTERVALS, MDSM_PUSH_DIFFS,
  // MDSM_PREFETCH, MDSM_BACKGROUND_GC, MDSM_MAKE_COHERENT_MAX
  static region_config from_env(region_config defaults);
};

class region_map {
 public:
  // Collective over `comm`. Throws MDSM_ERR_REGION_MAP, MDSM_ERR_INVALID_ARGUMENT or
  // MDSM_ERR_MISMATCH (ranks passed different sizes) with a message saying what to change.
  region_map(MPI_Comm comm, const region_config& cfg);
  ~region_map();
  region_map(const region_map&) = delete;
  region_map& operator=(const region_map&) = delete;

  // The region's own application view (registered ranges lie elsewhere) and its size.
  std::byte* app_base() const noexcept { return app_; }
  std::size_t size() const noexcept { return size_; }
  std::size_t unit() const noexcept { return unit_; }
  // Every unit number, the registration capacity included: per-unit tables have this many.
  std::uint32_t units() const noexcept { return units_; }
  // The region's own units, [0, main_units()); registered ones follow.
  std::uint32_t main_units() const noexcept { return main_units_; }
  int ranks() const noexcept { return ranks_; }

  // Whether p lies in the region or in a registered range.
  bool contains(const void* p) const noexcept { return in_main(p) || segment_of(p) != nullptr; }
  // Pre: contains(p).
  std::uint32_t unit_of(const void* p) const noexcept {
    if (in_main(p)) [[likely]]
      return static_cast<std::uint32_t>((addr(p) - addr(app_)) / unit_);
    const segment* s = segment_of(p);
    return s->first + static_cast<std::uint32_t>((addr(p) - addr(s->app)) / unit_);
  }
  // Pre: u is the region's or a registered range's.
  std::byte* app_unit(std::uint32_t u) const noexcept {
    if (u < main_units_) [[likely]]
      return app_ + std::size_t{u} * unit_;
    const segment* s = segment_for(u);
    return s->app + std::size_t{u - s->first} * unit_;
  }
  std::byte* lib_unit(std::uint32_t u) const noexcept { return lib_ + std::size_t{u} * unit_; }
  // Calls f(address, bytes) for the application view of units [first, first + count), one call
  // per piece that is contiguous in memory (the region's own units, one registered range).
  template <class F>
  void app_runs(std::uint32_t first, std::uint32_t count, F&& f) const {
    while (count != 0) {
      const std::uint32_t end = first < main_units_ ? main_units_ : segment_end(first);
      const std::uint32_t n = std::min(count, end - first);
      f(app_unit(first), std::size_t{n} * unit_);
      first += n;
      count -= n;
    }
  }

  // Where [p, p + len) lies: outside the region and every registered range, wholly inside one of
  // them, or partly inside (which callers refuse).
  enum class placement_of { outside, inside, partly };
  placement_of where(const void* p, std::size_t len) const noexcept {
    // Inline while nothing is registered: the MPI calls ask this of every buffer.
    if (segment_count_.load(std::memory_order_acquire) != 0) [[unlikely]]
      return where_registered(p, len);
    if (len == 0) return in_main(p) ? placement_of::inside : placement_of::outside;
    return relative(addr(p), addr(p) + len, app_, size_);
  }

  // make_coherent's checks, without side effects: MDSM_SUCCESS, or a status and `why`.
  mdsm_status check_register(const void* addr, std::size_t bytes, std::string& why) const;
  // Makes [addr, addr + bytes) a registered range: maps it onto the next free part of the
  // backing, inaccessible; with `keep_bytes` the range's present bytes are copied there first
  // (rank 0's), otherwise they are gone. Returns the range's first unit. Pre: check_register
  // passed; application threads only, one registration at a time.
  std::uint32_t register_range(void* addr, std::size_t bytes, bool keep_bytes);
  // Whether p lies in a registered range.
  bool registered(const void* p) const noexcept { return segment_of(p) != nullptr; }

  std::uint32_t collective_units() const noexcept { return collective_units_; }
  std::uint32_t arena_units() const noexcept { return arena_units_; }
  std::uint32_t arena_begin(int rank) const noexcept {
    return collective_units_ + static_cast<std::uint32_t>(rank) * arena_units_;
  }
  std::uint32_t pool_begin() const noexcept { return pool_begin_; }
  std::uint32_t pool_units() const noexcept { return main_units_ - pool_begin_; }
  std::uint32_t chunk_units() const noexcept { return chunk_units_; }

  // arena_owner's answers besides a rank.
  static constexpr int k_collective = -1;  // the collective arena, or a chunk claimed for it
  static constexpr int k_unclaimed = -2;   // a pool chunk nobody has claimed (as far as we know)

  // Owner of the arena or pool chunk holding unit u: a rank, k_collective or k_unclaimed.
  // Registered units belong to rank 0, as if allocated in its arena; the capacity beyond them is
  // nobody's (a readahead that looks past the region's end stops there, as at an unclaimed chunk).
  int arena_owner(std::uint32_t u) const noexcept {
    if (u < collective_units_) return k_collective;
    if (u < pool_begin_) return static_cast<int>((u - collective_units_) / arena_units_);
    if (u >= main_units_) [[unlikely]]
      return u < registered_end() ? 0 : k_unclaimed;
    return chunk_owner_[(u - pool_begin_) / chunk_units_].load(std::memory_order_acquire);
  }
  int home_of(std::uint32_t u) const noexcept {
    int owner = arena_owner(u);
    return owner >= 0 ? owner : static_cast<int>(u % static_cast<std::uint32_t>(ranks_));
  }
  // Records that the pool units [first, first + count) (whole chunks) belong to `owner` (a rank
  // or k_collective). Any thread, handlers included.
  void set_chunk_owner(std::uint32_t first, std::uint32_t count, int owner) noexcept;
  const std::string& placement() const noexcept { return placement_; }

 private:
  // A registered range. Published by segment_count_ (release) and never changed afterwards.
  struct segment {
    std::byte* app = nullptr;
    std::uint32_t first = 0, count = 0;
  };
  static constexpr int k_segments_max = 64;
  static std::uintptr_t addr(const void* p) noexcept { return reinterpret_cast<std::uintptr_t>(p); }
  bool in_main(const void* p) const noexcept { return addr(p) - addr(app_) < size_; }
  const segment* segment_of(const void* p) const noexcept {
    const int n = segment_count_.load(std::memory_order_acquire);
    for (int i = 0; i < n; ++i)
      if (addr(p) - addr(segments_[i].app) < std::size_t{segments_[i].count} * unit_) return &segments_[i];
    return nullptr;
  }
  // Where [a, e) (a < e) lies relative to [base, base + bytes).
  static placement_of relative(std::uintptr_t a, std::uintptr_t e, const std::byte* base, std::size_t bytes) noexcept {
    const std::uintptr_t b = addr(base);
    if (a >= b && e <= b + bytes && e >= a) return placement_of::inside;
    return a < b + bytes && b < e ? placement_of::partly : placement_of::outside;
  }
  // where() once ranges are registered.
  placement_of where_registered(const void* p, std::size_t len) const noexcept;
  const segment* segment_for(std::uint32_t u) const noexcept;
  // The unit after the last registered one (main_units_ when none is).
  std::uint32_t registered_end() const noexcept {
    const int n = segment_count_.load(std::memory_order_acquire);
    return n == 0 ? main_units_ : segments_[n - 1].first + segments_[n - 1].count;
  }
  // The unit after the registered range holding u. Pre: a registered range holds u.
  std::uint32_t segment_end(std::uint32_t u) const noexcept;

  std::byte* app_ = nullptr;
  std::byte* lib_ = nullptr;
  int fd_ = -1;
  std::size_t size_ = 0;   // the region's own bytes
  std::size_t unit_ = 0;
  std::uint32_t main_units_ = 0;
  std::uint32_t units_ = 0;  // main_units_ + the registration capacity
  std::array<segment, k_segments_max> segments_{};
  std::atomic<int> segment_count_{0};
  std::uint32_t collective_units_ = 0;
  std::uint32_t arena_units_ = 0;
  std::uint32_t pool_begin_ = 0;
  std::uint32_t chunk_units_ = 1;
  std::unique_ptr<std::atomic<int>[]> chunk_owner_;  // per pool chunk: a rank, k_collective, k_unclaimed
  int ranks_ = 1;
  std::string placement_;
};

}  // namespace mdsm::coherence
