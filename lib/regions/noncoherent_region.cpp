#include "regions/noncoherent_region.hpp"

#include "common/check.hpp"
#include "common/env.hpp"
#include "net/placement.hpp"
#include "os/vm.hpp"

#include <algorithm>
#include <optional>

namespace mdsm::regions {

namespace {

constexpr std::size_t k_max_size = std::size_t{1} << 44;  // as the coherent region

void mpi_ok(int rc, const char* what) {
  if (rc != MPI_SUCCESS) detail::fail(MDSM_ERR_MPI, what, " failed while mapping the non-coherent region");
}

std::uintptr_t addr_of(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

}  // namespace

noncoherent_config noncoherent_config::from_env(noncoherent_config d) {
  d.size = detail::env_size("MDSM_NONCOHERENT_SIZE", d.size);
  return d;
}

noncoherent_region::noncoherent_region(MPI_Comm comm, const noncoherent_config& cfg, std::uintptr_t near_begin,
                                       std::uintptr_t near_end)
    : collective_(0, 0), own_(0, 0) {
  int ranks = 1;
  MPI_Comm_rank(comm, &rank_);
  MPI_Comm_size(comm, &ranks);
  const std::size_t page = os::page_size();
  // Validate locally, then agree: a rank that threw alone would leave the others waiting.
  std::optional<error> problem;
  try {
    if (cfg.size == 0) detail::fail(MDSM_ERR_INVALID_ARGUMENT, "the non-coherent region size must not be 0");
    if (cfg.size > k_max_size)
      detail::fail(MDSM_ERR_INVALID_ARGUMENT, "a non-coherent region of ", cfg.size,
                   " bytes is beyond the address space mdsm can reserve (at most ", k_max_size,
                   " bytes); set a smaller MDSM_NONCOHERENT_SIZE");
    // Whole pages, and at least one page for the collective arena and for each rank's.
    std::size_t pages = std::max<std::size_t>((cfg.size + page - 1) / page, 2 * static_cast<std::size_t>(ranks));
    size_ = pages * page;
    collective_bytes_ = pages / 2 * page;
    arena_bytes_ = (pages - pages / 2) / static_cast<std::size_t>(ranks) * page;
    backing_ = os::create_backing(size_, "mdsm-noncoherent");
  } catch (const error& e) {
    problem = e;
  }
  // From here until the mapping is made, a throw must not leak the backing.
  struct close_on_throw {
    int& fd;
    bool armed = true;
    ~close_on_throw() {
      if (armed && fd >= 0) os::close_backing(fd);
    }
  } guard{backing_};
  int bad = problem ? 1 : 0, any_bad = 0;
  mpi_ok(PMPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, comm), "MPI_Allreduce");
  if (problem) throw *problem;
  if (any_bad)
    detail::fail(MDSM_ERR_MISMATCH, "another rank rejected the non-coherent region settings (see its message)");
  unsigned long long mine = size_, lo = 0, hi = 0;
  mpi_ok(PMPI_Allreduce(&mine, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, comm), "MPI_Allreduce");
  mpi_ok(PMPI_Allreduce(&mine, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, comm), "MPI_Allreduce");
  if (lo != hi)
    detail::fail(MDSM_ERR_MISMATCH, "ranks asked for different non-coherent regions (", lo, "..", hi,
                 " bytes); set MDSM_NONCOHERENT_SIZE the same everywhere");

  net::placement at = net::place_collectively(
      comm, {.what = "non-coherent region",
             .size = size_,
             .preferred = {near_end, near_begin >= size_ ? near_begin - size_ : 0},
             .strict = false,
             .advice = "set a smaller MDSM_NONCOHERENT_SIZE",
             .map =
                 [this](std::uintptr_t a) {
                   return os::map_fixed_noreplace(reinterpret_cast<void*>(a), size_, backing_, os::prot::read_write);
                 }});
  guard.armed = false;
  base_ = at.base;
  placement_ = std::move(at.description);
  collective_ = arena(addr_of(base_), collective_bytes_);
  own_ = arena(addr_of(base_) + collective_bytes_ + static_cast<std::size_t>(rank_) * arena_bytes_, arena_bytes_);
}

noncoherent_region::~noncoherent_region() {
  os::unmap(base_, size_);
  os::close_backing(backing_);
}

int noncoherent_region::arena_owner(const void* p) const noexcept {
  const std::size_t off = addr_of(p) - addr_of(base_);
  if (off < collective_bytes_) return -1;
  return static_cast<int>((off - collective_bytes_) / arena_bytes_);
}

std::size_t noncoherent_region::alignment_for(std::size_t bytes) {
  return bytes >= os::page_size() ? os::page_size() : 16;
}

void* noncoherent_region::alloc(int rank, std::size_t bytes) {
  if (bytes == 0) detail::fail(MDSM_ERR_INVALID_ARGUMENT, "nc_alloc: size 0");
  std::lock_guard lk(mutex_);
  return reinterpret_cast<void*>(
      own_.allocate_or_fail(bytes, alignment_for(bytes), detail::cat("nc_alloc(", bytes, "): rank ", rank, "'s non-coherent arena"),
                            "set a larger MDSM_NONCOHERENT_SIZE (each rank's arena is half the region divided by the ranks)"));
}

void* noncoherent_region::alloc_collective(std::size_t bytes) {
  if (bytes == 0) detail::fail(MDSM_ERR_INVALID_ARGUMENT, "nc_alloc_collective: size 0");
  std::lock_guard lk(mutex_);
  return reinterpret_cast<void*>(collective_.allocate_or_fail(
      bytes, alignment_for(bytes), detail::cat("nc_alloc_collective(", bytes, "): the non-coherent collective arena"),
      "set a larger MDSM_NONCOHERENT_SIZE"));
}

mdsm_status noncoherent_region::free_own(std::uintptr_t addr, std::string& why) {
  std::lock_guard lk(mutex_);
  if (!own_.release(addr)) {
    why = detail::cat("nc_free: ", reinterpret_cast<void*>(addr), " is not the start of a live allocation of rank ",
                      rank_, " (already freed, or a pointer into the middle of an object)");
    return MDSM_ERR_INVALID_ARGUMENT;
  }
  return MDSM_SUCCESS;
}

void noncoherent_region::free_collective(void* p) {
  std::lock_guard lk(mutex_);
  if (!collective_.release(addr_of(p)))
    detail::fail(MDSM_ERR_INVALID_ARGUMENT, "nc_free_collective: ", p,
                 " is not the start of a live collective allocation (already freed?)");
}

}  // namespace mdsm::regions
