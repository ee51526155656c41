// Per-rank statistics. Every layer reports here; the list below is the one place a counter is
// declared. Any thread (application, progress, handler) may add; see `storage` for how.
//
// Kinds: `count` only grows (until reset); `time` is a count of nanoseconds, added in clock
// ticks (stats/clock.hpp) and converted when read; `gauge` goes up and down and keeps a peak in
// the counter declared right after it (named *_peak).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <optional>
#include <string_view>

#include "stats/clock.hpp"

namespace mdsm::stats {

// X(name, kind, description). Annotation-indexed groups are declared in annotation order
// (none, request, release, release_nt) so that `by_annotation` can index them.
#define MDSM_STATS_COUNTERS(X)                                                                   \
  X(frames_sent, count, "frames sent (every message mdsm put on the wire)")                      \
  X(frame_bytes_sent, count, "bytes of all frames sent, headers included")                       \
  X(frames_received, count, "frames received")                                                   \
  X(frame_bytes_received, count, "bytes of all frames received")                                 \
  X(frames_malformed, count, "frames dropped because they failed validation")                    \
  X(large_frames, count, "frames sent through the large-frame path")                             \
  X(flow_waits, count, "sends that waited for the destination to return credits")               \
  X(flow_overdrafts, count, "frames sent beyond the credit window without waiting (handlers)")  \
  X(credit_frames, count, "credit frames sent (credits that no other frame carried back)")      \
  X(flow_throttles, count, "times this rank withheld credits from waiting senders")            \
  X(msgs_sent_none, count, "user messages sent, NONE")                                           \
  X(msgs_sent_request, count, "user messages sent, REQUEST")                                     \
  X(msgs_sent_release, count, "user messages sent, RELEASE")                                     \
  X(msgs_sent_release_nt, count, "user messages sent, RELEASE_NT")                               \
  X(payload_bytes_sent_none, count, "payload bytes sent, NONE")                                  \
  X(payload_bytes_sent_request, count, "payload bytes sent, REQUEST")                            \
  X(payload_bytes_sent_release, count, "payload bytes sent, RELEASE")                            \
  X(payload_bytes_sent_release_nt, count, "payload bytes sent, RELEASE_NT")                      \
  X(cinfo_bytes_sent_none, count, "consistency-information bytes sent, NONE")                    \
  X(cinfo_bytes_sent_request, count, "consistency-information bytes sent, REQUEST")              \
  X(cinfo_bytes_sent_release, count, "consistency-information bytes sent, RELEASE")              \
  X(cinfo_bytes_sent_release_nt, count, "consistency-information bytes sent, RELEASE_NT")        \
  X(msgs_received_none, count, "user messages received, NONE")                                   \
  X(msgs_received_request, count, "user messages received, REQUEST")                            \
  X(msgs_received_release, count, "user messages received, RELEASE")                            \
  X(msgs_received_release_nt, count, "user messages received, RELEASE_NT")                       \
  X(msgs_forwarded, count, "messages forwarded by a handler or from storage")                    \
  X(msgs_stored, count, "messages stored by a handler")                                          \
  X(msgs_discarded, count, "stored messages discarded (their consistency given up)")              \
  X(msgs_accepted, count, "RELEASE/RELEASE_NT messages accepted")                                \
  X(msgs_current, count, "RELEASE/RELEASE_NT messages that brought nothing new (no acquire)")    \
  X(mpi_sends_none, count, "MDSM_ MPI sends (mpi_ext), NONE")                                     \
  X(mpi_sends_request, count, "MDSM_ MPI sends, REQUEST")                                        \
  X(mpi_sends_release, count, "MDSM_ MPI sends, RELEASE")                                        \
  X(mpi_sends_release_nt, count, "MDSM_ MPI sends, RELEASE_NT")                                  \
  X(mpi_cinfo_bytes_sent, count, "consistency-information bytes sent by MDSM_ MPI sends")         \
  X(mpi_side_messages, count, "of those sends: information too large for the header, sent apart") \
  X(mpi_side_data, count, "of those sends: large data sent apart, with the user's datatype")      \
  X(mpi_acquires, count, "MDSM_ MPI receives that acquired (RELEASE kinds)")                     \
  X(protocol_msgs_sent, count, "coherence protocol messages sent (requests and replies)")        \
  X(protocol_bytes_sent, count, "coherence protocol bytes sent")                                 \
  X(handler_ns, time, "time spent running message handlers (ns)")                               \
  X(wait_ns, time, "time the application waited on remote events (ns)")                        \
  X(sync_wait_ns, time, "of wait_ns: waits outside faults and GC (locks, barriers, messages)")   \
  X(fault_ns, time, "time in coherent-region faults, remote fetches included (ns)")             \
  X(gc_ns, time, "time in garbage collection, its waits included (ns)")                         \
  X(coherence_ns, time, "application threads' consistency work at releases and acquires (ns)")   \
  X(waits, count, "waits on remote events")                                                      \
  X(waits_suspended, count, "of waits: handed to a user-level scheduler (upcalls)")             \
  X(waits_suspended_listed, count, "of those: sum of the waits suspended at each (itself too)") \
  X(doorbells_rung, count, "sleeping progress threads of this host woken for a request")        \
  X(nudges, count, "parked progress threads nudged for a request unanswered for 50 us")          \
  X(knocks, count, "progress threads of this host woken from a deep nap for any frame")          \
  X(intervals_created, count, "intervals closed by this rank")                                   \
  X(intervals_received, count, "interval records learned from other ranks")                      \
  X(interval_fetches, count, "fetches of missing interval records")                              \
  X(write_notices_created, count, "write notices created")                                       \
  X(write_notices_received, count, "write notices applied (pages invalidated)")                  \
  X(read_faults, count, "read faults on the coherent region")                                    \
  X(write_faults, count, "write faults on the coherent region")                                  \
  X(protect_calls, count, "mprotect calls on the coherent region's application view")            \
  X(protect_units, count, "coherence units covered by those calls")                              \
  X(twins_created, count, "twins created")                                                       \
  X(private_units_shared, count, "private units (written with no fault at their home) a first copy was served of") \
  X(write_ahead_units, count, "units made writable ahead of a run of write faults")               \
  X(write_ahead_unused, count, "of those: not written before the interval closed (twin dropped)")  \
  X(diffs_created, count, "diffs created")                                                       \
  X(diff_bytes_created, count, "bytes of diffs created")                                         \
  X(diffs_applied, count, "diffs applied")                                                       \
  X(diff_bytes_applied, count, "bytes of diffs applied")                                         \
  X(diff_requests, count, "diff requests sent")                                                  \
  X(page_requests, count, "whole-page requests sent")                                            \
  X(prefetches, count, "of those requests' batches: windows of a walk asked for ahead (prefetch)") \
  X(prefetch_units, count, "units asked for in prefetches")                                      \
  X(pushed_units_sent, count, "units whose diffs were pushed along with a RELEASE")              \
  X(pushed_bytes_sent, count, "bytes of diffs pushed along with RELEASEs")                       \
  X(pushed_units_applied, count, "pushed diffs applied at an acquire (a fault and fetch saved)") \
  X(pushed_units_unused, count, "pushed diffs not applicable (the copy lacked more)")           \
  X(nc_gets, count, "non-coherent region gets issued (local ones included)")                      \
  X(nc_get_bytes, count, "bytes those gets read")                                               \
  X(nc_puts, count, "non-coherent region puts issued (local ones included)")                      \
  X(nc_put_bytes, count, "bytes those puts wrote")                                              \
  X(nc_atomics, count, "non-coherent fetch_add and compare_swap issued")                          \
  X(nc_bodies, count, "of the remote gets and puts: bytes moved as one MPI message")             \
  X(nc_direct, count, "of the remote gets and puts: copied directly from/to a rank of this host") \
  X(gc_runs, count, "garbage collections")                                                       \
  X(gc_background_runs, count, "of gc_runs: collections without a barrier, in the background")  \
  X(gc_freed_bytes, count, "consistency metadata bytes freed by garbage collection")             \
  X(metadata_bytes, gauge, "consistency metadata held now (intervals, notices, twins, diffs)")   \
  X(metadata_bytes_peak, count, "peak of metadata_bytes")

enum class counter : unsigned {
#define MDSM_STATS_ENUM(name, kind, desc) name,
  MDSM_STATS_COUNTERS(MDSM_STATS_ENUM)
#undef MDSM_STATS_ENUM
      count_
};

inline constexpr unsigned k_counters = static_cast<unsigned>(counter::count_);

// Per-annotation counters: `first` is the NONE entry of a group; annotation values are 0..3.
inline counter by_annotation(counter first, unsigned annotation) {
  return static_cast<counter>(static_cast<unsigned>(first) + annotation);
}

namespace storage {
// Counters live in one block per thread that ever counted something: only that thread writes
// its block (a plain load and store, no locked instruction: messages are counted on the hot
// path), readers sum every block. Blocks of finished threads are folded into a retired total.
// Gauges and their peaks go up and down from every thread and stay in `g_shared` (atomic
// read-modify-write; they change only when metadata is created or freed).
struct block {
  std::array<std::atomic<std::uint64_t>, k_counters> v{};
};
// initial-exec TLS (lib/meson.build); constinit: no per-access call to a TLS init wrapper
extern thread_local constinit block* t_block;
block* attach_thread();
extern std::array<std::atomic<std::uint64_t>, k_counters> g_shared;
void raise_peak(counter peak, std::uint64_t v);
}  // namespace storage

// The calling thread's block. A hot path that counts several things takes it once.
inline storage::block& local() {
  storage::block* b = storage::t_block;
  if (b == nullptr) [[unlikely]]
    b = storage::attach_thread();
  return *b;
}

inline void add(storage::block& b, counter c, std::uint64_t v = 1) {
  auto& x = b.v[static_cast<unsigned>(c)];
  x.store(x.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);  // single writer
}

inline void add(counter c, std::uint64_t v = 1) { add(local(), c, v); }

// For gauges: adjusts the gauge and, on increase, its *_peak companion.
inline void gauge_add(counter gauge, std::int64_t delta) {
  auto& g = storage::g_shared[static_cast<unsigned>(gauge)];
  std::uint64_t now = g.fetch_add(static_cast<std::uint64_t>(delta), std::memory_order_relaxed) +
                      static_cast<std::uint64_t>(delta);
  if (delta > 0) storage::raise_peak(static_cast<counter>(static_cast<unsigned>(gauge) + 1), now);
}

// The current value (since the last reset): the sum over threads for counts, the shared value
// for gauges and peaks. Not for hot paths (takes the registry lock).
std::uint64_t get(counter c);
// A count since the library was loaded, untouched by reset() (for protocol bookkeeping such as
// termination detection, which must not depend on what the user resets). Not for hot paths.
std::uint64_t get_since_load(counter c);

std::string_view name(counter c);
std::optional<counter> find(std::string_view name);
std::string_view description(counter c);
bool is_gauge(counter c);

// Zeroes every counter except gauges (which describe memory held now); peaks restart at the gauge.
void reset();

// What the calling thread is doing when it waits, so that wait time can be told apart from the
// time a fault or a garbage collection spends waiting (both are timed as a whole): a wait counts
// into sync_wait_ns only while the thread is in neither.
enum class activity : std::uint8_t { none, fault, gc };
extern thread_local constinit activity t_activity;

// Counts `t` ticks of waiting on remote events: wait_ns, and sync_wait_ns outside faults and GC.
inline void add_wait(std::uint64_t t) {
  storage::block& b = local();
  add(b, counter::wait_ns, t);
  if (t_activity == activity::none) add(b, counter::sync_wait_ns, t);
}

// A wait that MPI itself does, outside mdsm's progress engine (mpi_ext's blocking receives,
// probes, waits and sends), counted as the engine's own waits are (add_wait) when timing() is
// on: from construction (with `on`) to stop() or destruction.
class mpi_wait_scope {
 public:
  explicit mpi_wait_scope(bool on = true) noexcept : start_(on && timing() ? ticks() : 0) {}
  ~mpi_wait_scope() { stop(); }
  void stop() noexcept {
    if (start_ != 0) add_wait(ticks() - start_);
    start_ = 0;
  }
  mpi_wait_scope(const mpi_wait_scope&) = delete;
  mpi_wait_scope& operator=(const mpi_wait_scope&) = delete;

 private:
  std::uint64_t start_;
};

// Marks its scope as `a` (nested scopes keep the outermost) and, when timing() is on, adds its
// elapsed time to `c`.
class activity_scope {
 public:
  activity_scope(activity a, counter c)
      : outer_(t_activity), c_(c), start_(outer_ == activity::none && timing() ? ticks() : 0) {
    if (outer_ == activity::none) t_activity = a;
  }
  ~activity_scope() {
    if (outer_ != activity::none) return;
    t_activity = activity::none;
    if (start_ != 0) add(c_, ticks() - start_);
  }
  activity_scope(const activity_scope&) = delete;
  activity_scope& operator=(const activity_scope&) = delete;

 private:
  activity outer_;
  counter c_;
  std::uint64_t start_;
};

// The consistency work an application thread does itself at a release or an acquire, outside
// faults, collections and message handlers (closing the interval, the diffs pushed with a RELEASE,
// the write notices applied, units invalidated or opened): when timing() is on, adds the elapsed
// time of its scope, less the waits inside it (those stay in wait_ns and sync_wait_ns), to
// coherence_ns. Without it that work counts as the application's own computing in a breakdown
// (apsp 1536 at 2 ranks: ~20 ms per rank, ~14 us per iteration). Nested scopes count once (the
// outermost). `on`: the caller is not in handler context (handler_ns times handlers as a whole).
class work_scope {
 public:
  explicit work_scope(bool on) noexcept {
    if (!on || t_in_work || t_activity != activity::none || !timing()) return;
    t_in_work = true;
    start_ = ticks();
    waited_ = local().v[static_cast<unsigned>(counter::wait_ns)].load(std::memory_order_relaxed);
  }
  ~work_scope() {
    if (start_ == 0) return;
    t_in_work = false;
    storage::block& b = local();
    const std::uint64_t waited = b.v[static_cast<unsigned>(counter::wait_ns)].load(std::memory_order_relaxed) - waited_;
    const std::uint64_t elapsed = ticks() - start_;
    if (elapsed > waited) add(b, counter::coherence_ns, elapsed - waited);
  }
  work_scope(const work_scope&) = delete;
  work_scope& operator=(const work_scope&) = delete;

 private:
  static thread_local constinit bool t_in_work;
  std::uint64_t start_ = 0;
  std::uint64_t waited_ = 0;
};

// Adds the elapsed time of its scope to a `time` counter, when timing() is on.
class scoped_timer {
 public:
  explicit scoped_timer(counter c) : c_(c), start_(timing() ? ticks() : 0) {}
  ~scoped_timer() {
    if (start_ != 0) add(c_, ticks() - start_);
  }
  scoped_timer(const scoped_timer&) = delete;
  scoped_timer& operator=(const scoped_timer&) = delete;

 private:
  counter c_;
  std::uint64_t start_;
};

}  // namespace mdsm::stats
