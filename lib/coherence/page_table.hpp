// Per-unit coherence state.
//
// States and the application view's protection in each:
//   unallocated  PROT_NONE   this rank knows nothing is allocated here (own or collective arena)
//   no_copy      PROT_NONE   allocated (or, in another rank's arena, possibly allocated) but this
//                            rank holds no copy: the next access fetches the unit from its home
//   invalid      PROT_NONE   a copy with write notices not yet applied
//   valid        READ        an up-to-date copy; READ_WRITE while it has a twin and was written
//                            in the current interval (`dirty`), or while it is private to its
//                            home (engine::private_locked: no twin, never dirty, no notices)
//
// Locking: each entry is guarded by the page lock returned by lock_of(unit) (striped mutexes).
// A page lock is held only for bounded CPU work (twin, diff, apply, protect) and never across a
// wait for a remote event. Lock order: engine metadata lock -> page lock -> dirty-list lock;
// page lock -> growth lock (making a chunk of entries) -> notice-index lock.
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

// This rank's write notices for one unit: a range of its own intervals [first, last] whose writes
// to the unit are held by `pieces` (diffs), plus the twin while `awaiting_twin` (the next diff made
// from the twin belongs to every awaiting notice). Consecutive notices that would get the same
// pieces are one range: a unit rewritten in every interval and never requested costs one entry,
// not one per interval. A range may include intervals that did not write the unit (a notice
// holds *all* of the unit's writes in its range, which is what a requester asks for).
//
// A hot unit (page_entry::hot) is announced in every interval while it stays writable; its last
// notice is open: last == k_open stands for "through the newest interval closed", so closing an
// interval does not touch it.
struct own_notice {
  static constexpr std::uint32_t k_open = ~std::uint32_t{0};
  std::uint32_t first;
  std::uint32_t last;
  std::vector<diff_ptr> pieces;
  bool awaiting_twin;
  bool open() const { return last == k_open; }
  // `last` with an open range resolved against the newest interval closed.
  std::uint32_t last_closed(std::uint32_t newest_closed) const { return open() ? newest_closed : last; }
};

struct page_entry {
  page_state state = page_state::unallocated;
  os::prot prot = os::prot::none;  // the application view's protection of this unit
  bool dirty = false;              // written in the current (open) interval (hot units: always)
  // Hot: written in consecutive intervals, so kept read-write and announced in every interval
  // (engine::close_interval_locked explains why that is safe). Pre: twin, prot read_write, and
  // own.back() is open once an interval closed with the unit hot.
  bool hot = false;
  // Made writable ahead of a run of write faults (engine::write_ahead) and not yet seen written:
  // twin, dirty and read-write like a written unit, but a close that finds it equal to its twin
  // drops the twin and announces nothing (it was not written).
  bool speculative = false;
  bool fetching = false;           // a thread is fetching this unit's diffs or copy
  // A copy of this unit was served to another rank (sticky: that rank may hold it, or an older
  // one, from then on). Until then the home of a unit no other rank was given a copy of by its
  // allocation keeps it *private* (engine::private_locked): plain read-write memory.
  bool copied_out = false;
  std::uint32_t fetch_generation = 0;  // counts finished fetches: waiters for one watch it change
  // The background collection that dropped this copy (0: none since): its home's copy holds every
  // write up to that cut only once the collection is over (engine::validate waits for it).
  std::uint32_t dropped_in = 0;
  std::uint16_t hot_period = 0;    // closes between checks of a hot unit (doubles while it stays hot)
  std::uint32_t hot_check_at = 0;  // interval at whose close a hot unit is checked for writes
  std::uint64_t hot_hash = 0;      // hash of a sample of the contents at the last check
  unit_buffer twin;
  // This rank's write notices (until collected), in increasing interval order. The ones still
  // awaiting the twin form a suffix (a diff ends the wait of all of them at once), and each diff
  // belongs to a contiguous range of them, so lookups never scan the list.
  std::vector<own_notice> own;
  std::vector<diff_ptr> open_pieces;      // diffs of current-interval writes made before it closed
  // A lazy diff holds the writes of every interval that awaited its twin, so one piece can cover
  // intervals this rank learns of only later; applying it a second time would undo writes made
  // since (by this rank or applied from others; litmus 26, 27). Two guards, per creator:
  // applied_through[c]: every write c made to this unit in intervals up to this index is in the
  //   copy (empty: none yet). The unit is out of date iff some creator's newest known notice
  //   (notice_index::latest) is newer.
  std::vector<std::uint32_t> applied_through;
  // applied: (creator, newest diff serial applied). Pieces of one creator are made in serial
  //   order, so a piece that a fetch brings back anyway is never applied twice.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> applied;

  // Per rank that fetched this unit from us: how often, and how many more of our RELEASEs to it
  // carry the unit's diff (engine::encode_pushed_locked). Empty until first fetched.
  struct push_state {
    std::uint8_t fetches = 0;
    std::uint8_t budget = 0;
    std::uint32_t through = 0;  // our intervals whose writes to the unit it holds, as far as we know
  };
  std::vector<push_state> push;
  push_state& push_to(int rank, std::size_t ranks) {  // made on first use
    if (push.empty()) push.resize(ranks);
    return push[static_cast<std::size_t>(rank)];
  }
  std::uint32_t push_through_of(int rank) const {  // 0: nothing known
    return push.empty() ? 0 : push[static_cast<std::size_t>(rank)].through;
  }

  // The fetch of this unit is over (whatever its outcome): threads waiting for it look again.
  void end_fetch() noexcept {
    fetching = false;
    ++fetch_generation;
  }

  std::uint32_t applied_through_of(std::uint32_t creator) const {
    return creator < applied_through.size() ? applied_through[creator] : 0;
  }
  // The serial of creator's newest diff applied to the copy (0: none), to read or to raise.
  std::uint32_t applied_serial_of(std::uint32_t creator) const {
    auto it = std::find_if(applied.begin(), applied.end(), [&](const auto& e) { return e.first == creator; });
    return it == applied.end() ? 0 : it->second;
  }
  std::uint32_t& applied_serial(std::uint32_t creator) {
    auto it = std::find_if(applied.begin(), applied.end(), [&](const auto& e) { return e.first == creator; });
    if (it == applied.end()) it = applied.insert(applied.end(), {creator, 0});
    return it->second;
  }
  // Indices [begin, end) in `own` of the notices overlapping intervals (after, through].
  std::pair<std::size_t, std::size_t> own_overlapping(std::uint32_t after, std::uint32_t through,
                                                      std::uint32_t newest_closed) const {
    auto b = std::lower_bound(own.begin(), own.end(), after + 1, [&](const own_notice& n, std::uint32_t i) {
      return n.last_closed(newest_closed) < i;
    });
    auto e = b;
    while (e != own.end() && e->first <= through) ++e;
    return {static_cast<std::size_t>(b - own.begin()), static_cast<std::size_t>(e - own.begin())};
  }
};

// What an entry starts as, the first time its unit is looked at.
struct unit_start {
  page_state state;
  os::prot prot;  // the application view's protection of the unit now
};

class page_table {
 public:
  // `initial(u)` gives the state of a unit the first time it is looked at. Entries are made a
  // chunk of k_chunk units at a time, so a unit nobody looked at costs nothing.
  page_table(std::uint32_t units, unit_start (*initial)(void* ctx, std::uint32_t unit), void* ctx);
  ~page_table();

  // The entry for unit u, created on first use. Pre: u < units. Safe from any thread; the
  // caller must hold lock_of(u) to read or change the entry's fields.
  page_entry& at(std::uint32_t u);
  // The entry if it exists, else nullptr (for scans that must not create entries).
  page_entry* find(std::uint32_t u) const;
  // Splits units [first, first + count) at chunk boundaries. For each part whose chunk has no
  // entries yet, calls untouched(part_first, part_end, out) while no entry of that chunk can be
  // made (it may change what initial() will say for those units, and append to `out` units it
  // wants handled one by one); the units of the other parts are appended to `out`. Returns `out`.
  template <class F>
  std::vector<std::uint32_t> split_untouched(std::uint32_t first, std::uint32_t count, F&& untouched) {
    std::vector<std::uint32_t> out;
    const std::uint32_t end = first + count;
    for (std::uint32_t u = first; u < end;) {
      const std::uint32_t part_end = std::min(end, (u / k_chunk + 1) * k_chunk);
      bool done = false;
      if (find(u) == nullptr) {
        std::lock_guard lk(grow_mutex_);
        if (chunks_[u / k_chunk].load(std::memory_order_acquire) == nullptr) {
          untouched(u, part_end, out);
          done = true;
        }
      }
      if (!done)
        for (std::uint32_t v = u; v < part_end; ++v) out.push_back(v);
      u = part_end;
    }
    return out;
  }
  std::mutex& lock_of(std::uint32_t u) { return locks_[u % k_stripes]; }
  std::uint32_t units() const noexcept { return units_; }

  static constexpr std::uint32_t k_stripes = 1024;  // page locks (unit u uses lock u % k_stripes)
  static constexpr std::uint32_t k_chunk = 512;      // entries are made this many units at a time

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
  std::uint32_t units_;
  unit_start (*initial_)(void*, std::uint32_t);
  void* ctx_;
  std::vector<std::atomic<page_entry*>> chunks_;
  std::mutex grow_mutex_;
  std::array<std::mutex, k_stripes> locks_;
};

}  // namespace mdsm::coherence
