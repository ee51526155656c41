// Doorbells between the ranks of one host: a futex word per rank, in memory all ranks of the host
// map (MPI_Win_allocate_shared).
//
// Why: a rank whose application computes has its progress thread napping (up to sleep_max,
// 200 us, doubling from 2 us: every wake-up takes the application's core for a context switch,
// so it must not wake often for nothing). A request that arrives meanwhile (a diff, a page, a
// lock) waits for the end of the nap: fetches measured 30-40 us inside the applications against
// 6.5-12 us in isolation. With a doorbell the napping thread sleeps on its word, and a rank that
// sends it something that expects a reply rings it: the request is served at once, and the
// thread still wakes for nothing no more often than before.
//
// The bell is rung only while the target's progress thread naps (its `asleep` flag; when an
// application thread of the target waits, it polls by itself and nobody needs a bell), so a
// ring costs the sender one load, plus one futex call only when the target sleeps. Ordering:
// the target sets `asleep`, then polls once more before sleeping; the sender sends, then reads
// `asleep` (both with full fences), so either the sender rings or the target's last poll sees
// the frame.
//
// Deep naps. A rank whose application computes for long has nothing to serve; its progress
// thread's timed wake-ups (every 2 ms) then only take the application's core: ~1,000 context
// switches a second for two ranks, SOR's 250 steps took ~9,400 against MPI's ~700. So after a
// calm nap of the longest kind, the thread naps deep (net/progress.cpp: 20 ms) and says so in
// `deep`: then *every* frame sent to it knocks (transport: after each send but credit frames),
// not only requests, and a one-way frame (a RELEASE to a handler, a forwarded lock request) is
// taken in at once rather than at the end of the nap. In short naps only requests ring, as
// before: a contended lock's follow-up frames come within microseconds, and a futex wake-up each
// would cost more than the short nap does. A knock is on every send, so it must cost next to
// nothing: `deep` has a cache line of its own, written only on entering and leaving deep naps
// (`asleep` and `bell` change with every nap and every wake-up, and each change would make the
// next send's load miss), and it is read without a fence where the host offers asymmetric ones (the
// target's entry into a deep nap pays for both sides: os::heavy_fence). The knocker clears
// `deep` (compare-and-swap), so a deep nap is knocked on once however many frames reach it.
//
// Quiet frames do not knock (doorbells::quiet_scope): frames their receiver polls for by itself
// before they can matter -- a barrier's arrival at a manager that takes part in it (the barrier
// cannot complete before the manager arrives, and arriving it polls), the departures to members
// waiting in it. Knocked, such a frame only woke the receiver's progress thread on the core its
// application computes on: ~2 wake-ups per barrier and rank, APSP's 1,536 barriers at 2 ranks.
//
// Ranks on other hosts have no bell: they are served within the nap, as before. If the MPI
// library cannot make a shared window, nobody has one.
#pragma once

#include "stats/counters.hpp"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace mdsm::net {

class doorbells {
 public:
  // Collective over `comm`.
  explicit doorbells(MPI_Comm comm);
  ~doorbells();
  doorbells(const doorbells&) = delete;
  doorbells& operator=(const doorbells&) = delete;

  // Rings `rank`'s bell if it is on this host and its progress thread naps. Any thread, after
  // sending `rank` a frame that expects a reply.
  void ring(int rank) noexcept {
    slot* s = slots_[static_cast<std::size_t>(rank)];
    if (s == nullptr) return;
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (s->asleep.load(std::memory_order_seq_cst) == 0) return;
    ring_slow(*s);
  }
  // Rings `rank`'s bell if it is on this host and its progress thread naps deep. Any thread,
  // after sending `rank` any frame (the transport does it).
  void knock(int rank) noexcept {
    slot* s = slots_[static_cast<std::size_t>(rank)];
    if (s == nullptr || t_quiet != 0) return;
    if (heavy_fence_) std::atomic_signal_fence(std::memory_order_seq_cst);  // the frame's stores stay before the load
    else std::atomic_thread_fence(std::memory_order_seq_cst);
    if (s->deep.load(std::memory_order_relaxed) == 0) return;
    knock_slow(*s);
  }

  // While one lives, the frames this thread sends do not knock (the header's "Quiet frames").
  class quiet_scope {
   public:
    quiet_scope() noexcept { ++t_quiet; }
    ~quiet_scope() { --t_quiet; }
    quiet_scope(const quiet_scope&) = delete;
    quiet_scope& operator=(const quiet_scope&) = delete;
  };

  // The progress thread's nap: `poll()` (which delivers frames; true if it did) is tried once
  // after this rank is marked asleep (deep: any frame knocks), then the thread sleeps up to `ns`
  // or until rung. Returns true if the poll delivered or the thread was rung or woken: the nap
  // did not end for want of anything to do.
  template <class Poll>
  bool nap(std::uint64_t ns, bool deep, Poll&& poll) {
    if (mine_ == nullptr) {
      sleep(ns);
      return false;
    }
    const std::uint32_t seen = mine_->bell.load(std::memory_order_acquire);
    mine_->asleep.store(1, std::memory_order_seq_cst);
    if (deep) mine_->deep.store(1, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    // A knock has no fence of its own with heavy fences (knock()): after this barrier every
    // sender's frame is visible to the poll below, or its later load sees the deep nap.
    if (deep && heavy_fence_) heavy_fence();
    bool active = poll();
    if (!active) {
      wait(seen, ns);
      active = mine_->bell.load(std::memory_order_acquire) != seen;
    }
    mine_->asleep.store(0, std::memory_order_relaxed);
    if (deep && mine_->deep.load(std::memory_order_relaxed) != 0) mine_->deep.store(0, std::memory_order_relaxed);
    return active;
  }

  // Rings `rank`'s bell even if its progress thread does not nap but is parked (it sleeps on its
  // own bell word then, net/progress.cpp), for a request that has waited long for its answer: a
  // rank that left a wait and computes has its thread parked for up to park_max, with the
  // request undelivered (apsp: 0.3-0.5 ms, one request in six). Not for every request: waking a
  // parked thread whose application is about to poll by itself costs both ranks (a contended
  // lock's hand-offs were 10x slower when every request reached parked threads).
  void nudge(int rank) noexcept {
    slot* s = slots_[static_cast<std::size_t>(rank)];
    if (s != nullptr) ring_slow(*s);
  }
  // nudge(rank), unless this rank nudged it within the last `interval` ticks: several requests
  // waiting on one rank (fibers' fetches) need one wake-up of its progress thread, which serves
  // them all; a nudge each woke it again and again and took its application's core (a reader with
  // 8 fibers fetched at 1.5x its one-fiber rate with a nudge per fetch, 2x with one per interval).
  // Returns true if it nudged.
  bool nudge_unless_recent(int rank, std::uint64_t now, std::uint64_t interval) noexcept {
    slot* s = slots_[static_cast<std::size_t>(rank)];
    if (s == nullptr) return false;
    std::atomic<std::uint64_t>& last = last_nudge_[static_cast<std::size_t>(rank)];
    std::uint64_t seen = last.load(std::memory_order_relaxed);
    if (now - seen < interval || !last.compare_exchange_strong(seen, now, std::memory_order_relaxed)) return false;
    ring_slow(*s);
    return true;
  }

  // The parked progress thread sleeps on this rank's own bell word (on a private word when there
  // is no bell), so one futex serves rings, nudges, its own wake-ups and its naps.
  std::uint32_t own_count() const noexcept { return own_word().load(std::memory_order_seq_cst); }
  // Sleeps while the own word still equals `seen`, at most `ns` (k_forever: no limit). Returns
  // true if the word changed (rung or woken), false on a timeout (or a spurious return).
  static constexpr std::uint64_t k_forever = ~std::uint64_t{0};
  bool wait_own(std::uint32_t seen, std::uint64_t ns) noexcept;
  void wake_own() noexcept;

  bool available() const noexcept { return mine_ != nullptr; }
  // `rank` is on this host (it has a bell here; so does this rank).
  bool on_host(int rank) const noexcept { return slots_[static_cast<std::size_t>(rank)] != nullptr; }
  // Every rank of the communicator is on this host and has a bell: a request from any of them
  // wakes this rank's napping progress thread at once.
  bool cover_every_rank() const noexcept {
    return mine_ != nullptr && std::all_of(slots_.begin(), slots_.end(), [](const slot* s) { return s != nullptr; });
  }

 private:
  struct alignas(64) slot {
    std::atomic<std::uint32_t> bell{0};    // the futex word: incremented by each ring
    std::atomic<std::uint32_t> asleep{0};  // the owner's progress thread naps on `bell`
    alignas(64) std::atomic<std::uint32_t> deep{0};  // ... deeply: every frame knocks (read by every send)
  };
  // Clears a deep nap's flag and rings, unless another knock (or the wake-up) cleared it first:
  // then the target is awake or being woken. Clears `asleep` too, so that a request's ring()
  // right after this knock does not wake it a second time.
  void knock_slow(slot& s) noexcept {
    std::uint32_t v = 1;
    if (!s.deep.compare_exchange_strong(v, 0, std::memory_order_seq_cst)) return;
    s.asleep.store(0, std::memory_order_seq_cst);
    ring_slow(s, stats::counter::knocks);
  }
  static void heavy_fence() noexcept;
  std::atomic<std::uint32_t>& own_word() const noexcept { return mine_ != nullptr ? mine_->bell : private_bell_; }
  static void sleep(std::uint64_t ns) noexcept;
  void wait(std::uint32_t seen, std::uint64_t ns) noexcept;
  // Wakes the slot's thread; `counted` says why (a ring, a nudge: doorbells_rung; a knock).
  static void ring_slow(slot& s, stats::counter counted = stats::counter::doorbells_rung) noexcept;

  MPI_Comm node_ = MPI_COMM_NULL;
  MPI_Win win_ = MPI_WIN_NULL;
  std::vector<slot*> slots_;  // by rank of `comm`; nullptr: not on this host
  std::unique_ptr<std::atomic<std::uint64_t>[]> last_nudge_;  // by rank: when this rank last nudged it (ticks)
  slot* mine_ = nullptr;
  static inline thread_local unsigned t_quiet = 0;  // quiet_scopes alive on this thread
  bool heavy_fence_ = false;  // every rank of the host registered for os::heavy_fence
  mutable std::atomic<std::uint32_t> private_bell_{0};  // own_word() without a bell
};

}  // namespace mdsm::net
