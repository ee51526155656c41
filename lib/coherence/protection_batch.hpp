// Protection changes of many units at once, with as few mprotect calls as possible.
//
// On our VMs one mprotect costs about as much whether it covers one page or a hundred (~2 us),
// so an interval close that write-protects 64 written pages, or an acquire that invalidates them,
// should make one call, not 64. A protection_batch visits units in increasing order, each under
// its page lock; contiguous units that need the same protection form a run, and the run gets one
// mprotect while every one of its page locks is still held. (A protection must never change
// outside its unit's lock: an invalidation could be undone by a late mprotect, litmus 28.)
//
// Lock order: page locks are taken in increasing unit order within a run, and a run never wraps
// around the stripe table (page_table::k_stripes), so the locks of a run are taken in increasing
// stripe order; all of them are released before a lock of an earlier stripe is taken. Several
// batches (or a batch and single-lock code) therefore cannot deadlock. The callback runs under
// the unit's page lock and may take only locks that come after it (the dirty-list lock).
//
// Thread: any; one batch is used by one thread.
#pragma once

#include "coherence/page_table.hpp"

#include <cstdint>
#include <mutex>
#include <vector>

namespace mdsm::coherence {

// What a visited unit needs.
struct unit_protection {
  os::prot prot;         // the protection the unit must have from now on
  bool discard = false;  // also free the library view's memory of the unit (it holds no copy now)
};

class protection_batch {
 public:
  // `protect(first, count, p)` makes one mprotect of the application view; `discard(first,
  // count)` frees the library view's memory of those units. Both are called with the units'
  // page locks held.
  using protect_fn = void (*)(void* ctx, std::uint32_t first, std::uint32_t count, os::prot p);
  using discard_fn = void (*)(void* ctx, std::uint32_t first, std::uint32_t count);
  protection_batch(page_table& pages, protect_fn protect, discard_fn discard, void* ctx)
      : pages_(pages), protect_(protect), discard_(discard), ctx_(ctx) {}
  ~protection_batch() { flush(); }
  protection_batch(const protection_batch&) = delete;
  protection_batch& operator=(const protection_batch&) = delete;

  // Visits unit u under its page lock: f(page_entry&) makes the unit's state change and returns
  // the unit_protection it needs. Pre: u is greater than every unit visited before.
  // The entry's `prot` is set when its run is flushed; f leaves it alone, except to correct it to
  // what the application view has now if something else (units_allocated) changed that.
  template <class F>
  void visit(std::uint32_t u, F&& f) {
    if (!held_.empty() && (u != end_ || u % page_table::k_stripes == 0)) flush();
    std::unique_lock lk(pages_.lock_of(u));
    page_entry& pe = pages_.at(u);
    const unit_protection want = f(pe);
    if (!held_.empty() && (want.prot != want_.prot || want.discard != want_.discard)) flush();
    if (held_.empty()) {
      first_ = u;
      want_ = want;
      changed_ = false;
    }
    end_ = u + 1;
    changed_ = changed_ || pe.prot != want.prot;
    held_.push_back(held{std::move(lk), &pe});
  }

  // Applies the current run and releases its locks.
  void flush() {
    if (held_.empty()) return;
    if (changed_) {
      protect_(ctx_, first_, end_ - first_, want_.prot);
      for (held& h : held_) h.pe->prot = want_.prot;
    }
    if (want_.discard) discard_(ctx_, first_, end_ - first_);
    held_.clear();
  }

 private:
  struct held {
    std::unique_lock<std::mutex> lock;
    page_entry* pe;
  };
  page_table& pages_;
  protect_fn protect_;
  discard_fn discard_;
  void* ctx_;
  std::vector<held> held_;  // the current run [first_, end_), locked
  std::uint32_t first_ = 0, end_ = 0;
  unit_protection want_{os::prot::none};
  bool changed_ = false;  // some unit of the run does not have want_.prot yet
};

}  // namespace mdsm::coherence
