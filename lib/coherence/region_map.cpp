#include "coherence/region_map.hpp"

#include "common/check.hpp"
#include "common/env.hpp"
#include "net/placement.hpp"
#include "os/vm.hpp"

#include <cstdio>
#include <cstring>
#include <optional>
#include <vector>

namespace mdsm::coherence {

namespace {

constexpr std::size_t k_max_size = std::size_t{1} << 44;  // 16 TiB of reservation per view
constexpr std::size_t k_max_unit = std::size_t{1} << 20;

void mpi_ok(int rc, const char* what) {
  if (rc != MPI_SUCCESS) detail::fail(MDSM_ERR_MPI, what, " failed while mapping the coherent region");
}

}  // namespace

region_config region_config::from_env(region_config d) {
  d.size = detail::env_size("MDSM_COHERENT_SIZE", d.size);
  d.unit_pages = detail::env_uint("MDSM_COHERENT_UNIT_PAGES", d.unit_pages);
  d.hot_intervals = static_cast<unsigned>(detail::env_uint("MDSM_HOT_UNIT_INTERVALS", d.hot_intervals));
  d.push_diffs = detail::env_uint("MDSM_PUSH_DIFFS", d.push_diffs ? 1 : 0) != 0;
  d.prefetch = detail::env_uint("MDSM_PREFETCH", d.prefetch ? 1 : 0) != 0;
  d.background_gc = detail::env_uint("MDSM_BACKGROUND_GC", d.background_gc ? 1 : 0) != 0;
  d.register_max = detail::env_size("MDSM_MAKE_COHERENT_MAX", d.register_max);
  if (d.hot_intervals > 255)
    detail::fail(MDSM_ERR_INVALID_ARGUMENT, "MDSM_HOT_UNIT_INTERVALS=", d.hot_intervals, " is above 255");
  if (auto a = detail::env_string("MDSM_COHERENT_ADDRESS")) {
    char* end = nullptr;
    unsigned long long v = std::strtoull(a->c_str(), &end, 0);
    if (end == a->c_str() || *end != '\0')
      detail::fail(MDSM_ERR_INVALID_ARGUMENT, "MDSM_COHERENT_ADDRESS='", *a, "' is not an address");
    d.address = static_cast<std::uintptr_t>(v);
  }
  return d;
}

region_map::region_map(MPI_Comm comm, const region_config& cfg) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &ranks_);
  const std::size_t page = os::page_size();

  // Validate locally, then agree: a rank that throws alone would leave the others waiting in
  // the next collective.
  std::optional<error> problem;
  try {
    if (cfg.unit_pages == 0 || cfg.unit_pages * page > k_max_unit)
      detail::fail(MDSM_ERR_INVALID_ARGUMENT, "coherence unit of ", cfg.unit_pages, " pages is out of range (1 to ",
                   k_max_unit / page, " pages of ", page, " bytes)");
    unit_ = cfg.unit_pages * page;
    if (cfg.size == 0) detail::fail(MDSM_ERR_INVALID_ARGUMENT, "the coherent region size must not be 0");
    if (cfg.size > k_max_size)
      detail::fail(MDSM_ERR_INVALID_ARGUMENT, "a coherent region of ", cfg.size,
                   " bytes is beyond the address space mdsm can reserve (at most ", k_max_size,
                   " bytes); set a smaller MDSM_COHERENT_SIZE");
    // Whole units, and room for a collective arena, one arena per rank and a pool of at least
    // one unit each.
    std::size_t units = (cfg.size + unit_ - 1) / unit_;
    units = std::max<std::size_t>(units, 2 * static_cast<std::size_t>(ranks_) + 2);
    if (cfg.register_max > k_max_size)
      detail::fail(MDSM_ERR_INVALID_ARGUMENT, "MDSM_MAKE_COHERENT_MAX=", cfg.register_max, " is above ", k_max_size);
    const std::size_t capacity = (cfg.register_max + unit_ - 1) / unit_;
    if (units + capacity > UINT32_MAX)
      detail::fail(MDSM_ERR_INVALID_ARGUMENT, "too many coherence units; use a larger unit");
    main_units_ = static_cast<std::uint32_t>(units);
    units_ = static_cast<std::uint32_t>(units + capacity);
    size_ = std::size_t{main_units_} * unit_;
    const auto ranks = static_cast<std::uint32_t>(ranks_);
    collective_units_ = std::max<std::uint32_t>(1, main_units_ / 8);
    arena_units_ = std::max<std::uint32_t>(1, main_units_ / 8 / ranks);
    pool_begin_ = collective_units_ + ranks * arena_units_;
    // About k_chunks chunks: claims are rare (a claim costs a round trip per rank), and a
    // chunk is small next to the pool, so a rank that claims one wastes little of it.
    constexpr std::uint32_t k_chunks = 4096;
    chunk_units_ = std::max<std::uint32_t>(1, (main_units_ - pool_begin_ + k_chunks - 1) / k_chunks);
    const std::uint32_t chunks = (main_units_ - pool_begin_ + chunk_units_ - 1) / chunk_units_;
    chunk_owner_ = std::make_unique<std::atomic<int>[]>(chunks);
    for (std::uint32_t c = 0; c < chunks; ++c) chunk_owner_[c].store(k_unclaimed, std::memory_order_relaxed);
  } catch (const error& e) {
    problem = e;
  }
  int bad = problem ? 1 : 0, any_bad = 0;
  mpi_ok(PMPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, comm), "MPI_Allreduce");
  if (problem) throw *problem;
  if (any_bad) detail::fail(MDSM_ERR_MISMATCH, "another rank rejected the coherent region settings (see its message)");

  // Every rank must describe the same region, or addresses would mean different things.
  unsigned long long mine[3] = {size_, unit_, units_}, lo[3], hi[3];
  mpi_ok(PMPI_Allreduce(mine, lo, 3, MPI_UNSIGNED_LONG_LONG, MPI_MIN, comm), "MPI_Allreduce");
  mpi_ok(PMPI_Allreduce(mine, hi, 3, MPI_UNSIGNED_LONG_LONG, MPI_MAX, comm), "MPI_Allreduce");
  if (lo[0] != hi[0] || lo[1] != hi[1])
    detail::fail(MDSM_ERR_MISMATCH, "ranks asked for different coherent regions (sizes ", lo[0], "..", hi[0],
                 ", units ", lo[1], "..", hi[1], "); set MDSM_COHERENT_SIZE the same everywhere");
  if (lo[2] != hi[2])
    detail::fail(MDSM_ERR_MISMATCH, "ranks asked for different room for make_coherent; set MDSM_MAKE_COHERENT_MAX the ",
                 "same everywhere");

  // The backing and the library view cover the registration capacity too (reserved, not
  // committed); the application view only the region's own units.
  fd_ = os::create_backing(std::size_t{units_} * unit_, "mdsm-coherent");
  net::placement at;
  try {
    at = net::place_collectively(
        comm, {.what = "coherent region",
               .size = size_,
               .preferred = {cfg.address},
               .strict = cfg.strict_address,
               .advice = cfg.strict_address ? "drop the strict address requirement or pick another MDSM_COHERENT_ADDRESS"
                                            : "set a smaller MDSM_COHERENT_SIZE or a free MDSM_COHERENT_ADDRESS",
               .map = [this](std::uintptr_t a) {
                 return os::map_fixed_noreplace(reinterpret_cast<void*>(a), size_, fd_, os::prot::none);
               }});
  } catch (...) {
    os::close_backing(fd_);
    throw;
  }
  app_ = at.base;
  lib_ = static_cast<std::byte*>(os::map_anywhere(std::size_t{units_} * unit_, fd_));
  placement_ = std::move(at.description);
}

auto region_map::where_registered(const void* p, std::size_t len) const noexcept -> placement_of {
  if (len == 0) return contains(p) ? placement_of::inside : placement_of::outside;
  const std::uintptr_t a = addr(p), e = a + len;
  placement_of so_far = relative(a, e, app_, size_);
  const int n = segment_count_.load(std::memory_order_acquire);
  for (int i = 0; i < n && so_far != placement_of::inside; ++i) {
    const placement_of here = relative(a, e, segments_[i].app, std::size_t{segments_[i].count} * unit_);
    if (here != placement_of::outside) so_far = here;
  }
  return so_far;
}

auto region_map::segment_for(std::uint32_t u) const noexcept -> const segment* {
  const int n = segment_count_.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i)
    if (u - segments_[i].first < segments_[i].count) return &segments_[i];
  // A protection or address asked for a unit of the capacity nobody registered: only a bug in
  // mdsm gets here, and going on would touch memory that is not the region's.
  detail::die("mdsm: internal error: a unit of the make_coherent capacity that no registration holds");
}

std::uint32_t region_map::segment_end(std::uint32_t u) const noexcept {
  const segment* s = segment_for(u);
  return s->first + s->count;
}

mdsm_status region_map::check_register(const void* addr_p, std::size_t bytes, std::string& why) const {
  const std::uintptr_t a = addr(addr_p);
  if (addr_p == nullptr || bytes == 0) {
    why = detail::cat("make_coherent: an empty range (", addr_p, ", ", bytes, " bytes)");
    return MDSM_ERR_INVALID_ARGUMENT;
  }
  if (a % unit_ != 0 || bytes % unit_ != 0) {
    why = detail::cat("make_coherent: the range [", addr_p, ", +", bytes, " bytes) must start and end on a coherence ",
                      "unit boundary (", unit_, " bytes); align the object with alignas(", unit_,
                      ") so that its size is a multiple of it too");
    return MDSM_ERR_INVALID_ARGUMENT;
  }
  if (a + bytes < a || a + bytes > os::address_space_end()) {
    why = detail::cat("make_coherent: the range [", addr_p, ", +", bytes, " bytes) runs past the address space");
    return MDSM_ERR_INVALID_ARGUMENT;
  }
  if (where(addr_p, bytes) != placement_of::outside ||
      relative(a, a + bytes, lib_, std::size_t{units_} * unit_) != placement_of::outside) {
    why = detail::cat("make_coherent: the range [", addr_p, ", +", bytes,
                      " bytes) overlaps the coherent region or a range registered before");
    return MDSM_ERR_INVALID_ARGUMENT;
  }
  if (segment_count_.load(std::memory_order_relaxed) == k_segments_max) {
    why = detail::cat("make_coherent: at most ", k_segments_max, " ranges can be registered; put the shared globals ",
                      "in fewer objects");
    return MDSM_ERR_OUT_OF_MEMORY;
  }
  const std::size_t free_bytes = std::size_t{units_ - registered_end()} * unit_;
  if (bytes > free_bytes) {
    why = detail::cat("make_coherent: ", bytes, " bytes do not fit in the ", free_bytes,
                      " bytes left for registered ranges; set MDSM_MAKE_COHERENT_MAX (now ",
                      std::size_t{units_ - main_units_} * unit_, ") higher on every rank");
    return MDSM_ERR_OUT_OF_MEMORY;
  }
  if (!os::is_mapped(addr_p, bytes)) {
    why = detail::cat("make_coherent: [", addr_p, ", +", bytes, " bytes) is not all memory of this process");
    return MDSM_ERR_INVALID_ARGUMENT;
  }
  return MDSM_SUCCESS;
}

std::uint32_t region_map::register_range(void* addr_p, std::size_t bytes, bool keep_bytes) {
  const int n = segment_count_.load(std::memory_order_relaxed);
  const std::uint32_t first = registered_end();
  const auto count = static_cast<std::uint32_t>(bytes / unit_);
  if (keep_bytes) std::memcpy(lib_unit(first), addr_p, bytes);
  os::map_shared_over(addr_p, bytes, fd_, std::size_t{first} * unit_, os::prot::none);
  segments_[n] = segment{static_cast<std::byte*>(addr_p), first, count};
  segment_count_.store(n + 1, std::memory_order_release);
  return first;
}

void region_map::set_chunk_owner(std::uint32_t first, std::uint32_t count, int owner) noexcept {
  for (std::uint32_t c = (first - pool_begin_) / chunk_units_; c <= (first + count - 1 - pool_begin_) / chunk_units_; ++c)
    chunk_owner_[c].store(owner, std::memory_order_release);
}

region_map::~region_map() {
  // A registered range is the program's own memory (its globals), which it may use after
  // finalize: it becomes private memory again holding this rank's copy.
  for (int i = 0; i < segment_count_.load(std::memory_order_acquire); ++i) {
    const segment& s = segments_[i];
    const std::size_t bytes = std::size_t{s.count} * unit_;
    try {
      os::map_private_over(s.app, bytes);
      std::memcpy(s.app, lib_unit(s.first), bytes);
    } catch (const error& e) {
      std::fprintf(stderr, "mdsm: %s\n", e.what());
    }
  }
  os::unmap(lib_, std::size_t{units_} * unit_);
  os::unmap(app_, size_);
  os::close_backing(fd_);
}

}  // namespace mdsm::coherence
