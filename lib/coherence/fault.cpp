// Page access: write detection with twins, lazy diffs, and the fetch that makes an invalid
// unit valid again. Everything here may run inside the SIGSEGV handler of the faulting thread:
// the fault is synchronous (the thread's own access), the faulting code holds none of our locks
// (library code never touches the application view), so taking locks and waiting is safe.
#include "coherence/engine.hpp"

#include "coherence/protocol.hpp"
#include "stats/counters.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>

namespace mdsm::coherence {

struct engine::fetch_result {
  bool allocated = true;
  std::span<const std::byte> copy;  // the home's copy of the unit, pointing into `replies`
  struct piece {
    std::uint32_t creator;
    std::vector<std::uint32_t> intervals;
    std::uint32_t serial;
    std::span<const std::byte> bytes;  // points into `replies`
  };
  std::vector<piece> pieces;
  std::vector<box_ptr> replies;
};

page_state engine::initial_state(void* ctx, std::uint32_t u) {
  const auto* self = static_cast<const engine*>(ctx);
  const int owner = self->region_.arena_owner(u);
  return owner >= 0 && owner != self->rank_ ? page_state::no_copy : page_state::unallocated;
}

void engine::protect_units(std::uint32_t first, std::uint32_t count, os::prot p) {
  os::protect(region_.app_unit(first), std::size_t{count} * region_.unit(), p);
  stats::add(stats::counter::protect_calls);
  stats::add(stats::counter::protect_units, count);
}

protection_batch engine::protections() {
  return protection_batch(
      pages_,
      [](void* self, std::uint32_t first, std::uint32_t count, os::prot p) {
        static_cast<engine*>(self)->protect_units(first, count, p);
      },
      [](void* self, std::uint32_t first, std::uint32_t count) {
        const auto* e = static_cast<engine*>(self);
        os::discard(e->region_.lib_unit(first), std::size_t{count} * e->region_.unit());
      },
      this);
}

void engine::set_prot_locked(std::uint32_t u, page_entry& pe, os::prot p) {
  if (pe.prot == p) return;
  protect_units(u, 1, p);
  pe.prot = p;
}

void engine::make_writable_locked(std::uint32_t u, page_entry& pe) {
  // Written in the interval closed last and again now, with no diff served in between (the twin
  // still awaits): likely written in every interval, so keep it writable across the next closes.
  if (pe.twin && hot_intervals_ != 0 && !pe.own.empty() && pe.own.back().awaiting_twin &&
      pe.own.back().interval == last_closed_.load(std::memory_order_relaxed))
    pe.keep_writable = hot_intervals_;
  if (!pe.twin) {
    pe.twin = make_unit_buffer(region_.unit());
    copy_unit(pe.twin.get(), region_.lib_unit(u), region_.unit());
    stats::add(stats::counter::twins_created);
    add_metadata(static_cast<std::int64_t>(region_.unit()));
  }
  if (!pe.dirty) {
    pe.dirty = true;
    std::lock_guard lk(dirty_mutex_);
    dirty_.push_back(u);
    any_dirty_.store(true, std::memory_order_release);
  }
  set_prot_locked(u, pe, os::prot::read_write);
}

void engine::make_diff_locked(std::uint32_t u, page_entry& pe) {
  MDSM_ASSERT(pe.twin != nullptr, "diff without a twin");
  // Stop concurrent writes first: a write racing with this either lands before the protection
  // changes (and is in the diff) or faults and waits for our page lock (and is in the next one).
  if (pe.prot == os::prot::read_write) set_prot_locked(u, pe, os::prot::read);
  pe.keep_writable = 0;  // the next write must fault again to be seen
  auto bytes = make_diff(region_.lib_unit(u), pe.twin.get(), region_.unit());
  pe.twin.reset();
  add_metadata(-static_cast<std::int64_t>(region_.unit()));
  diff_ptr d;
  if (!bytes.empty()) {
    auto made = std::make_shared<diff>();
    made->bytes = std::move(bytes);
    made->serial = next_diff_serial_.fetch_add(1, std::memory_order_relaxed);
    stats::add(stats::counter::diffs_created);
    stats::add(stats::counter::diff_bytes_created, made->bytes.size());
    add_metadata(static_cast<std::int64_t>(made->footprint()));
    d = std::move(made);
  }
  bool attached = false;
  for (auto n = pe.own.rbegin(); n != pe.own.rend() && n->awaiting_twin; ++n) {  // the awaiting suffix
    if (d) n->pieces.push_back(d);
    n->awaiting_twin = false;
    attached = true;
  }
  if (attached) {
    // The diff also holds this interval's writes so far; every rank that will learn of this
    // interval knows the earlier one too and fetches this diff, so no notice is needed for them.
    pe.dirty = false;
  } else {
    MDSM_ASSERT(pe.dirty, "a twin exists only for written units");
    if (d) pe.open_pieces.push_back(std::move(d));
  }
}

engine::fetch_result engine::fetch(std::uint32_t u, const std::vector<record_ptr>& notices, bool need_copy) {
  std::map<std::uint32_t, std::vector<std::uint32_t>> by_creator;
  for (const auto& r : notices) by_creator[r->creator].push_back(r->index);
  const int home = region_.home_of(u);
  if (need_copy) by_creator[static_cast<std::uint32_t>(home)];
  std::vector<box_ptr> boxes;
  for (auto& [creator, intervals] : by_creator) {
    MDSM_ASSERT(static_cast<int>(creator) != rank_, "fetching from oneself");
    auto box = std::make_shared<reply_box>();
    const std::uint32_t token = register_box(box);
    net::byte_writer out;
    out.put(u);
    out.put(static_cast<std::uint32_t>(intervals.size()));
    out.put_array<std::uint32_t>(intervals);
    const bool copy = need_copy && static_cast<int>(creator) == home;
    stats::add(copy ? stats::counter::page_requests : stats::counter::diff_requests);
    send_protocol(static_cast<int>(creator), copy ? op_copy_request : op_diff_request, token, out.bytes());
    boxes.push_back(std::move(box));
  }
  // All writers are asked at once; wait for every reply.
  progress_.wait_until([&] {
    return std::all_of(boxes.begin(), boxes.end(), [](const box_ptr& b) { return b->ready.load(std::memory_order_acquire); });
  });
  fetch_result res;
  for (auto& box : boxes) {
    net::byte_reader in(box->data);
    if (in.get<std::uint32_t>() != u) net::byte_reader::malformed("reply for another unit");
    const std::uint32_t creator = static_cast<std::uint32_t>(box->source);
    if (need_copy && box->source == home) {
      if (in.get<std::uint8_t>() == 0) {
        res.allocated = false;
        continue;
      }
      res.copy = in.get_bytes(region_.unit());
    }
    const auto count = in.get<std::uint32_t>();
    for (std::uint32_t i = 0; i < count; ++i) {
      fetch_result::piece p;
      p.creator = creator;
      in.get_array(in.get<std::uint32_t>(), p.intervals);
      p.serial = in.get<std::uint32_t>();
      p.bytes = in.get_bytes(in.get<std::uint32_t>());
      res.pieces.push_back(std::move(p));
    }
    in.expect_done();
    res.replies.push_back(box);
  }
  return res;
}

bool engine::validate(std::uint32_t u, access how) {
  std::chrono::steady_clock::time_point give_up{};  // set on the first "not allocated" from a home
  for (;;) {
    std::unique_lock lk(pages_.lock_of(u));
    page_entry& pe = pages_.at(u);
    if (pe.state == page_state::unallocated) return false;
    if (pe.state == page_state::valid) {
      // A fault on a readable valid unit can only be a write.
      const bool write = how == access::write || (how == access::unknown && pe.prot == os::prot::read);
      if (write && pe.prot != os::prot::read_write) make_writable_locked(u, pe);
      return true;
    }
    if (pe.fetching) {  // another thread is fetching this unit: wait for it, then look again
      const std::uint32_t generation = pe.fetch_generation;
      lk.unlock();
      progress_.wait_until([&] {
        std::lock_guard g(pages_.lock_of(u));
        return pages_.at(u).fetch_generation != generation;
      });
      continue;
    }
    pe.fetching = true;
    // Save this rank's own modifications before others' are applied on top of them.
    if (pe.twin) make_diff_locked(u, pe);
    const std::vector<record_ptr> snapshot = pe.pending;
    const bool need_copy = pe.state == page_state::no_copy;
    lk.unlock();

    fetch_result res;
    try {
      res = fetch(u, snapshot, need_copy);
    } catch (...) {
      lk.lock();
      pe.fetching = false;
      ++pe.fetch_generation;
      throw;
    }

    lk.lock();
    pe.fetching = false;
    ++pe.fetch_generation;
    if (!res.allocated) {
      // Stays no_copy. In another rank's arena that is the answer: nothing is allocated there.
      // A collective unit this rank has allocated is allocated on its home too, or will be at
      // once: the home may not have finished the same alloc_collective yet (our copy was dropped
      // by a garbage collection, the range freed and allocated again). Ask again shortly.
      const auto now = std::chrono::steady_clock::now();
      if (give_up == std::chrono::steady_clock::time_point{}) give_up = now + std::chrono::seconds(30);
      if (region_.arena_owner(u) >= 0 || pe.state == page_state::unallocated || now > give_up) return false;
      lk.unlock();
      const auto retry_at = now + std::chrono::microseconds(50);
      progress_.wait_until([&] { return std::chrono::steady_clock::now() >= retry_at; });
      continue;
    }
    std::byte* page = region_.lib_unit(u);
    if (need_copy) copy_unit(page, res.copy.data(), region_.unit());
    // Apply in an order consistent with happened-before: each piece at the smallest vector-time
    // sum of the snapshot's notices it holds, then by creator and serial. (Sorted lookups: a
    // rank that was away for many intervals can get many notices and pieces at once.)
    struct notice_key {
      std::uint32_t creator, index;
      std::uint64_t sum;
    };
    std::vector<notice_key> keys;
    keys.reserve(snapshot.size());
    for (const auto& r : snapshot) keys.push_back(notice_key{r->creator, r->index, r->vt.sum()});
    auto key_less = [](const notice_key& a, const notice_key& b) {
      return a.creator != b.creator ? a.creator < b.creator : a.index < b.index;
    };
    std::sort(keys.begin(), keys.end(), key_less);
    struct step {
      std::uint64_t sum;
      std::uint32_t creator;
      std::uint32_t serial;
      std::size_t piece;
    };
    std::vector<step> order;
    for (std::size_t p = 0; p < res.pieces.size(); ++p) {
      const auto& piece = res.pieces[p];
      std::uint64_t sum = ~std::uint64_t{0};
      for (std::uint32_t i : piece.intervals) {
        auto it = std::lower_bound(keys.begin(), keys.end(), notice_key{piece.creator, i, 0}, key_less);
        if (it != keys.end() && it->creator == piece.creator && it->index == i) sum = std::min(sum, it->sum);
      }
      if (sum != ~std::uint64_t{0}) order.push_back(step{sum, piece.creator, piece.serial, p});
    }
    std::sort(order.begin(), order.end(), [](const step& a, const step& b) {
      if (a.sum != b.sum) return a.sum < b.sum;
      return a.creator != b.creator ? a.creator < b.creator : a.serial < b.serial;
    });
    if (pe.applied_through.empty()) pe.applied_through.assign(static_cast<std::size_t>(size_), 0);
    for (const step& s : order) {
      const auto& piece = res.pieces[s.piece];
      // ... and an earlier fetch (for an earlier interval it also covers) may have applied it.
      auto seen = std::find_if(pe.applied.begin(), pe.applied.end(), [&](const auto& e) { return e.first == s.creator; });
      if (seen == pe.applied.end()) seen = pe.applied.insert(pe.applied.end(), {s.creator, 0});
      if (s.serial <= seen->second) continue;
      seen->second = s.serial;
      apply_diff(page, region_.unit(), piece.bytes);
      stats::add(stats::counter::diffs_applied);
      stats::add(stats::counter::diff_bytes_applied, piece.bytes.size());
      // The creator's pieces form contiguous groups of its intervals, and every earlier group was
      // applied before or in this fetch (known intervals are downward closed), so everything up
      // to the newest interval this piece covers is now in the copy.
      auto& through = pe.applied_through[piece.creator];
      through = std::max(through, *std::max_element(piece.intervals.begin(), piece.intervals.end()));
    }
    // Notices that arrived during the fetch stay pending; the loop fetches them next. Those that
    // arrived meanwhile but are covered by an applied piece are done as well.
    const std::size_t before = pe.pending.size();
    std::erase_if(pe.pending, [&](const record_ptr& r) {
      return r->index <= pe.applied_through[r->creator] ||
             std::binary_search(keys.begin(), keys.end(), notice_key{r->creator, r->index, 0}, key_less);
    });
    add_metadata(-static_cast<std::int64_t>((before - pe.pending.size()) * sizeof(record_ptr)));
    if (!pe.pending.empty()) {
      pe.state = page_state::invalid;
      continue;
    }
    pe.state = page_state::valid;
    // A write fault (x86 tells; `++*p` is one) twins the copy just made and opens it read-write
    // at once: one mprotect instead of read-only now and a second fault to open it.
    if (how == access::write) make_writable_locked(u, pe);
    else set_prot_locked(u, pe, os::prot::read);
    return true;
  }
}

bool engine::on_fault(const os::fault_info& f) {
  if (!region_.contains(f.addr)) return false;
  char text[512];
  if (const char* h = net::current_handler()) {
    std::snprintf(text, sizeof text,
                  "mdsm: message handler '%s' touched coherent memory at %p; handlers must not access the coherent "
                  "region (store the message and read the data from the application thread)",
                  h, f.addr);
    detail::die(text);
  }
  stats::activity_scope timed(stats::activity::fault, stats::counter::fault_ns);
  const std::uint32_t u = region_.unit_of(f.addr);
  const access how = !f.write_known ? access::unknown : f.is_write ? access::write : access::read;
  stats::add(how == access::write ? stats::counter::write_faults : stats::counter::read_faults);
  bool ok = false;
  try {
    ok = validate(u, how);
  } catch (const error& e) {
    std::snprintf(text, sizeof text, "mdsm: rank %d could not resolve a fault at %p: %s", rank_, f.addr, e.what());
    detail::die(text);
  }
  if (ok) return true;
  const int owner = region_.arena_owner(u);
  char where[64];
  if (owner < 0) std::snprintf(where, sizeof where, "the collective arena");
  else std::snprintf(where, sizeof where, "rank %d's arena", owner);
  std::snprintf(text, sizeof text,
                "mdsm: rank %d accessed unallocated coherent memory at %p (unit %u, in %s): nothing is allocated "
                "there now (never allocated, or freed); the access is reported as a segmentation fault\n",
                rank_, f.addr, u, where);
  std::fputs(text, stderr);
  return false;  // chained: the process gets the SIGSEGV it would get without mdsm
}

void engine::units_allocated(std::uint32_t first, std::uint32_t count) {
  // New units become readable, at one mprotect for the whole range plus one per run of units
  // that must stay inaccessible. The range is opened *before* any state leaves `unallocated`:
  // once a unit is `valid`, a write notice (from a rank that returned from the same collective
  // allocation earlier and already wrote and released) may invalidate it at any moment, and a
  // protection change made after our page lock is released would undo that invalidation and let
  // the application read a stale copy. While a unit is `unallocated` nothing else changes its
  // protection, and no application thread can touch it yet (its address has not been returned).
  protect_units(first, count, os::prot::read);
  protection_batch batch = protections();
  for (std::uint32_t u = first; u < first + count; ++u) {
    batch.visit(u, [&](page_entry& pe) -> unit_protection {
      if (pe.state == page_state::unallocated) {
        pe.state = pe.pending.empty() ? page_state::valid : page_state::invalid;
        pe.prot = os::prot::read;  // what the application view has now
        return {pe.state == page_state::invalid ? os::prot::none : os::prot::read};
      }
      const os::prot keep = pe.prot;  // not ours to change: restore it
      pe.prot = os::prot::read;
      return {keep};
    });
  }
}

void engine::units_freed(std::uint32_t first, std::uint32_t count) {
  protection_batch batch = protections();
  for (std::uint32_t u = first; u < first + count; ++u) {
    batch.visit(u, [&](page_entry& pe) -> unit_protection {
      // Notices, twin and diffs stay: other ranks may still ask for this rank's writes.
      if (pe.state != page_state::unallocated && pe.state != page_state::no_copy) pe.state = page_state::unallocated;
      return {os::prot::none};
    });
  }
}

}  // namespace mdsm::coherence
