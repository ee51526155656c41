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

// ---- coordination (lib/sync) ------------------------------------------------------------
//
// Drop-in primitives built only from annotated messages (users can build their own the same
// way). Each comes in two forms with the same protocol and costs:
//   * a collective object (mdsm::mutex, semaphore, condition_variable, barrier, work_queue):
//     every rank constructs it, in the same order relative to other mdsm objects, and destroys
//     it collectively once unused (a wait of another rank on an object being destroyed ends with
//     MDSM_ERR_BUSY, docs/SYNC.md). Its manager rank is its id modulo the number of ranks, unless
//     given;
//   * a handle (mdsm::mutex_handle, semaphore_handle, condition_handle, barrier_handle) for an
//     object created by ONE rank, its manager, without any collective step: a small trivially
//     copyable value to keep in coherent memory (a lock inside a shared struct, one per tree
//     cell) or send in a message; every rank may use it, and a rank that never saw it before
//     sets up its side on first use. Any rank may destroy it once no rank uses it; using it
//     afterwards, or using a null (default or zeroed) handle, throws MDSM_ERR_INVALID_HANDLE.
// Blocking operations drive progress while they wait; none may be called from a message handler.

// A distributed queue lock (TreadMarks/CarlOS): acquire sends a REQUEST to the manager, which
// forwards it to the last requester; the lock is granted with a RELEASE tailored to the
// requester's vector time, so acquiring makes the previous holders' writes visible. Releasing
// sends nothing unless someone is waiting. Meets the standard Lockable requirements
// (std::lock_guard, std::unique_lock, std::scoped_lock work with it).
class mutex {
 public:
  mutex();  // collective
  explicit mutex(int manager);
  ~mutex();  // collective; reports MDSM_ERR_BUSY if held or waited on
  mutex(const mutex&) = delete;
  mutex& operator=(const mutex&) = delete;
  void lock();
  bool try_lock();  // true if acquired without waiting for a remote holder
  void unlock();    // throws MDSM_ERR_NOT_HELD if this rank does not hold it
  bool held() const;
  std::uint32_t id() const noexcept { return id_; }

 private:
  std::uint32_t id_;
};

// A counting semaphore: release() is a RELEASE to the manager, which hands it to a waiting
// acquire() (so the acquirer sees the releaser's writes); permits given at creation carry none.
class semaphore {
 public:
  explicit semaphore(long initial = 0, int manager = -1);  // collective
  ~semaphore();
  semaphore(const semaphore&) = delete;
  semaphore& operator=(const semaphore&) = delete;
  void acquire();
  bool try_acquire();
  void release(long n = 1);
  std::uint32_t id() const noexcept { return id_; }

 private:
  std::uint32_t id_;
};

// A condition variable used with an mdsm::mutex (Mesa semantics: re-check the condition).
// Waiting without holding the mutex throws MDSM_ERR_NOT_HELD.
class condition_variable {
 public:
  condition_variable();  // collective
  explicit condition_variable(int manager);
  ~condition_variable();
  condition_variable(const condition_variable&) = delete;
  condition_variable& operator=(const condition_variable&) = delete;
  void wait(mutex& m);
  template <class Pred>
  void wait(mutex& m, Pred pred) {
    while (!pred()) wait(m);
  }
  void wait(std::unique_lock<mutex>& lk) { wait(*lk.mutex()); }
  template <class Pred>
  void wait(std::unique_lock<mutex>& lk, Pred pred) {
    while (!pred()) wait(lk);
  }
  void notify_one();
  void notify_all();
  std::uint32_t id() const noexcept { return id_; }

 private:
  std::uint32_t id_;
};

// A barrier: arrivals are RELEASE_NT messages to the manager, which accepts them together;
// departures are RELEASE messages tailored to each participant. After it, every participant
// sees every participant's writes made before arriving. A global barrier is also where
// garbage collection runs when consistency metadata exceeds MDSM_GC_THRESHOLD.
class barrier {
 public:
  barrier();  // collective; all ranks participate
  // Collective over all ranks; only `participants` call arrive_and_wait (MDSM_ERR_MISMATCH if
  // ranks pass different lists). The manager is the first participant.
  explicit barrier(std::span<const int> participants);
  ~barrier();
  barrier(const barrier&) = delete;
  barrier& operator=(const barrier&) = delete;
  // MDSM_ERR_INVALID_ARGUMENT if this rank is not a participant.
  void arrive_and_wait();
  std::uint32_t id() const noexcept { return id_; }

 private:
  std::uint32_t id_;
};

// ---- handles: objects created by one rank -------------------------------------------------------
//
// A handle is the object's id (creator rank and that rank's sequence number), nothing more: copy
// it freely, compare it, store it in coherent memory (a zero-filled handle is the null handle).
// create() is non-collective and sends nothing; the creating rank is the object's manager.
// destroy() may be called by any rank, once: it asks the manager, which destroys the object if
// no rank holds or waits on it, or else throws MDSM_ERR_BUSY and leaves the object as it was.
// Ranks that used the object drop their side of it. Errors: MDSM_ERR_INVALID_HANDLE for a null
// handle, a destroyed object (where detectable: an operation that asks the manager, or a wait,
// fails; a release or notify sent after the destroy is reported by the sender's next call).

// A lock as mdsm::mutex (the same distributed queue lock: a re-lock on the rank that last held it
// sends nothing). Lockable: std::lock_guard<mdsm::mutex_handle> etc. work with it.
class mutex_handle {
 public:
  constexpr mutex_handle() noexcept = default;  // the null handle
  static mutex_handle create();                 // non-collective; this rank manages it
  void destroy() const;  // any rank; MDSM_ERR_BUSY if held or waited on (it then stays usable)
  void lock() const;
  bool try_lock() const;
  void unlock() const;  // MDSM_ERR_NOT_HELD if this rank does not hold it
  bool held() const;
  std::uint64_t id() const noexcept { return id_; }
  explicit operator bool() const noexcept { return id_ != 0; }
  friend bool operator==(const mutex_handle&, const mutex_handle&) = default;

 private:
  std::uint64_t id_ = 0;
};

// A counting semaphore as mdsm::semaphore.
class semaphore_handle {
 public:
  constexpr semaphore_handle() noexcept = default;
  static semaphore_handle create(long initial = 0);  // non-collective; MDSM_ERR_INVALID_ARGUMENT if negative
  void destroy() const;  // any rank; MDSM_ERR_BUSY while a rank waits in acquire()
  void acquire() const;
  bool try_acquire() const;
  void release(long n = 1) const;
  std::uint64_t id() const noexcept { return id_; }
  explicit operator bool() const noexcept { return id_ != 0; }
  friend bool operator==(const semaphore_handle&, const semaphore_handle&) = default;

 private:
  std::uint64_t id_ = 0;
};

// A condition variable as mdsm::condition_variable, used with a mutex_handle.
class condition_handle {
 public:
  constexpr condition_handle() noexcept = default;
  static condition_handle create();  // non-collective
  void destroy() const;               // any rank; MDSM_ERR_BUSY while a rank waits on it
  void wait(mutex_handle m) const;    // MDSM_ERR_NOT_HELD if this rank does not hold m
  template <class Pred>
  void wait(mutex_handle m, Pred pred) const {
    while (!pred()) wait(m);
  }
  void notify_one() const;
  void notify_all() const;
  std::uint64_t id() const noexcept { return id_; }
  explicit operator bool() const noexcept { return id_ != 0; }
  friend bool operator==(const condition_handle&, const condition_handle&) = default;

 private:
  std::uint64_t id_ = 0;
};

// A barrier for `participants` arrivals (pthread_barrier_t): any ranks may arrive, and every
// `participants` arrivals, in the order they reach the manager, make one episode; after it each
// of them sees the writes every one of them made before arriving. Arrivals are RELEASE_NT to the
// manager; when the manager takes part in an episode it accepts them and sends the departures
// (2(N-1) messages, as mdsm::barrier); when it does not, it forwards them to the episode's last
// arrival, which does (3N-1). One thread per rank per episode.
class barrier_handle {
 public:
  constexpr barrier_handle() noexcept = default;
  static barrier_handle create(int participants);  // non-collective; MDSM_ERR_INVALID_ARGUMENT unless >= 1
  void destroy() const;  // any rank; MDSM_ERR_BUSY while an episode has begun and not ended
  void arrive_and_wait() const;
  std::uint64_t id() const noexcept { return id_; }
  explicit operator bool() const noexcept { return id_ != 0; }
  friend bool operator==(const barrier_handle&, const barrier_handle&) = default;

 private:
  std::uint64_t id_ = 0;
};

static_assert(std::is_trivially_copyable_v<mutex_handle> && sizeof(mutex_handle) == 8);
static_assert(std::is_trivially_copyable_v<barrier_handle> && sizeof(barrier_handle) == 8);

// A work queue (FIFO) or work stack (LIFO) kept by a manager that only stores and forwards
// RELEASE messages and never accepts them: a consumer becomes consistent with the producer of
// the item it gets, not with the manager. push() is asynchronous. pop() blocks until an item
// arrives, or returns nothing once every participant is waiting on the empty queue
// (termination detection).
class work_queue {
 public:
  // fifo: the oldest item first; lifo: the newest (a work stack); lifo_local: the newest item
  // the popping rank pushed itself, else the newest of all (a work stack with locality: a rank
  // keeps working on ranges whose data it wrote, and steals others' only when it has none).
  enum class order { fifo, lifo, lifo_local };
  explicit work_queue(order o = order::fifo, int manager = -1);  // collective; all ranks participate
  ~work_queue();
  work_queue(const work_queue&) = delete;
  work_queue& operator=(const work_queue&) = delete;
  void push(std::span<const std::byte> item);
  template <class T>
  void push_value(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    push(std::as_bytes(std::span<const T, 1>(&v, 1)));
  }
  // The next item, or nullopt when the computation has terminated.
  std::optional<std::vector<std::byte>> pop();
  template <class T>
  std::optional<T> pop_value() {
    static_assert(std::is_trivially_copyable_v<T>);
    auto item = pop();
    if (!item) return std::nullopt;
    check_item_size(*item, sizeof(T));  // a mismatch keeps the item for the next pop and throws
    T v;
    std::memcpy(&v, item->data(), sizeof(T));
    return v;
  }
  std::uint32_t id() const noexcept { return id_; }

 private:
  void check_item_size(std::vector<std::byte>& item, std::size_t want);
  std::uint32_t id_;
};

// ---- statistics ----------------------------------------------------------------------------------

// This rank's counters by name (see docs/RUNNING.md for their meaning).
std::map<std::string, std::uint64_t> statistics();
// One counter of this rank, by name (MDSM_ERR_INVALID_ARGUMENT if there is none); cheap enough
// to call per operation, unlike statistics().
std::uint64_t statistic(std::string_view name);
// Collective: every rank's counters summed.
std::map<std::string, std::uint64_t> statistics_total();
void statistics_reset();
// Turns the time counters (handler_ns, wait_ns) on or off for this rank. They are on from init
// when MDSM_STATS asks for a report or MDSM_STATS_TIMING=1, else off and zero: their clock reads
// cost ~15% of a small-message round trip. Every other counter is always kept.
void set_statistics_timing(bool on);

}  // namespace mdsm

// The non-coherent region and its one-sided operations (nc_alloc, get/put, atomics).
#include <mdsm/noncoherent.hpp>
// The seam for user-level thread schedulers (set_upcalls); mdsm's own is <mdsm/fibers.hpp>.
#include <mdsm/upcalls.hpp>
