// Intervals, vector time and acquires: what RELEASE, RELEASE_NT and REQUEST carry, and what
// accepting one does.
#include "coherence/engine.hpp"

#include "coherence/protocol.hpp"
#include "common/deferred.hpp"
#include "common/wait_subject.hpp"
#include "net/context.hpp"
#include "stats/counters.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <map>

namespace mdsm::coherence {

namespace {
engine* g_engine = nullptr;  // the fault handler's way back to the engine
}

engine::engine(net::transport& t, net::progress& p, const region_config& cfg)
    : transport_(t),
      progress_(p),
      rank_(t.rank()),
      size_(t.size()),
      region_(t.collective_comm(), cfg),
      pages_(region_.units(), &engine::initial_state, this),
      vt_(static_cast<std::size_t>(size_)),
      store_(static_cast<std::size_t>(size_)),
      known_(static_cast<std::size_t>(size_), vector_time(static_cast<std::size_t>(size_))),
      notices_(static_cast<std::size_t>(size_), region_.units()),
      hot_intervals_(static_cast<std::uint8_t>(cfg.hot_intervals)),
      push_diffs_(cfg.push_diffs),
      prefetch_(cfg.prefetch),
      background_gc_(cfg.background_gc),
      push_sets_(static_cast<std::size_t>(size_)),
      walks_(static_cast<std::size_t>(size_)) {
  hot_.bits.assign((std::size_t{region_.units()} + 63) / 64, 0);
  t.set_handler(net::channel::coherence, &engine::on_frame, this);
  g_engine = this;
  os::install_fault_handler(&engine::fault_trampoline);
}

engine::~engine() {
  os::remove_fault_handler();
  g_engine = nullptr;
  transport_.set_handler(net::channel::coherence, nullptr, nullptr);
  add_metadata(-metadata_bytes_.load());
}

bool engine::fault_trampoline(const os::fault_info& f) { return g_engine != nullptr && g_engine->on_fault(f); }

void engine::add_metadata(std::int64_t delta) {
  const std::int64_t now = metadata_bytes_.fetch_add(delta, std::memory_order_relaxed) + delta;
  stats::gauge_add(stats::counter::metadata_bytes, delta);
  // Past the background trigger a collection is asked for (maybe_want_gc, from a path that holds
  // no lock); a program that reaches a barrier before that collects there (gc.cpp).
  const std::uint64_t trigger = bg_trigger_.load(std::memory_order_relaxed);
  if (delta > 0 && trigger != 0 && static_cast<std::uint64_t>(now) > trigger) bg_want_.store(true, std::memory_order_relaxed);
}

std::size_t engine::metadata_bytes() const noexcept {
  return static_cast<std::size_t>(std::max<std::int64_t>(0, metadata_bytes_.load(std::memory_order_relaxed)));
}

vector_time engine::current_vt() {
  std::lock_guard lk(meta_);
  return vt_;
}

vector_time engine::known_vt(int peer) {
  std::lock_guard lk(meta_);
  return known_[static_cast<std::size_t>(peer)];
}

// ---- intervals -------------------------------------------------------------------------------

void engine::hot_set::add(std::uint32_t u) {
  bits[u / 64] |= std::uint64_t{1} << (u % 64);
  runs_stale = true;
}

void engine::hot_set::remove(std::uint32_t u) {
  bits[u / 64] &= ~(std::uint64_t{1} << (u % 64));
  runs_stale = true;
}

const std::vector<unit_run>& engine::hot_set::current_runs() {
  if (!runs_stale) return runs;
  runs.clear();
  for (std::size_t w = 0; w < bits.size(); ++w) {
    for (std::uint64_t b = bits[w]; b != 0; b &= b - 1)
      append_unit(runs, static_cast<std::uint32_t>(w * 64 + static_cast<std::size_t>(std::countr_zero(b))));
  }
  runs_stale = false;
  return runs;
}

bool engine::close_written_interval_locked() {
  // close_interval_locked checked that something was written or is hot; should that have changed
  // since (a hot range ended), the lists below come out empty and nothing is closed.
  const bool any_hot = hot_count_.load(std::memory_order_acquire) != 0;
  const std::uint32_t index = vt_[static_cast<std::size_t>(rank_)] + 1;
  std::vector<std::uint32_t> units;
  std::vector<unit_run> hot_runs;
  {
    std::lock_guard lk(dirty_mutex_);
    units.swap(dirty_);
    any_dirty_.store(false, std::memory_order_relaxed);
    if (any_hot) hot_runs = hot_.current_runs();
    if (!units.empty() || !hot_runs.empty()) hot_.closing = index;
    // The hot units taken here are announced in `index`: publish it as closed in the same hold
    // of dirty_mutex_, so that a thread ending a unit's hot range (end_hot_locked, which reads
    // last_closed_ under this lock) either removes the unit before this close takes it, or sees
    // `index` and ends the range there -- never ends it one interval short of a record that
    // announces the unit. (This close then always creates the record: hot_runs is not empty.)
    if (!hot_runs.empty()) last_closed_.store(index, std::memory_order_release);
  }
  if (units.empty() && hot_runs.empty()) return false;
  std::sort(units.begin(), units.end());
  units.erase(std::unique(units.begin(), units.end()), units.end());
  std::vector<unit_run> written;  // units written in this interval that were not hot before it
  std::vector<std::uint32_t> joined;
  std::vector<std::uint32_t> unwritten;  // made writable ahead and found unchanged (write_ahead)
  {
    // Write-protect so that the next write is seen and lands in the next interval (the twin
    // stays, the diff is made lazily): one mprotect per run of contiguous units.
    //
    // Except hot units (see make_writable_locked): they stay read-write and dirty, and are
    // announced in every interval from now on, written or not, without being visited: their
    // last notice is an open range, and the record takes the hot set's runs. That is safe
    // because the twin stays until a diff is made, and a diff covers every notice awaiting the
    // twin: a reader that acts on a notice of an interval that did not write the unit fetches a
    // diff that holds nothing new for it. It saves a write fault, a twin check and a notice per
    // unit and interval (SOR rewrites its whole block every half-sweep). Every hot_intervals_
    // closes a hot unit's contents are hashed: unchanged since the last check, it is
    // write-protected and stops being announced.
    protection_batch batch = protections();
    for (std::uint32_t u : units) {
      batch.visit(u, [&](page_entry& pe) -> unit_protection {
        if (!pe.dirty) return {pe.prot};  // its writes already went into a diff of an earlier notice
        if (pe.hot && !pe.own.empty() && pe.own.back().open()) return {pe.prot};  // in hot_runs
        if (pe.speculative) {
          // Made writable ahead of a run of write faults. Unchanged: not written, so no notice;
          // it is write-protected with the others and its twin dropped below, once a write
          // racing with this close can no longer slip in unseen (it faults from then on).
          if (std::memcmp(region_.lib_unit(u), pe.twin.get(), region_.unit()) == 0) {
            pe.dirty = false;
            unwritten.push_back(u);
            return {pe.prot == os::prot::read_write ? os::prot::read : pe.prot};
          }
          pe.speculative = false;
        }
        append_unit(written, u);
        const bool joins = pe.hot;  // became hot in this interval: its notice opens a range
        own_notice* back = pe.own.empty() ? nullptr : &pe.own.back();
        if (back != nullptr && back->awaiting_twin && back->pieces.empty() && pe.open_pieces.empty() &&
            pe.twin != nullptr) {
          back->last = joins ? own_notice::k_open : index;  // the same future diff: one range
        } else {
          pe.own.push_back(own_notice{index, joins ? own_notice::k_open : index, std::move(pe.open_pieces),
                                      pe.twin != nullptr});
          pe.open_pieces.clear();
          add_metadata(sizeof(own_notice));
        }
        if (joins) {
          pe.hot_hash = sample_hash_unit(region_.lib_unit(u), region_.unit());
          pe.hot_period = hot_intervals_;
          pe.hot_check_at = index + pe.hot_period;
          joined.push_back(u);
          return {pe.prot};  // stays dirty and read-write
        }
        pe.dirty = false;
        return {pe.prot == os::prot::read_write ? os::prot::read : pe.prot};
      });
    }
  }
  for (std::uint32_t u : unwritten) {
    // Write-protected now: a write since the compare faulted (begin_write_locked: no longer
    // speculative, dirty again, announced at the next close) or shows in a second compare.
    std::lock_guard lk(pages_.lock_of(u));
    page_entry& pe = pages_.at(u);
    if (!pe.speculative || !pe.twin) continue;  // written since (a fault), or diffed
    pe.speculative = false;
    if (std::memcmp(region_.lib_unit(u), pe.twin.get(), region_.unit()) == 0) {
      pe.twin.reset();
      add_metadata(-static_cast<std::int64_t>(region_.unit()));
      stats::add(stats::counter::write_ahead_unused);
      continue;
    }
    // Written between the compare and the write-protection: one of the next interval's writes.
    if (!pe.dirty) {
      pe.dirty = true;
      std::lock_guard dl(dirty_mutex_);
      dirty_.push_back(u);
      any_dirty_.store(true, std::memory_order_release);
    }
  }
  std::vector<unit_run> runs = hot_runs.empty() ? std::move(written) : merge_runs(written, hot_runs);
  if (runs.empty()) {  // nothing joined either (a joining unit is in `written`)
    std::lock_guard lk(dirty_mutex_);
    hot_.closing = 0;
    return false;
  }
  vt_[static_cast<std::size_t>(rank_)] = index;
  // Release: a thread that loads `index` (acquire) and then reads a unit's contents sees every
  // write of this interval (snapshot_diff_locked relies on it for units that stay writable).
  last_closed_.store(index, std::memory_order_release);
  std::vector<std::pair<std::uint32_t, std::uint32_t>> due;  // (unit, check interval)
  {
    std::lock_guard lk(dirty_mutex_);
    std::uint32_t added = 0;
    for (std::uint32_t u : joined) {
      if (std::find(hot_.left_while_joining.begin(), hot_.left_while_joining.end(), u) != hot_.left_while_joining.end())
        continue;
      hot_.add(u);
      hot_.checks.emplace(index + hot_intervals_, u);  // == the unit's hot_check_at
      ++added;
    }
    hot_.left_while_joining.clear();
    hot_.closing = 0;
    hot_count_.fetch_add(added, std::memory_order_relaxed);
    for (auto it = hot_.checks.begin(); it != hot_.checks.end() && it->first <= index;) {
      due.emplace_back(it->second, it->first);
      it = hot_.checks.erase(it);
    }
  }
  if (!due.empty()) check_hot_locked(std::move(due), index);
  auto r = std::make_shared<interval_record>();
  r->creator = static_cast<std::uint32_t>(rank_);
  r->index = index;
  r->vt = vt_;
  r->runs = std::move(runs);
  stats::add(stats::counter::intervals_created);
  stats::add(stats::counter::write_notices_created, r->units());
  add_metadata(static_cast<std::int64_t>(r->footprint()));
  store_.add(std::move(r));
  return true;
}

void engine::check_hot_locked(std::vector<std::pair<std::uint32_t, std::uint32_t>> due, std::uint32_t index) {
  std::sort(due.begin(), due.end());
  protection_batch batch = protections();
  for (const auto& entry : due) {
    const std::uint32_t u = entry.first, at = entry.second;  // not a structured binding: the lambda captures them
    batch.visit(u, [&](page_entry& pe) -> unit_protection {
      if (!pe.hot || pe.hot_check_at != at) return {pe.prot};  // left the hot set since
      const std::uint64_t h = sample_hash_unit(region_.lib_unit(u), region_.unit());
      if (h != pe.hot_hash) {  // written since the last check: stays hot, checked half as often
        pe.hot_hash = h;
        pe.hot_period = static_cast<std::uint16_t>(std::min<unsigned>(2u * pe.hot_period, k_hot_period_max));
        pe.hot_check_at = index + pe.hot_period;
        std::lock_guard lk(dirty_mutex_);
        hot_.checks.emplace(pe.hot_check_at, u);
        return {pe.prot};
      }
      // Not written for a whole stretch: announced through this interval, then write-protected
      // (the twin stays: the writes of the range are still only in it).
      end_hot_locked(u, pe);
      return {pe.prot == os::prot::read_write ? os::prot::read : pe.prot};
    });
  }
}

void engine::learn_locked(int origin, const vector_time& vt) {
  if (origin != rank_) known_[static_cast<std::size_t>(origin)].merge(vt);
}

// ---- annotations -----------------------------------------------------------------------------

void engine::encode_request(net::byte_writer& out) {
  std::lock_guard lk(meta_);
  vt_.encode(out);
}

void engine::encode_release(int dest, bool transitive, net::byte_writer& out) {
  stats::work_scope timed(net::current_handler() == nullptr);
  encode_release_locked(dest, transitive, out);
  maybe_want_gc();
}

void engine::encode_release_locked(int dest, bool transitive, net::byte_writer& out) {
  std::lock_guard lk(meta_);
  close_interval_locked();
  vt_.encode(out);
  const std::size_t count_at = out.reserve_slot<std::uint32_t>();
  std::uint32_t count = 0;
  std::uint32_t own_known = 0;  // our newest interval dest knew of (we believe) before this release
  if (dest != rank_) {
    std::uint32_t* known = known_[static_cast<std::size_t>(dest)].data();
    const std::uint32_t* now = vt_.data();
    own_known = known[rank_];
    for (std::uint32_t c = 0; c < static_cast<std::uint32_t>(size_); ++c) {
      if (!transitive && c != static_cast<std::uint32_t>(rank_)) continue;
      if (known[c] >= now[c]) continue;  // dest has all of c's intervals: the common case
      const std::uint32_t from = std::max(known[c], store_.collected_through(c));
      for (std::uint32_t i = from + 1; i <= now[c]; ++i) {
        store_.find(c, i)->encode(out);
        ++count;
      }
      // Assume dest will know these; if the message is forwarded or stored instead, the final
      // receiver finds the gap from the required vector time and fetches it from us.
      known[c] = now[c];
    }
  }
  out.fill_slot(count_at, count);
  const std::uint32_t now_own = vt_[static_cast<std::size_t>(rank_)];
  if (push_diffs_ && dest != rank_ && own_known < now_own) encode_pushed_locked(dest, now_own, out);
  else out.put(std::uint32_t{0});
}

void engine::learn_request(int origin, std::span<const std::byte> cinfo) {
  // Validate everything before taking the lock; then merge straight from the bytes.
  const std::span<const std::byte> entries = decode_request_vt(cinfo, static_cast<std::size_t>(size_));
  if (origin == rank_) return;
  std::lock_guard lk(meta_);
  known_[static_cast<std::size_t>(origin)].merge_encoded(entries);
}

release_info engine::decode_release(int origin, std::span<const std::byte> cinfo) {
  release_info info =
      decode_release_info(origin, cinfo, wire_limits{static_cast<std::size_t>(size_), region_.units(), region_.unit()});
  std::lock_guard lk(meta_);
  learn_locked(origin, info.required);
  return info;
}

bool engine::acquire_if_current(int origin, std::span<const std::byte> cinfo) {
  // The encoding of a release that carries nothing (encode_release_locked): u32 n, u32 vt[n],
  // u32 records = 0, u32 pushed = 0. Anything else, even malformed, is the general path's.
  const std::size_t n = static_cast<std::size_t>(size_);
  if (cinfo.size() != (n + 3) * sizeof(std::uint32_t) || origin < 0 || origin >= size_) return false;
  std::uint32_t width = 0, records = 0, pushed = 0;
  std::memcpy(&width, cinfo.data(), sizeof width);
  std::memcpy(&records, cinfo.data() + (n + 1) * sizeof(std::uint32_t), sizeof records);
  std::memcpy(&pushed, cinfo.data() + (n + 2) * sizeof(std::uint32_t), sizeof pushed);
  if (width != n || records != 0 || pushed != 0) return false;
  const std::span<const std::byte> required = cinfo.subspan(sizeof(std::uint32_t), n * sizeof(std::uint32_t));
  std::lock_guard lk(meta_);
  // What decode_release learns; the general path, if it follows, learns the same again.
  if (origin != rank_) known_[static_cast<std::size_t>(origin)].merge_encoded(required);
  // What begin_acquire then finds (carried_covers_locked with no records): complete iff this
  // rank already has every interval the origin had. Otherwise the required time names intervals
  // still in flight to us or forwarded past us, which only the general path fetches.
  const std::uint32_t* have = vt_.data();
  for (std::size_t c = 0; c < n; ++c) {
    std::uint32_t need;
    std::memcpy(&need, required.data() + c * sizeof need, sizeof need);
    if (have[c] < need) return false;
  }
  return true;
}

// ---- acquires --------------------------------------------------------------------------------

// Which records the group still lacks after the ones it carries, as requests per origin:
// (origin, [creator, after, through, creator, after, through, ...]).
std::vector<std::pair<int, std::vector<std::uint32_t>>> engine::missing_locked(const acquire_state& a) {
  vector_time need(static_cast<std::size_t>(size_));
  std::vector<int> source(static_cast<std::size_t>(size_), -1);
  for (const auto& info : a.infos)
    for (std::size_t c = 0; c < need.size(); ++c)
      if (info.required[c] > need[c]) {
        need[c] = info.required[c];
        source[c] = info.origin;
      }
  // How far each creator's intervals reach contiguously with what the group carries.
  vector_time have = vt_;
  std::vector<record_ptr> carried;
  for (const auto& info : a.infos) carried.insert(carried.end(), info.records.begin(), info.records.end());
  for (const auto& batch : {carried, a.fetched}) {
    std::vector<record_ptr> sorted = batch;
    std::sort(sorted.begin(), sorted.end(), [](const record_ptr& x, const record_ptr& y) {
      return x->creator != y->creator ? x->creator < y->creator : x->index < y->index;
    });
    for (const auto& r : sorted)
      if (r->index == have[r->creator] + 1) have[r->creator] = r->index;
  }
  std::map<int, std::vector<std::uint32_t>> by_origin;
  for (std::uint32_t c = 0; c < static_cast<std::uint32_t>(size_); ++c) {
    if (have[c] >= need[c]) continue;
    auto& ranges = by_origin[source[c]];
    ranges.insert(ranges.end(), {c, have[c], need[c]});
  }
  return {by_origin.begin(), by_origin.end()};
}

bool engine::carried_covers_locked(const release_info& info) const {
  // One pass over the records, which encode_release emits sorted by (creator, index); anything
  // else is left to the general path in begin_acquire(vector).
  const auto& rs = info.records;
  std::size_t i = 0;
  for (std::uint32_t c = 0; c < static_cast<std::uint32_t>(size_); ++c) {
    std::uint32_t have = vt_[c];
    for (; i < rs.size() && rs[i]->creator == c; ++i) {
      if (i > 0 && rs[i - 1]->creator == c && rs[i - 1]->index >= rs[i]->index) return false;
      if (rs[i]->index == have + 1) have = rs[i]->index;
      else if (rs[i]->index > have) return false;  // a gap
    }
    if (have < info.required[c]) return false;
  }
  return i == rs.size();
}

bool engine::apply_if_covered_locked(release_info& info) {
  if (!carried_covers_locked(info)) return false;
  if (!info.records.empty() || !info.pushed.empty()) {
    std::vector<std::pair<int, pushed_unit*>> pushed;
    for (auto& p : info.pushed) pushed.emplace_back(info.origin, &p);
    apply_batch_locked(std::move(info.records), std::move(pushed));
  }
  return true;
}

acquire_ptr engine::begin_acquire(release_info&& info) {
  stats::work_scope timed(net::current_handler() == nullptr);
  {
    std::lock_guard lk(meta_);
    if (apply_if_covered_locked(info)) return nullptr;  // complete: nothing to share
  }
  std::vector<release_info> one;
  one.push_back(std::move(info));
  return begin_acquire(std::move(one));
}

acquire_ptr engine::begin_acquire(std::vector<release_info> infos) {
  stats::work_scope timed(net::current_handler() == nullptr);
  std::vector<std::pair<int, std::vector<std::uint32_t>>> missing;
  acquire_ptr a;
  {
    std::lock_guard lk(meta_);
    // Messages whose own records complete what they require are applied one by one at once
    // (each a complete batch); the rest are pooled, so none fetches what another brings.
    std::size_t done = 0;
    while (done < infos.size() && apply_if_covered_locked(infos[done])) ++done;
    if (done == infos.size()) return nullptr;
    a = std::make_shared<acquire_state>();
    a->infos.assign(std::make_move_iterator(infos.begin() + static_cast<std::ptrdiff_t>(done)),
                    std::make_move_iterator(infos.end()));
    missing = missing_locked(*a);
    if (missing.empty()) {
      finish_acquire_locked(*a);
      return a;
    }
    a->outstanding = static_cast<int>(missing.size());
    incomplete_acquires_.fetch_add(1, std::memory_order_acq_rel);
  }
  for (const auto& [origin, ranges] : missing) send_interval_request(origin, ranges, a);
  return a;
}

void engine::finish_acquire_locked(acquire_state& a) {
  std::vector<record_ptr> all = std::move(a.fetched);
  std::vector<std::pair<int, pushed_unit*>> pushed;
  for (auto& info : a.infos) {
    all.insert(all.end(), info.records.begin(), info.records.end());
    for (auto& p : info.pushed) pushed.emplace_back(info.origin, &p);
  }
  apply_batch_locked(std::move(all), std::move(pushed));
  for (const auto& info : a.infos) {
    if (!vt_.covers(info.required)) {
      detail::defer_error(error(MDSM_ERR_INTERNAL, detail::cat("mdsm: rank ", rank_,
                                                               " could not obtain the consistency information of a "
                                                               "message from rank ",
                                                               info.origin)));
      break;
    }
  }
  a.infos.clear();  // records now live in the store; do not keep a second reference
  a.done.store(true, std::memory_order_release);
}

void engine::apply_batch_locked(std::vector<record_ptr> records, std::vector<std::pair<int, pushed_unit*>> pushed) {
  std::sort(records.begin(), records.end(), [](const record_ptr& x, const record_ptr& y) {
    return x->creator != y->creator ? x->creator < y->creator : x->index < y->index;
  });
  std::vector<record_ptr> fresh;
  for (auto& r : records) {
    const std::uint32_t c = r->creator;
    if (r->index != vt_[c] + 1) continue;  // known already (or a duplicate in the batch)
    vt_[c] = r->index;
    stats::add(stats::counter::intervals_received);
    stats::add(stats::counter::write_notices_received, r->units());
    add_metadata(static_cast<std::int64_t>(r->footprint()));
    fresh.push_back(std::move(r));
  }
  // Paint the notices, then visit only the units that are valid now (an invalid unit or one
  // without a copy needs nothing more: its next fetch asks for everything the paint says it
  // lacks) and the units diffs were pushed for. Contiguous units are invalidated with one
  // mprotect.
  std::vector<std::uint32_t> visit;
  {
    std::lock_guard lk(notices_.mutex());
    const std::size_t before = notices_.bytes();
    for (const auto& r : fresh) {
      notices_.paint(r->creator, r->runs, r->index);
      for (const unit_run& run : r->runs) notices_.valid_units(run, visit);
    }
    add_metadata(static_cast<std::int64_t>(notices_.bytes()) - static_cast<std::int64_t>(before));
  }
  std::sort(pushed.begin(), pushed.end(),
            [](const auto& a, const auto& b) { return a.second->unit < b.second->unit; });
  for (const auto& p : pushed) visit.push_back(p.second->unit);
  std::sort(visit.begin(), visit.end());
  visit.erase(std::unique(visit.begin(), visit.end()), visit.end());
  {
    protection_batch batch = protections();
    auto next_push = pushed.begin();
    for (std::uint32_t u : visit) {
      while (next_push != pushed.end() && next_push->second->unit < u) ++next_push;
      batch.visit(u, [&](page_entry& pe) -> unit_protection {
        for (auto p = next_push; p != pushed.end() && p->second->unit == u; ++p)
          if (apply_pushed_locked(u, pe, p->first, *p->second))
            return {pe.prot != os::prot::none ? pe.prot : os::prot::read};
        if (pe.state != page_state::valid || wanted_locked(u, pe).empty()) return {pe.prot};
        end_hot_locked(u, pe);
        set_state_locked(u, pe, page_state::invalid);
        return {os::prot::none};
      });
    }
  }
  for (auto& r : fresh) store_.add(std::move(r));
}

void engine::send_interval_request(int origin, const std::vector<std::uint32_t>& ranges, const acquire_ptr& a) {
  auto box = std::make_shared<reply_box>();
  box->callback = [this, a](std::span<const std::byte> payload, int) {
    const std::vector<record_ptr> got =
        decode_interval_reply(payload, static_cast<std::size_t>(size_), region_.units());
    std::lock_guard lk(meta_);
    a->fetched.insert(a->fetched.end(), got.begin(), got.end());
    if (--a->outstanding == 0) {
      finish_acquire_locked(*a);
      incomplete_acquires_.fetch_sub(1, std::memory_order_acq_rel);
    }
  };
  const std::uint32_t token = register_box(box);
  net::byte_writer out;
  out.put(static_cast<std::uint32_t>(ranges.size() / 3));
  out.put_array<std::uint32_t>(ranges);
  stats::add(stats::counter::interval_fetches);
  send_protocol(origin, op_interval_request, token, out.bytes());
}

namespace {
constexpr const char* k_acquire_wait =
    "consistency information (interval records) an acquire lacks, requested from the ranks that created it";
}  // namespace

void engine::wait_acquire(const acquire_ptr& a) {
  if (a == nullptr) return;  // completed when it began
  detail::wait_subject subject{.what = k_acquire_wait};
  detail::waiting_for waiting(subject);
  progress_.wait_until([&] { return a->done.load(std::memory_order_acquire); });
}

void engine::wait_all_acquires() {
  if (all_acquires_done()) return;  // poll() calls this every time
  detail::wait_subject subject{.what = k_acquire_wait};
  detail::waiting_for waiting(subject);
  progress_.wait_until([&] { return all_acquires_done(); });
}

}  // namespace mdsm::coherence
