// Per-unit coherence state.
//
// States and the application view's protection in each:
//   unallocated  PROT_NONE   this rank knows nothing is allocated here (own or collective arena)
//   no_copy      PROT_NONE   allocated (or, in another rank's arena, possibly allocated) but this
//                            rank holds no copy: the next access fetches the unit from its home
//   invalid      PROT_NONE   a copy with write notices not yet applied
//   valid        READ        an up-to-date copy; READ_WRITE while it has a twin and was written
//                            in the current interval (`dirty`)
//
// Locking: each entry is guarded by the page lock returned by lock_of(unit) (striped mutexes).
// A page lock is held only for bounded CPU work (twin, diff, apply, protect) and never across a
// wait for a remote event. Lock order: engine metadata lock -> page lock -> dirty-list lock.
#pragma once

#include "coherence/diff.hpp"
#include "coherence/interval.hpp"
#include "os/vm.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

namespace mdsm::coherence {

enum class page_state : std::uint8_t { unallocated, no_copy, invalid, valid };

// A write notice of this rank's own interval for one unit, with the diff pieces that hold its
// modifications. While `awaiting_twin` is set, some of them are still only in the twin: the
// next diff made from the twin belongs to this notice (and to every other awaiting one).
struct own_notice {
  std::uint32_t interval;
  std::vector<diff_ptr> pieces;
  bool awaiting_twin;
};

struct page_entry {
  page_state state = page_state::unallocated;
  os::prot prot = os::prot::none;  // the application view's protection of this unit
  bool dirty = false;              // written in the current (open) interval (or kept writable)
  // Interval closes left during which this unit stays read-write instead of being
  // write-protected: a unit written in consecutive intervals is assumed written in the next ones
  // too (engine::close_interval_locked explains why that is safe).
  std::uint8_t keep_writable = 0;
  bool fetching = false;           // a thread is fetching this unit's diffs or copy
  std::uint32_t fetch_generation = 0;
  unit_buffer twin;
  std::vector<record_ptr> pending;        // other ranks' write notices not yet applied
  // This rank's write notices (until collected), in increasing interval order. The ones still
  // awaiting the twin form a suffix (a diff ends the wait of all of them at once), and each diff
  // belongs to a contiguous range of them, so lookups never scan the list: it grows with every
  // interval that wrote the unit until the next garbage collection.
  std::vector<own_notice> own;
  std::vector<diff_ptr> open_pieces;      // diffs of current-interval writes made before it closed
  // A lazy diff holds the writes of every interval that awaited its twin, so one piece can cover
  // intervals this rank learns of only later; applying it a second time would undo writes made
  // since (by this rank or applied from others; litmus 26, 27). Two guards, per creator:
  // applied_through[c]: every write c made to this unit in intervals up to this index is in the
  //   copy (empty: none yet); notices it covers do not invalidate the unit, saving the fetch.
  std::vector<std::uint32_t> applied_through;
  // applied: (creator, newest diff serial applied). Pieces of one creator are made in serial
  //   order, so a piece that a fetch brings back anyway is never applied twice.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> applied;

  // Index in `own` of the notice of `interval`, or own.size() if this rank did not write the
  // unit in that interval (or it was collected).
  std::size_t own_index(std::uint32_t interval) const {
    auto it = std::lower_bound(own.begin(), own.end(), interval,
                               [](const own_notice& n, std::uint32_t i) { return n.interval < i; });
    return it != own.end() && it->interval == interval ? static_cast<std::size_t>(it - own.begin()) : own.size();
  }
};

class page_table {
 public:
  // `initial(u)` gives the state of a unit the first time it is looked at.
  page_table(std::uint32_t units, page_state (*initial)(void* ctx, std::uint32_t unit), void* ctx);
  ~page_table();

  // The entry for unit u, created on first use. Pre: u < units. Safe from any thread; the
  // caller must hold lock_of(u) to read or change the entry's fields.
  page_entry& at(std::uint32_t u);
  // The entry if it exists, else nullptr (for scans that must not create entries).
  page_entry* find(std::uint32_t u) const;
  std::mutex& lock_of(std::uint32_t u) { return locks_[u % k_stripes]; }
  std::uint32_t units() const noexcept { return units_; }

  static constexpr std::uint32_t k_stripes = 1024;  // page locks (unit u uses lock u % k_stripes)

  // Calls f(unit, entry) for every created entry, holding its page lock.
  template <class F>
  void for_each(F&& f) {
    for (std::uint32_t c = 0; c < chunks_.size(); ++c) {
      page_entry* chunk = chunks_[c].load(std::memory_order_acquire);
      if (chunk == nullptr) continue;
      for (std::uint32_t i = 0; i < k_chunk && c * k_chunk + i < units_; ++i) {
        std::uint32_t u = c * k_chunk + i;
        std::lock_guard lk(lock_of(u));
        f(u, chunk[i]);
      }
    }
  }

 private:
  static constexpr std::uint32_t k_chunk = 512;
  std::uint32_t units_;
  page_state (*initial_)(void*, std::uint32_t);
  void* ctx_;
  std::vector<std::atomic<page_entry*>> chunks_;
  std::mutex grow_mutex_;
  std::array<std::mutex, k_stripes> locks_;
};

}  // namespace mdsm::coherence
