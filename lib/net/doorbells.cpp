#include "net/doorbells.hpp"

#include "common/check.hpp"
#include "os/futex.hpp"
#include "stats/counters.hpp"

#include <ctime>
#include <new>

namespace mdsm::net {

doorbells::doorbells(MPI_Comm comm) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  slots_.assign(static_cast<std::size_t>(size), nullptr);
  last_nudge_ = std::make_unique<std::atomic<std::uint64_t>[]>(static_cast<std::size_t>(size));
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node_);
  MPI_Comm_set_errhandler(node_, MPI_ERRORS_RETURN);
  int node_rank = 0, node_size = 1, rank = 0;
  MPI_Comm_rank(node_, &node_rank);
  MPI_Comm_size(node_, &node_size);
  MPI_Comm_rank(comm, &rank);
  std::vector<int> ranks(static_cast<std::size_t>(node_size));
  PMPI_Allgather(&rank, 1, MPI_INT, ranks.data(), 1, MPI_INT, node_);
  // One window for the host: node rank 0 allocates every slot, contiguously, from a cache-line
  // boundary. MPI aligns a shared window only to 8 bytes or so (Open MPI's started at 0x...108):
  // slots placed at its start were misaligned (undefined behaviour for their alignas(64) type,
  // and ranks' bells shared cache lines), so the window has room to start them further in.
  void* base = nullptr;
  const MPI_Aint bytes =
      node_rank == 0 ? static_cast<MPI_Aint>(sizeof(slot)) * node_size + static_cast<MPI_Aint>(alignof(slot) - 1) : 0;
  int ok = MPI_Win_allocate_shared(bytes, 1, MPI_INFO_NULL, node_, &base, &win_) == MPI_SUCCESS ? 1 : 0;
  int all_ok = 0;
  PMPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, node_);
  if (all_ok) {
    MPI_Aint got = 0;
    int disp = 0;
    void* first = nullptr;
    all_ok = MPI_Win_shared_query(win_, 0, &got, &disp, &first) == MPI_SUCCESS && first != nullptr;
    // The slots' offset in the window, as node rank 0 sees it; every rank maps the window at its
    // own address, so each checks that the offset aligns its view too (page-aligned mappings do).
    std::uint64_t pad = 0;
    if (node_rank == 0 && all_ok)
      pad = (alignof(slot) - reinterpret_cast<std::uintptr_t>(first) % alignof(slot)) % alignof(slot);
    PMPI_Bcast(&pad, 1, MPI_UINT64_T, 0, node_);
    if (all_ok) {
      first = static_cast<std::byte*>(first) + pad;
      all_ok = reinterpret_cast<std::uintptr_t>(first) % alignof(slot) == 0 &&
               got >= static_cast<MPI_Aint>(pad + sizeof(slot) * static_cast<std::size_t>(node_size));
    }
    int agree = all_ok ? 1 : 0;
    PMPI_Allreduce(&agree, &all_ok, 1, MPI_INT, MPI_MIN, node_);
    if (all_ok) {
      auto* slots = static_cast<slot*>(first);
      if (node_rank == 0)
        for (int i = 0; i < node_size; ++i) new (&slots[i]) slot();
      PMPI_Barrier(node_);  // initialized before anyone rings
      for (int i = 0; i < node_size; ++i) slots_[static_cast<std::size_t>(ranks[static_cast<std::size_t>(i)])] = &slots[i];
      mine_ = &slots[node_rank];
      int fence_ok = os::register_heavy_fence() ? 1 : 0, all_fence_ok = 0;
      PMPI_Allreduce(&fence_ok, &all_fence_ok, 1, MPI_INT, MPI_MIN, node_);
      heavy_fence_ = all_fence_ok != 0;
      MDSM_ASSERT(reinterpret_cast<std::uintptr_t>(mine_) % alignof(slot) == 0, "doorbell slot not cache-line aligned");
    }
  }
  if (!all_ok && win_ != MPI_WIN_NULL) {
    MPI_Win_free(&win_);
    win_ = MPI_WIN_NULL;
  }
}

doorbells::~doorbells() {
  if (win_ != MPI_WIN_NULL) MPI_Win_free(&win_);
  if (node_ != MPI_COMM_NULL) MPI_Comm_free(&node_);
}

void doorbells::sleep(std::uint64_t ns) noexcept {
  timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  nanosleep(&ts, nullptr);
}

void doorbells::wait(std::uint32_t seen, std::uint64_t ns) noexcept { os::futex_wait(mine_->bell, seen, ns); }

void doorbells::heavy_fence() noexcept { os::heavy_fence(); }

bool doorbells::wait_own(std::uint32_t seen, std::uint64_t ns) noexcept {
  if (ns == k_forever) os::futex_wait_forever(own_word(), seen);
  else os::futex_wait(own_word(), seen, ns);
  return own_word().load(std::memory_order_seq_cst) != seen;
}

void doorbells::wake_own() noexcept {
  own_word().fetch_add(1, std::memory_order_seq_cst);
  os::futex_wake(own_word());
}

void doorbells::ring_slow(slot& s, stats::counter counted) noexcept {
  s.bell.fetch_add(1, std::memory_order_seq_cst);
  os::futex_wake(s.bell);
  stats::add(counted);
}

}  // namespace mdsm::net
