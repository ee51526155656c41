// The coherence engine: lazy release consistency for the coherent region, driven only by
// annotated messages (docs/COHERENCE.md describes the protocol as implemented; the life of a
// RELEASE and of a page fault belong in docs/ARCHITECTURE.md).
//
// What it keeps, and what guards it:
//   meta_ (metadata lock)   vector time, interval store, per-peer known vector times,
//                           incomplete acquires
//   page locks              every page_entry (state, twin, notices, diffs)
//   dirty_mutex_            the units written in the current interval, the hot set
//   notices_.mutex()        which units other ranks' notices make out of date, which are valid
// Lock order: meta_ -> page lock -> dirty_mutex_, and notices_.mutex() is a leaf (taken under
// any of them, nothing taken under it). No lock is held while waiting for a remote event;
// every such wait goes through net::progress::wait_until.
//
// Invariant: interval records are applied only in complete batches whose result covers the
// required vector time of every message in the batch, so the set of intervals this rank knows
// is always downward closed (a fault never sees an interval without its predecessors).
#pragma once

#include "coherence/consistency_info.hpp"
#include "coherence/interval.hpp"
#include "coherence/notice_index.hpp"
#include "coherence/page_table.hpp"
#include "coherence/protection_batch.hpp"
#include "coherence/region_map.hpp"
#include "coherence/run_map.hpp"
#include "common/spin_mutex.hpp"
#include "net/progress.hpp"
#include "net/transport.hpp"
#include "os/fault.hpp"

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <unordered_map>
#include <vector>

namespace mdsm::coherence {

// An acquire in progress: one accepted message, or a group accepted together (a barrier
// manager accepts all arrivals as one group so it never fetches what another arrival brings).
struct acquire_state {
  std::vector<release_info> infos;
  std::vector<record_ptr> fetched;  // guarded by the engine's meta_
  int outstanding = 0;              // fetch replies still to come; guarded by meta_
  std::atomic<bool> done{false};
};
using acquire_ptr = std::shared_ptr<acquire_state>;

class engine {
 public:
  // Collective: maps the region (region_map) and installs the fault handler.
  engine(net::transport& t, net::progress& p, const region_config& cfg);
  ~engine();
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;

  // ---- annotations (used by lib/messages) ----------------------------------------------
  // Both append to `out` (which may already hold the frame's header and payload).
  // REQUEST: this rank's vector time.
  void encode_request(net::byte_writer& out);
  // RELEASE / RELEASE_NT: closes the current interval (if anything was written), then writes
  // the required vector time and the interval records `dest` is believed to lack (all
  // creators', or only this rank's own when !transitive).
  void encode_release(int dest, bool transitive, net::byte_writer& out);
  // Validates a REQUEST's consistency information and learns the origin's vector time.
  void learn_request(int origin, std::span<const std::byte> cinfo);
  // Validates a RELEASE/RELEASE_NT's consistency information, learns the origin's vector time
  // and returns it decoded. Throws MDSM_ERR_MALFORMED.
  release_info decode_release(int origin, std::span<const std::byte> cinfo);
  // The acquire of a RELEASE/RELEASE_NT that brings nothing new, without decoding it: when
  // `cinfo` carries no interval record and no pushed diff (encode_release found nothing it
  // believed `origin` lacked, as in every release of a pure message protocol) and this rank's
  // vector time already covers the required one, learns the origin's time and returns true: the
  // acquire is complete, exactly as decode_release + begin_acquire would have completed it
  // (nothing to apply, nothing to fetch). False for anything else, with nothing changed but that
  // idempotent learning: the caller then takes the general path (which validates and reports).
  bool acquire_if_current(int origin, std::span<const std::byte> cinfo);
  // Accepts: applies at once when nothing is missing; otherwise fetches the missing records
  // from the origins and applies everything when they arrive. Never blocks.
  acquire_ptr begin_acquire(std::vector<release_info> infos);
  // The same for one message. When the records it carries complete what this rank knows up to
  // the required time (the common case: an un-forwarded RELEASE), they are applied at once
  // without allocating an acquire.
  // Both return nullptr for an acquire that completed at once (wait_acquire accepts it).
  acquire_ptr begin_acquire(release_info&& info);
  // Application thread: waits until the acquire is complete.
  void wait_acquire(const acquire_ptr& a);
  bool all_acquires_done() const noexcept { return incomplete_acquires_.load(std::memory_order_acquire) == 0; }
  void wait_all_acquires();

  // ---- buffers handed to MPI (used by mpi_ext) -----------------------------------------------
  // Application thread, not a handler: makes every unit that [p, p+len) touches valid, and with
  // `write` also writable (twinned), as a fault on each would, so that MPI can read (write) the
  // range without faulting inside its own progress. False if a unit is not allocated.
  bool prepare_access(const void* p, std::size_t len, bool write);

  // ---- the region (used by lib/regions) -------------------------------------------------
  region_map& region() noexcept { return region_; }
  // Units [first, first+count) now hold an allocation made by this rank (or collectively).
  void units_allocated(std::uint32_t first, std::uint32_t count);
  // Units [first, first+count) no longer hold any allocation.
  void units_freed(std::uint32_t first, std::uint32_t count);
  // A collective allocation spanning units [first, first+count) is being made (count 0: done):
  // the units it allocates get blocks of it as homes (home_of). Called around units_allocated.
  void collective_allocation(std::uint32_t first, std::uint32_t count);

  // ---- collective -------------------------------------------------------------------------
  // Garbage collection over all ranks: afterwards every interval record, write notice, twin and
  // diff known at the call is freed. Pre: every rank calls it, and no application thread writes
  // coherent memory meanwhile (a global barrier is the natural place).
  void gc();
  std::size_t metadata_bytes() const noexcept;
  // The metadata size past which garbage collection runs: at the next global barrier, and in the
  // background at 1.5 times it (background_gc.cpp). 0: never.
  void set_gc_threshold(std::uint64_t bytes) noexcept;

  // ---- introspection (tests, statistics) ----------------------------------------------------
  vector_time current_vt();
  vector_time known_vt(int peer);
  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }

 private:
  // engine.cpp: intervals and acquires
  // Closes the open interval if anything was written in it (or a unit is hot); true if it made
  // a record. Inline test first: most releases of a message protocol close nothing.
  bool close_interval_locked() {
    if (!any_dirty_.load(std::memory_order_acquire) && hot_count_.load(std::memory_order_acquire) == 0) return false;
    return close_written_interval_locked();
  }
  bool close_written_interval_locked();
  void encode_release_locked(int dest, bool transitive, net::byte_writer& out);  // takes meta_
  // The hot units whose check falls due at the close of interval `index`: (unit, check interval).
  void check_hot_locked(std::vector<std::pair<std::uint32_t, std::uint32_t>> due, std::uint32_t index);
  // True if vt_ plus the records `info` carries covers its required time (no fetch needed).
  bool carried_covers_locked(const release_info& info) const;
  // If so, applies its records (a complete batch) and returns true.
  bool apply_if_covered_locked(release_info& info);
  std::vector<std::pair<int, std::vector<std::uint32_t>>> missing_locked(const acquire_state& a);
  // Applies a complete batch of records; `pushed` are diffs pushed along with them (by origin).
  void apply_batch_locked(std::vector<record_ptr> records, std::vector<std::pair<int, pushed_unit*>> pushed = {});
  void finish_acquire_locked(acquire_state& a);

  // push.cpp: diffs pushed along with RELEASEs
  // We served unit u to `source`, which `faulted` on it or asked for it along with the unit it
  // faulted on: where its copy now is, and whether to push the unit's diffs along with our
  // RELEASEs to it. `through`: the newest of our intervals it asked for (the release of ours it
  // acquired before reading u); `held`: the newest whose writes to u it now holds; `copy`: it
  // had no copy and asked for one.
  void note_served_locked(std::uint32_t u, page_entry& pe, int source, std::uint32_t through, std::uint32_t held,
                          bool faulted, bool copy);
  // Applies pushed diffs to unit u instead of invalidating it, when they hold everything it lacks.
  bool apply_pushed_locked(std::uint32_t u, page_entry& pe, int creator, const pushed_unit& p);
  // Appends to a RELEASE for `dest` the diffs of this rank's writes up to interval `through` to
  // the units `dest` keeps re-reading (each from where dest's copy is, as far as we know).
  void encode_pushed_locked(int dest, std::uint32_t through, net::byte_writer& out);
  void send_interval_request(int origin, const std::vector<std::uint32_t>& ranges, const acquire_ptr& a);
  void learn_locked(int origin, const vector_time& vt);

  struct reply_box;  // a reply to one protocol request (service.cpp)
  using box_ptr = std::shared_ptr<reply_box>;

  // fault.cpp: page access
  enum class access { read, write, unknown };
  // What a unit lacks from one creator: its writes in intervals (after, through].
  struct wanted {
    std::uint32_t creator, after, through;
  };
  static bool fault_trampoline(const os::fault_info& f);
  bool on_fault(const os::fault_info& f);
  // Makes unit u accessible for `how`; returns false if it is not allocated.
  bool validate(std::uint32_t u, access how);
  // Makes a valid unit's writes recorded (twin, dirty list, hot detection); the caller opens it.
  void begin_write_locked(std::uint32_t u, page_entry& pe);
  // Unit's own last notice is of the interval closed last: written then (a write now makes it
  // hot). Page lock held.
  bool written_last_closed_locked(const page_entry& pe) const {
    return !pe.own.empty() && pe.own.back().last == last_closed_.load(std::memory_order_relaxed);
  }
  // After a write fault on valid unit u: if the units before u are writable (a walk writing
  // them), makes the next units writable with it (speculatively, page_entry::speculative). No
  // page lock held.
  void write_ahead(std::uint32_t u);
  void make_writable_locked(std::uint32_t u, page_entry& pe);
  // Makes the lazy diff of the twin's unit (the twin is dropped, the unit write-protected, a hot
  // stretch ends).
  void make_diff_locked(std::uint32_t u, page_entry& pe);
  // The lazy diff made without stopping the writer: the diff of page and twin, which the twin
  // then takes in, so the unit keeps its protection, dirty and hot state (a write racing with it
  // lands either in this diff or, being a difference from the twin, in the next one).
  void snapshot_diff_locked(std::uint32_t u, page_entry& pe);
  // Gives diff d (may be null: nothing changed) to every notice awaiting the twin; returns whether
  // there was one. An open range of a hot unit keeps awaiting when `snapshot` is set.
  bool attach_diff_locked(page_entry& pe, diff_ptr d, bool snapshot);
  // Ends a hot unit's stretch: its open notice range is closed at the newest interval closed.
  // The caller then takes write access away (the next write must fault to be seen).
  void end_hot_locked(std::uint32_t u, page_entry& pe);
  void set_prot_locked(std::uint32_t u, page_entry& pe, os::prot p);
  // Private units: a unit no other rank holds a copy of can have its writes read nowhere else,
  // so at its home it is plain read-write memory (no write fault, twin, notice or diff). That is
  // every unit of a rank alone, and a unit of this rank's own allocations (its arena, its pool
  // runs, registered ranges at rank 0: other ranks start without a copy of those) until a copy of
  // it is served (page_entry::copied_out). owns_privately: the unit is of that kind at all.
  bool owns_privately(std::uint32_t u) const noexcept { return size_ == 1 || region_.arena_owner(u) == rank_; }
  bool private_locked(std::uint32_t u, const page_entry& pe) const noexcept {
    return !pe.copied_out && owns_privately(u);
  }
  // A copy of u is about to be served: it is private no more. A private valid unit is
  // write-protected (before its bytes are read, so that a racing write lands in the copy or
  // faults and is recorded the ordinary way, with a twin made after the copy) and its writes
  // from then on make notices. Returns the protection the unit needs (for a protection_batch).
  os::prot end_private_locked(std::uint32_t u, page_entry& pe);
  // Changes pe.state, keeping notices_' valid bit in step.
  void set_state_locked(std::uint32_t u, page_entry& pe, page_state s);
  // What unit u lacks, per creator (page lock held).
  std::vector<wanted> wanted_locked(std::uint32_t u, const page_entry& pe);
  // If u lacks nothing, makes it valid and returns true; else marks it invalid.
  bool settle_locked(std::uint32_t u, page_entry& pe);
  // The one place the engine changes the application view's protection (one mprotect, counted
  // in protect_calls / protect_units).
  void protect_units(std::uint32_t first, std::uint32_t count, os::prot p);
  // A batch of protection changes with one mprotect per run of contiguous units.
  protection_batch protections();
  // One unit of a fetch: what it lacks, and what the replies brought for it.
  struct fetch_unit {
    std::uint32_t unit;
    std::vector<wanted> wants;
    std::span<const std::byte> copy;  // the home's copy of the unit (need_copy), into a reply
    struct piece {
      std::uint32_t creator;
      std::uint32_t first, last;  // the creator's intervals whose writes to the unit it holds
      std::uint32_t serial;
      std::span<const std::byte> bytes;  // points into a reply
      std::uint64_t sum = 0;             // apply order (engine::order_pieces)
    };
    std::vector<piece> pieces;
    std::uint32_t home_after = 0;  // need_copy: the home's writes the copy already holds
  };
  // The window a walk is likely to read next, to ask for along with a fetch (start_prefetch).
  struct readahead {
    std::uint32_t from = 0, count = 0;  // count 0: none
  };
  // If unit v can be fetched in the same messages as the batch (page lock held), marks it
  // fetching, appends it and returns true: with need_copy, a unit without a copy whose home is
  // `home`; otherwise an invalid unit that lacks writes of `first`'s creators only.
  bool join_batch_locked(std::uint32_t v, page_entry& pe, bool need_copy, int home, const std::vector<wanted>& first,
                         std::vector<fetch_unit>& batch);
  // Adds the units after batch.front() that are likely read next (join_batch_locked); returns
  // the window after them if the fault continues a walk that goes on.
  readahead gather_neighbours(std::vector<fetch_unit>& batch, bool need_copy);
  // Asks every writer (and the home, for copies) at once, starts the prefetch `next` names, and
  // waits; returns the replies the batch's pieces point into, or nothing if the home has
  // batch.front() unallocated (or busy). With need_copy, a neighbour whose copy the home could
  // not send has an empty `copy`.
  std::vector<box_ptr> fetch(std::vector<fetch_unit>& batch, bool need_copy, bool& copy_busy, const readahead& next);
  // A batch's requests: creator -> its (unit, after, through) triples.
  using request_map = std::map<std::uint32_t, std::vector<std::uint32_t>>;
  request_map plan_requests(const std::vector<fetch_unit>& batch, bool need_copy);
  // demand: req's first unit is the one faulted on (the server counts it as read: push.cpp); a
  // request for units ahead of any fault goes as op_diff_ahead / op_copy_ahead.
  void send_fetch_request(std::uint32_t creator, bool copy, bool demand, const std::vector<std::uint32_t>& req,
                          box_ptr box);
  // Puts creator's reply to `req` into the batch (pieces, and copies from the home). False if the
  // home sent no copy of batch.front() (copy_busy: it was busy, rather than not allocated).
  bool take_fetch_reply(std::vector<fetch_unit>& batch, bool need_copy, std::uint32_t creator,
                        const std::vector<std::uint32_t>& req, std::span<const std::byte> reply, bool& copy_busy);
  // Prefetch (fetch.cpp): up to `count` units from `from` that join a batch like neighbours of
  // one whose wants are `first`, asked for without waiting; the last reply installs them
  // (finish_prefetch, handler context). At most k_prefetches_max in flight; off with
  // MDSM_PREFETCH=0.
  static constexpr unsigned k_prefetches_max = 2;
  struct prefetch_job;
  // A thread is about to wait for unit u, which another thread or a prefetch fetches: if u lies
  // in the window before batch_next_ (the walk caught up with what it asked for ahead), asks for
  // the window after it now.
  void prefetch_after(std::uint32_t u);
  // Whether a prefetch may start now: on, no collection running, fewer than k_prefetches_max in
  // flight (start_prefetch says why collections exclude it).
  bool prefetch_allowed() const noexcept;
  void start_prefetch(std::uint32_t from, std::uint32_t count, bool need_copy, const std::vector<wanted>& first,
                      int home);
  void finish_prefetch(prefetch_job& job);
  // Ends the prefetch: its units stop fetching, installed if `install` (and nothing was freed).
  void end_prefetch(prefetch_job& job, bool install);
  void order_pieces(std::vector<fetch_unit>& batch);
  // Installs a fetched unit: the copy, then the pieces (page lock held).
  void install_locked(fetch_unit& f, page_entry& pe);
  static unit_start initial_state(void* ctx, std::uint32_t u);

  // service.cpp: protocol requests and replies
  struct reply_box {
    std::atomic<bool> ready{false};
    std::vector<std::byte> data;
    int source = -1;
    std::function<void(std::span<const std::byte>, int source)> callback;  // handler context
  };
  std::uint32_t register_box(box_ptr box);
  void send_protocol(int dest, std::uint32_t op, std::uint32_t token, std::span<const std::byte> payload);
  static void on_frame(void* ctx, const net::inbound_frame& f);
  // demand: the request's first unit is one the requester faulted on (not a prefetch window).
  void serve_diff_request(const net::inbound_frame& f, bool with_copy, bool demand);
  void serve_interval_request(const net::inbound_frame& f);
  void take_reply(const net::inbound_frame& f);
  // Appends the pieces of this rank's notices of unit u in intervals (after, through] (page
  // lock held). Returns the newest interval the pieces hold writes of (0: none).
  std::uint32_t encode_pieces_locked(std::uint32_t u, page_entry& pe, std::uint32_t after, std::uint32_t through,
                                     net::byte_writer& out);

  void add_metadata(std::int64_t delta);

  // background_gc.cpp: garbage collection without a barrier
  struct home_validation {
    fetch_unit unit;
    int outstanding = 0;
    vector_time cut;
    std::vector<std::pair<int, std::vector<std::byte>>> replies;  // (writer, reply bytes)
  };
  struct deferred_step {
    std::uint32_t op, epoch;
    vector_time vt;
  };
  void maybe_want_gc();
  void rearm_background_trigger() noexcept;
  void send_gc(int dest, std::uint32_t op, std::uint32_t epoch, const vector_time* vt);
  void on_gc_frame(const net::inbound_frame& f);
  void gc_cut(std::uint32_t epoch, const vector_time& g);
  // What a cut is to do with units (gc_cut; maybe_ready for units whose fetch ended). Kept units
  // need nothing more.
  struct cut_plan {
    std::vector<std::uint32_t> drop;
    std::vector<std::pair<std::uint32_t, std::uint32_t>> waiting;  // (unit, fetch generation)
    std::vector<std::pair<std::uint32_t, std::vector<wanted>>> validate;
  };
  // Decides one unit (its page lock held; not unallocated) and files it in `plan`.
  void plan_cut_locked(std::uint32_t u, page_entry& pe, const vector_time& g, cut_plan& plan);
  // Drops the copies of `units` (increasing) for the cut (g, epoch); a unit whose fetch began
  // meanwhile goes to `waiting` instead.
  void drop_for_cut(const std::vector<std::uint32_t>& units, const vector_time& g, std::uint32_t epoch,
                    std::vector<std::pair<std::uint32_t, std::uint32_t>>& waiting);
  void gc_free(std::uint32_t epoch, const vector_time& g);
  void start_home_validation(std::uint32_t u, std::vector<wanted> wants, const vector_time& g);
  void finish_home_validation(home_validation& job);
  void maybe_ready();
  // A fetch finished (its units are no longer `fetching`): the background collection may wait for it.
  void fetch_finished();
  void begin_blocking_gc();
  void end_blocking_gc() noexcept;
  // gc.cpp, for both collections: the copy counts as holding every other rank's writes up to g.
  void raise_applied_through_locked(page_entry& pe, const vector_time& g);
  // Frees every record, own notice and diff up to g and forgets the notice index up to g.
  void collect_through(const vector_time& g);
  // The rank that keeps an up-to-date copy of unit u after a collection and serves whole copies
  // of it. A unit of a collective allocation: its block of the allocation split evenly over the
  // ranks (the rows a rank owns in a block-distributed array, so a collection does not make a
  // rank fetch the blocks of others it never reads: with the units dealt round robin, SOR's
  // background collections made every rank bring half of its neighbour's block up to date);
  // otherwise the region's home (region_map::home_of: the arena's owner).
  int home_of(std::uint32_t u);
  void set_homes(std::uint32_t first, std::uint32_t count);  // units_allocated, under a collective allocation
  void clear_homes(std::uint32_t first, std::uint32_t count);

  net::transport& transport_;
  net::progress& progress_;
  const int rank_;
  const int size_;
  region_map region_;
  page_table pages_;

  mutable detail::spin_mutex meta_;
  vector_time vt_;
  interval_store store_;
  std::vector<vector_time> known_;  // known_[p]: newest vector time learned of (or sent to) p
  std::atomic<int> incomplete_acquires_{0};

  notice_index notices_;

  std::mutex dirty_mutex_;
  std::vector<std::uint32_t> dirty_;  // written in the open interval, not hot (hot units are in hot_)
  // !dirty_.empty(), written under dirty_mutex_ (release) and read without it, so closing an
  // interval in which nothing was written (every RELEASE of a pure message protocol) takes no
  // lock. A write fault on the releasing thread sets it before the release (program order); one
  // on another thread concurrent with the release belongs to either interval, as with the lock.
  std::atomic<bool> any_dirty_{false};
  const std::uint8_t hot_intervals_;             // region_config::hot_intervals
  // A hot unit's check period starts at hot_intervals_ and doubles at every check that finds it
  // written, up to this: a unit rewritten all the time is looked at rarely, and one that stops
  // is announced for at most this many more intervals.
  static constexpr unsigned k_hot_period_max = 256;
  const bool push_diffs_;                        // region_config::push_diffs
  const bool prefetch_;                          // region_config::prefetch
  const bool background_gc_;                     // region_config::background_gc
  std::atomic<std::uint32_t> last_closed_{0};  // index of this rank's newest closed interval
  // gather_neighbours' readahead: the unit after the last batch, and that batch's window (a
  // heuristic shared by the application threads: relaxed, races only change a window).
  std::atomic<std::uint32_t> batch_next_{~0u};
  std::atomic<std::uint32_t> batch_window_{16};
  std::atomic<unsigned> prefetches_in_flight_{0};  // at most k_prefetches_max (start_prefetch)
  // Nonzero while a blocking collection runs: no prefetch starts (start_prefetch says why).
  std::atomic<unsigned> no_prefetch_{0};
  // Counts units_freed calls (bumped before it looks at any unit): a prefetch that started
  // before a free installs nothing (end_prefetch).
  std::atomic<std::uint32_t> freed_epoch_{0};
  // The hot set: units announced in every interval without a visit (dirty_mutex_). A bit per
  // unit, the runs they form (rebuilt at a close after a change), and when each is checked.
  struct hot_set {
    std::vector<std::uint64_t> bits;
    std::vector<unit_run> runs;
    bool runs_stale = false;
    std::multimap<std::uint32_t, std::uint32_t> checks;  // interval -> unit (stale entries skipped)
    // A close under way (its index, 0 if none) and the units it made open ranges of that left
    // the hot set before it added them (end_hot_locked): it leaves those out.
    std::uint32_t closing = 0;
    std::vector<std::uint32_t> left_while_joining;
    void add(std::uint32_t u);
    void remove(std::uint32_t u);
    bool contains(std::uint32_t u) const { return (bits[u / 64] >> (u % 64) & 1) != 0; }
    const std::vector<unit_run>& current_runs();
  } hot_;
  std::atomic<std::uint32_t> hot_count_{0};  // units in hot_ (read without the lock at close)

  std::mutex boxes_mutex_;
  std::unordered_map<std::uint32_t, box_ptr> boxes_;
  std::uint32_t next_token_ = 1;

  // Units each rank keeps fetching from us: pushed along with our RELEASEs to it while their
  // page_entry::push budget lasts (push_mutex_, a leaf lock).
  std::mutex push_mutex_;
  std::vector<std::set<std::uint32_t>> push_sets_;
  // A rank walking through our units, one step after each of our releases (the pivot row of
  // Floyd-Warshall or LU, read after every barrier): each unit is read once, so the sets above
  // never learn it, but the next step is where the stride says. Once two steps agree, our next
  // RELEASEs to the walker carry the units the walk reaches next (push.cpp). By rank, push_mutex_.
  struct walk {
    std::uint32_t origin_unit = 0, origin_through = 0;  // the walk's first step (unit, our interval)
    std::uint32_t step_unit = 0, step_through = 0;      // its newest step seen whole; through 0: none
    std::uint32_t extent = 1;                           // units a step reads, as its faults show
    std::uint8_t steps = 0;                             // steps taken at the walk's stride
    std::uint8_t budget = 0;                            // RELEASEs to the walker that still push
    std::uint32_t pushed_through = 0;                   // our newest RELEASE that pushed its units
    bool copies = false;  // its newest step asked for a copy: the walker has no copies of its own
    // Where the step after our release `through` starts (steps != 0, through >= origin_through).
    std::uint32_t at(std::uint32_t through) const {
      return static_cast<std::uint32_t>(origin_unit + std::uint64_t{step_unit - origin_unit} *
                                                          (through - origin_through) /
                                                          (step_through - origin_through));
    }
    // Units per interval, rounded up (steps != 0).
    std::uint32_t stride_ceil() const {
      const std::uint32_t dt = step_through - origin_through;
      return (step_unit - origin_unit + dt - 1) / dt;
    }
  };
  std::vector<walk> walks_;
  void note_walk_locked(walk& w, std::uint32_t u, std::uint32_t through, bool copy);  // push_mutex_ held

  std::atomic<std::int64_t> metadata_bytes_{0};
  std::atomic<std::uint64_t> gc_threshold_{std::uint64_t{64} << 20};
  std::mutex homes_mutex_;                                  // a leaf
  run_map homes_;          // unit -> home + 1 (0: region_map::home_of)
  unit_run allocating_{};  // the collective allocation being made (count 0: none)
  std::atomic<std::uint64_t> bg_trigger_{0};  // metadata_bytes past which a background collection is asked for
  std::atomic<bool> bg_want_{false};    // metadata passed bg_trigger_
  std::atomic<bool> bg_active_{false};  // a cut is being processed here (bg_.active)
  std::atomic<std::uint32_t> bg_freed_{0};  // the newest background collection freed here
  // Held by maybe_ready while it decides the units whose fetches ended (taken with no page lock
  // and no bg_.mu held; page locks and bg_.mu are taken under it), so two threads finishing
  // fetches at once do not decide a unit twice or write back each other's waiting list.
  std::mutex bg_ready_mu_;
  struct {
    std::mutex mu;  // a leaf, except that page locks may be held around it (never the reverse)
    // every rank
    std::uint32_t epoch = 0;  // the newest collection this rank took part in
    bool asked = false;       // asked the coordinator for the next one
    bool active = false;      // between its cut and its ready
    bool blocking = false;    // in a barrier collection: cut and free wait
    int validations = 0;      // home units being fetched up to the cut
    std::vector<std::pair<std::uint32_t, std::uint32_t>> waiting;  // fetches begun before the cut: (unit, generation)
    vector_time cut;          // G of the collection between its cut and its ready
    std::vector<deferred_step> deferred;
    // the coordinator (rank 0)
    std::uint32_t coord_epoch = 0;
    bool running = false;
    int vts = 0, readies = 0;
    vector_time min, cut_sent;
  } bg_;
  std::atomic<std::uint32_t> next_diff_serial_{1};  // diff::serial of the next diff made here
};

}  // namespace mdsm::coherence
