// one_sided's direct access to the ranks of this host (regions/one_sided.hpp, "Direct access"):
// the start-up probe, the mapping of each peer's region, and the copies through the kernel where
// a region is not mapped.
#include "regions/one_sided.hpp"

#include "common/check.hpp"
#include "common/env.hpp"
#include "os/vm.hpp"
#include "stats/counters.hpp"

#include <algorithm>
#include <cstring>
#include <fcntl.h>
#include <random>
#include <string>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

namespace mdsm::regions {

namespace {

std::uintptr_t addr_of(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }
std::byte* ptr_of(std::uint64_t a) { return reinterpret_cast<std::byte*>(static_cast<std::uintptr_t>(a)); }

}  // namespace

void one_sided::probe_direct() {
  const auto size = static_cast<std::size_t>(transport_.size());
  direct_.assign(size, 0);
  mapped_.assign(size, nullptr);
  pids_.assign(size, 0);
  // What each rank publishes: its pid, the address and value of a nonce in its memory, and the
  // descriptor of its region's backing.
  static std::uint64_t nonce = 0;
  nonce = std::random_device{}() | (std::uint64_t{std::random_device{}()} << 32) | 1;
  const std::uint64_t mine[4] = {static_cast<std::uint64_t>(::getpid()), addr_of(&nonce), nonce,
                                 static_cast<std::uint64_t>(region_.backing())};
  std::vector<std::uint64_t> all(4 * size);
  if (PMPI_Allgather(mine, 4, MPI_UINT64_T, all.data(), 4, MPI_UINT64_T, transport_.collective_comm()) != MPI_SUCCESS)
    detail::fail(MDSM_ERR_MPI, "MPI_Allgather failed while setting up the non-coherent region");
  if (detail::env_uint("MDSM_NONCOHERENT_DIRECT", 1) == 0) return;
  const bool map = detail::env_uint("MDSM_NONCOHERENT_MAP", 1) != 0;
  for (std::size_t r = 0; r < size; ++r) {
    if (static_cast<int>(r) == rank_ || !transport_.bells().on_host(static_cast<int>(r))) continue;
    pids_[r] = static_cast<int>(all[4 * r]);
    // The pid names the rank (not another process, as in another pid namespace) if its nonce
    // reads back from that process: then its descriptor names its backing.
    std::uint64_t seen = 0;
    iovec local{&seen, sizeof seen}, remote{ptr_of(all[4 * r + 1]), sizeof seen};
    direct_[r] = process_vm_readv(pids_[r], &local, 1, &remote, 1, 0) == static_cast<ssize_t>(sizeof seen) &&
                 seen == all[4 * r + 2];
    if (direct_[r] && map) mapped_[r] = map_region_of(pids_[r], all[4 * r + 3]);
  }
}

std::byte* one_sided::map_region_of(int pid, std::uint64_t fd) const {
  const std::string path = detail::cat("/proc/", pid, "/fd/", fd);
  const int mine = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (mine < 0) return nullptr;
  std::byte* at = nullptr;
  struct stat st {};
  if (::fstat(mine, &st) == 0 && static_cast<std::size_t>(st.st_size) == region_.size()) {
    try {
      at = static_cast<std::byte*>(os::map_anywhere(region_.size(), mine));
    } catch (const error&) {  // no room in the address space, say: the copies through the kernel do
      at = nullptr;
    }
  }
  ::close(mine);
  return at;
}

namespace {

// The kernel's copy between two processes runs at a fifth of its speed on our machines when the
// destination sits 8 to 24 bytes past the source modulo 64 (measured with process_vm_readv:
// 256 KiB in ~35 us at offsets 0 and 32-56, ~170-280 us at 8-24, whatever the absolute
// alignment). A transfer whose ends are misaligned so goes through this thread's bounce buffer,
// placed at the remote end's alignment: one more copy, in user space, where misalignment costs
// little.
constexpr std::size_t k_bounce_bytes = std::size_t{256} << 10;
constexpr std::size_t k_bounce_min = 1024;  // below, the extra call costs more than it saves

// Measured slow: 8, 16, 24; fast: 0, 32, 40, 48, 56. The unmeasured 1-31 count as slow.
bool slow_for_kernel(std::uintptr_t dst, std::uintptr_t src) {
  const std::uintptr_t rel = (dst - src) & 63;
  return rel != 0 && rel < 32;
}

std::byte* bounce_at(std::uintptr_t alignment_of) {
  thread_local std::unique_ptr<std::byte[]> buffer;
  if (!buffer) buffer = std::make_unique_for_overwrite<std::byte[]>(k_bounce_bytes + 128);
  const std::uintptr_t base = (addr_of(buffer.get()) + 63) & ~std::uintptr_t{63};
  return ptr_of(base + (alignment_of & 63));
}

}  // namespace

bool one_sided::copy_direct(int rank, void* local, void* remote, std::size_t n, bool write) {
  if (!direct_now(rank)) return false;
  if (mapped_[static_cast<std::size_t>(rank)] != nullptr) {
    std::byte* there = mapped_at(rank, remote);
    if (write) std::memcpy(there, local, n);
    else std::memcpy(local, there, n);
    // Complete when this returns: a message this thread sends next is ordered after the copy
    // (a large memcpy's non-temporal stores included).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    stats::add(stats::counter::nc_direct);
    return true;
  }
  const pid_t pid = pids_[static_cast<std::size_t>(rank)];
  auto* l = static_cast<std::byte*>(local);
  auto* r = static_cast<std::byte*>(remote);
  const bool bounce =
      n >= k_bounce_min && (write ? slow_for_kernel(addr_of(r), addr_of(l)) : slow_for_kernel(addr_of(l), addr_of(r)));
  while (n != 0) {
    // The kernel may move less than asked (at most what one call takes); with the bounce buffer,
    // a chunk of it at a time.
    const std::size_t len = bounce ? std::min(n, k_bounce_bytes) : n;
    std::byte* via = bounce ? bounce_at(addr_of(r)) : l;
    if (bounce && write) std::memcpy(via, l, len);
    iovec li{via, len}, ri{r, len};
    const ssize_t got = write ? process_vm_writev(pid, &li, 1, &ri, 1, 0) : process_vm_readv(pid, &li, 1, &ri, 1, 0);
    if (got <= 0) return false;  // EFAULT on a local page without access, say: messages do it
    if (bounce && !write) std::memcpy(l, via, static_cast<std::size_t>(got));
    l += got;
    r += got;
    n -= static_cast<std::size_t>(got);
  }
  stats::add(stats::counter::nc_direct);
  return true;
}

}  // namespace mdsm::regions
