// mdsm — MPI message passing and a software distributed shared memory in one program.
//
// C++ API. Every function throws mdsm::error (with an mdsm_status code and a message that
// says what to do) on misuse; none of them crash on bad input. The C API (mdsm.h) offers the
// same operations with status codes.
//
// The model in one paragraph: a *coherent region* mapped at the same address on every rank is
// kept consistent lazily (release consistency, multiple writers, page granularity), and only
// synchronizing messages move consistency. Every message carries one annotation:
//   RELEASE     sending is a release, accepting it is an acquire: the receiver sees every write
//               the sender (or anyone it synchronized with before) made before sending.
//   RELEASE_NT  the same, but carries only intervals the sender created itself; the receiver
//               detects anything missing from the required vector time and fetches it.
//   REQUEST     not synchronizing; carries the sender's vector time so a RELEASE reply can be
//               tailored to exactly what the requester lacks.
//   NONE        not synchronizing, nothing attached: costs what a plain MPI message costs.
#pragma once

#include <mdsm/error.hpp>

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace mdsm {

// ---- start-up and shut-down ----------------------------------------------------------------

struct options {
  // Bytes of the coherent region (0: MDSM_COHERENT_SIZE, default 1 GiB). Reserved, not committed.
  std::size_t coherent_size = 0;
  // Coherence unit in OS pages (0: MDSM_COHERENT_UNIT_PAGES, default 1).
  std::size_t unit_pages = 0;
  // Map the region here (0: the ranks agree on an address). If some rank cannot map it, another
  // address is agreed on, unless `strict_address` is set: then init fails with MDSM_ERR_REGION_MAP.
  std::uintptr_t coherent_address = 0;
  bool strict_address = false;
  // Run a progress thread (environment MDSM_PROGRESS_THREAD overrides).
  bool progress_thread = true;
  // Failure detector: a wait for another rank (a lock grant, a barrier, a page, a queue item, a
  // message in wait_until ...) that lasts longer than this ends the job with MPI_Abort (exit
  // status 75), after printing which rank waited, for what, and whose answer never came.
  // 0: MDSM_WAIT_DEADLINE_S, default 600 s; negative: no deadline. The environment overrides.
  double wait_deadline_s = 0;
  // Bytes of the non-coherent region (0: MDSM_NONCOHERENT_SIZE, default 1 GiB). Reserved, not
  // committed: untouched pages cost nothing.
  std::size_t noncoherent_size = 0;
};

// Collective over `comm` (MPI must be initialized with MPI_THREAD_MULTIPLE; otherwise throws
// MDSM_ERR_THREAD_LEVEL). mdsm talks over private duplicates of `comm`.
void init(MPI_Comm comm, const options& opts = {});
// Initializes MPI with MPI_THREAD_MULTIPLE if nobody has, then init(MPI_COMM_WORLD). If mdsm
// initialized MPI, finalize() finalizes it.
void init(int* argc, char*** argv, const options& opts = {});
// Collective: waits until no mdsm message is in flight anywhere, prints MDSM_STATS output,
// releases everything. Coherent memory is gone afterwards.
void finalize();
bool initialized() noexcept;
int rank();
int size();

// ---- annotated active messages ------------------------------------------------------------

enum class annotation : std::uint8_t { none = 0, request = 1, release = 2, release_nt = 3 };
const char* to_string(annotation a) noexcept;

using handler_id = std::uint32_t;
class message;
class stored_message;
using handler_fn = std::function<void(message&)>;

namespace detail {
struct inbound;
struct stored;
// What a message's accessors return, filled in by mdsm before the handler runs (inline, so a
// handler reads them without a call into the library).
struct message_fields {
  int source;
  int origin;
  annotation annot;
  handler_id handler;
  std::span<const std::byte> payload;
};
}  // namespace detail

// Registers a handler under `name`. Collective: every rank registers the same handlers in the
// same order; the returned id is the same everywhere (checked: MDSM_ERR_HANDLER_MISMATCH).
//
// THE HANDLER CONTRACT. A handler runs in mdsm's delivery context (on the progress thread, or on
// an application thread that is waiting inside mdsm). Handlers of one rank run one at a time,
// and messages from one sender are handled in the order they were sent. A handler
//   * must not block: no waits, no blocking MPI, no mdsm call that waits for a remote event
//     (detected: MDSM_ERR_HANDLER_CONTEXT);
//   * must not touch the coherent region (detected on every access that faults: the process
//     stops with a message naming the handler; reads of a valid page, and writes to a page this
//     rank already has open for writing, cannot be detected: page protection is per process, and
//     telling the handler's thread apart would need memory protection keys, which x86 VMs often
//     lack -- such a write is attributed to the application's current interval);
//   * must dispose of a RELEASE or RELEASE_NT message exactly once: accept(), forward(rank), or
//     store(). Returning without doing so is reported (MDSM_ERR_NOT_DISPOSED, naming the
//     handler) by the next mdsm call of the application; disposing twice throws at once.
// Errors a handler raises are reported the same way: by the application's next mdsm call, or by
// a wait_until()/poll() in progress. A coordination call (lock, barrier, ...) already waiting
// completes first and leaves the reporting to the next call; mutex::unlock never reports one.
// Handlers may send messages, forward, store, and accept. An accept inside a handler completes
// asynchronously if consistency information must be fetched; mdsm guarantees it has completed
// before the application thread returns from its next wait_until()/poll() or touches the page.
handler_id register_handler(std::string_view name, handler_fn fn);

// Sends `payload` to `dest`'s handler `h`. Asynchronous: returns once the payload is copied
// (it may lie anywhere, coherent memory included). RELEASE and RELEASE_NT close the current
// interval. Per-sender order is preserved end to end. From an application thread it may first
// wait for flow control (see unthrottled_sends), delivering messages meanwhile.
void send(int dest, handler_id h, std::span<const std::byte> payload, annotation a);

template <class T>
void send_value(int dest, handler_id h, const T& value, annotation a) {
  static_assert(std::is_trivially_copyable_v<T>, "send_value needs a trivially copyable type; use send() with bytes");
  send(dest, h, std::as_bytes(std::span<const T, 1>(&value, 1)), a);
}

// Flow control. A rank takes in at most a window of another rank's messages (MDSM_FLOW_WINDOW
// credits of 4 KiB; docs/PROTOCOL.md) before that rank's application threads wait: send(),
// forward() and stored_message::forward() from an application thread whose destination has not
// yet taken in enough of its earlier messages wait like wait_until() -- they deliver incoming
// messages meanwhile, so handlers may run on the calling thread inside them. So memory stays
// bounded however fast a rank sends, and two ranks flooding each other both progress. Sends
// from a handler never wait (they may go beyond the window; a rank whose handlers run far ahead
// of a peer stops returning credits to the application threads feeding it until it catches up).
//
// While an unthrottled_sends object lives, the sends of the thread that made it never wait
// either. Hold one while sending with a lock held that this rank's handlers also take (a handler
// run by the wait would block on that lock); keep the number of such sends bounded (a grant, a
// token, a reply). Nests; destroy it on the thread that made it. lib/sync holds one with every
// object lock.
class unthrottled_sends {
 public:
  unthrottled_sends() noexcept;
  ~unthrottled_sends();
  unthrottled_sends(const unthrottled_sends&) = delete;
  unthrottled_sends& operator=(const unthrottled_sends&) = delete;
};

// A message, as seen by its handler. Valid only while the handler runs (store() to keep it).
class message {
 public:
  int source() const noexcept { return f_->source; }  // the rank that delivered it (the last forwarder)
  int origin() const noexcept { return f_->origin; }  // the original sender (survives forwarding)
  annotation annot() const noexcept { return f_->annot; }
  handler_id handler() const noexcept { return f_->handler; }
  std::span<const std::byte> payload() const noexcept { return f_->payload; }
  // The payload as one T; throws MDSM_ERR_INVALID_ARGUMENT if the size differs.
  template <class T>
  T as() const {
    static_assert(std::is_trivially_copyable_v<T>);
    auto p = payload();
    check_size(sizeof(T));
    T v;
    std::memcpy(&v, p.data(), sizeof(T));
    return v;
  }
  // Consistency actions run and the message is delivered (an acquire for RELEASE kinds).
  void accept();
  // Passes the message on unchanged (payload and consistency information); origin() stays, and
  // so does handler(): the same handler runs at `dest`, so a handler that both receives messages
  // as a manager and receives what managers forward tells the two apart by source() == origin()
  // (the manager's copy comes straight from its sender; docs/SYNC.md).
  void forward(int dest);
  // Keeps the message; accept or forward it later from any context.
  stored_message store();
  bool disposed() const noexcept;

 private:
  friend struct detail::inbound;
  message(const detail::message_fields* f, detail::inbound* in) noexcept : f_(f), in_(in) {}
  void check_size(std::size_t n) const;
  const detail::message_fields* f_;
  detail::inbound* in_;
};

// A stored message. Move-only. Destroying a RELEASE/RELEASE_NT that was never accepted or
// forwarded is reported (MDSM_ERR_NOT_DISPOSED) by the next mdsm call.
class stored_message {
 public:
  stored_message() noexcept;
  stored_message(stored_message&&) noexcept;
  stored_message& operator=(stored_message&&) noexcept;
  ~stored_message();

  explicit operator bool() const noexcept { return s_ != nullptr; }
  int source() const;
  int origin() const;
  annotation annot() const;
  handler_id handler() const;
  std::span<const std::byte> payload() const;  // stays readable after accept()
  template <class T>
  T as() const {
    static_assert(std::is_trivially_copyable_v<T>);
    auto p = payload();
    check_size(sizeof(T));
    T v;
    std::memcpy(&v, p.data(), sizeof(T));
    return v;
  }
  // From an application thread: returns once the acquire is complete. From a handler: starts it.
  void accept();
  void forward(int dest);
  // Disposes of the message without accepting or forwarding it: its payload stays readable, but
  // the consistency it carried is given up -- this rank does not become consistent with the
  // sender's writes through it (a later acquire that covers them still does: what this one would
  // have brought is then fetched from the writers). For a RELEASE kept only to be dropped, e.g. the
  // last release a message-built lock's manager stores, which nobody will acquire. Any context.
  // Throws MDSM_ERR_ALREADY_DISPOSED if the message was accepted, forwarded or discarded.
  void discard();
  bool disposed() const;

 private:
  friend class message;
  friend void accept_all(std::span<stored_message>);
  explicit stored_message(std::unique_ptr<detail::stored> s) noexcept;
  void check_size(std::size_t n) const;
  std::unique_ptr<detail::stored> s_;
};

// Accepts several stored messages as one acquire: the consistency information they carry is
// pooled, so nothing one of them brings is fetched for another (a barrier manager accepts all
// arrivals this way). Returns once complete (from a handler: starts it). Every element must be a
// stored, undisposed message; the call is all-or-nothing with respect to these checks.
void accept_all(std::span<stored_message> messages);

// ---- waiting ---------------------------------------------------------------------------------

// Delivers pending messages (runs handlers) on the calling thread; returns without waiting for
// new ones. Application threads only.
void poll();
// Drives progress until `done()` returns true. `done` is called without locks held; state it
// reads that handlers write must be atomic (or otherwise synchronized). Application threads only.
void wait_until(const std::function<bool()>& done);

namespace detail {
void wait_until_ref(bool (*done)(void* ctx), void* ctx);
}
// The same for a lambda or other callable, without wrapping it in a std::function (a wait is on
// the path of every round trip).
template <class Pred>
  requires(std::is_invocable_r_v<bool, Pred&> && !std::is_same_v<std::remove_cvref_t<Pred>, std::function<bool()>>)
void wait_until(Pred&& done) {
  detail::wait_until_ref(
      [](void* ctx) -> bool { return static_cast<bool>((*static_cast<std::remove_reference_t<Pred>*>(ctx))()); },
      const_cast<void*>(static_cast<const volatile void*>(std::addressof(done))));
}
// True inside a message handler.
bool in_handler() noexcept;

// ---- user-level thread upcalls (set_upcalls): <mdsm/upcalls.hpp>, included at the end --------

// Pauses / resumes this rank's progress thread (no effect on a rank running without one). While
// paused it does not wake at all, so it takes no cycles from the application; messages to this
// rank are then delivered only while one of its application threads waits inside mdsm (or calls
// poll). Use it around phases of plain MPI communication or of computation during which no other
// rank needs an answer from this one -- while paused, a remote lock request, queue operation or
// page/diff request to this rank waits until it enters mdsm, and so does a rank sending it
// messages once it has a window of them outstanding (flow control, see unthrottled_sends). Not
// nested: one resume undoes any number of pauses. Pausing takes effect before the call returns.
// Application threads only.
void pause_progress_thread();
void resume_progress_thread();

// ---- the coherent region -----------------------------------------------------------------------

// Allocates `bytes` of coherent memory. Non-collective: any rank may call it; the address is
// unique in the job and means the same object on every rank (send it in a message). Each rank
// allocates from a small arena of its own, which grows into a pool shared by the ranks (three
// quarters of the region) when an allocation does not fit: one rank may allocate most of the
// region. Growing costs a round trip to rank 0 and one message to every rank, rarely (claims
// grow with what the rank has claimed). Throws MDSM_ERR_OUT_OF_MEMORY when neither has room.
void* alloc(std::size_t bytes);
// Collective: every rank calls it with the same size and gets the same address. Its arena (an
// eighth of the region) grows into the same pool.
void* alloc_collective(std::size_t bytes);
// Frees memory from alloc() (any rank may free it; the owner's arena gets it back).
void free(void* p);
// Collective counterpart of alloc_collective().
void free_collective(void* p);
// Whether p lies in coherent memory (the region, or a range made coherent below).
bool is_coherent(const void* p) noexcept;

// Collective: [addr, addr + bytes), memory the program has at the same address on every rank
// (its globals, in one alignas(4096) object: docs/PORTING.md), becomes coherent in place and
// holds rank 0's bytes; the others fetch pages from rank 0 at first access. Unit aligned; not to
// be touched while the call runs; never freed; private again (each rank's copy) after finalize.
// Room: MDSM_MAKE_COHERENT_MAX (64 MiB). Errors, on every rank alike: MDSM_ERR_MISMATCH (ranks
// passed different ranges: link with -no-pie or use mdsmrun --no-aslr), MDSM_ERR_INVALID_ARGUMENT
// (misaligned, empty, overlapping mdsm's regions or an earlier range, not mapped),
// MDSM_ERR_OUT_OF_MEMORY (no room left).
void make_coherent(void* addr, std::size_t bytes);
template <class T>
void make_coherent(T& object) {
  static_assert(std::is_trivially_copyable_v<T>, "coherent memory holds trivially copyable objects");
  make_coherent(static_cast<void*>(&object), sizeof object);
}

namespace detail {
// n * size, or an error (MDSM_ERR_OUT_OF_MEMORY, naming `what`) if that does not fit in size_t.
std::size_t array_bytes(std::size_t n, std::size_t size, const char* what);
}  // namespace detail

// n objects of T; MDSM_ERR_OUT_OF_MEMORY if n * sizeof(T) overflows.
template <class T>
T* alloc_array(std::size_t n) {
  static_assert(std::is_trivially_copyable_v<T>, "coherent memory holds trivially copyable objects");
  return static_cast<T*>(alloc(detail::array_bytes(n, sizeof(T), "alloc_array")));
}
template <class T>
T* alloc_collective_array(std::size_t n) {
  static_assert(std::is_trivially_copyable_v<T>, "coherent memory holds trivially copyable objects");
  return static_cast<T*>(alloc_collective(detail::array_bytes(n, sizeof(T), "alloc_collective_array")));
}

// Collective garbage collection of consistency metadata (also a global barrier).
void gc();
// A global barrier collects garbage when some rank holds more than this many bytes of
// consistency metadata (0: never). MDSM_GC_THRESHOLD if set; otherwise the larger of 64 MiB and
// the bytes allocated collectively (it grows with alloc_collective: twins alone reach the data's
// size when a program writes all of it between barriers). Once set here it stays. The threshold
// is this rank's: each rank compares its own metadata with its own threshold and asks for the
// collection itself, so setting it on one rank lets that rank start collections for all; a
// program may change it while it runs.
std::uint64_t gc_threshold();
void set_gc_threshold(std::uint64_t bytes);

// ---- the non-coherent region: <mdsm/noncoherent.hpp>, included at the end -------------------

// ---- coordination (lib/sync): <mdsm/sync.hpp>, included at the end ---------------------------

// ---- statistics ----------------------------------------------------------------------------------

// This rank's counters by name (see docs/RUNNING.md for their meaning).
std::map<std::string, std::uint64_t> statistics();
// One counter of this rank, by name (MDSM_ERR_INVALID_ARGUMENT if there is none); cheap enough
// to call per operation, unlike statistics().
std::uint64_t statistic(std::string_view name);
// Collective: every rank's counters summed.
std::map<std::string, std::uint64_t> statistics_total();
void statistics_reset();
// Turns the time counters (handler_ns, wait_ns and its parts, fault_ns, gc_ns, coherence_ns) on
// or off for this rank. They are on from init when MDSM_STATS asks for a report or
// MDSM_STATS_TIMING=1, else off and zero: their clock reads cost ~15% of a small-message round
// trip. Every other counter is always kept.
void set_statistics_timing(bool on);

}  // namespace mdsm

// Locks, semaphores, condition variables, barriers, work queues.
#include <mdsm/sync.hpp>
// The non-coherent region and its one-sided operations (nc_alloc, get/put, atomics).
#include <mdsm/noncoherent.hpp>
// The seam for user-level thread schedulers (set_upcalls); mdsm's own is <mdsm/fibers.hpp>.
#include <mdsm/upcalls.hpp>
