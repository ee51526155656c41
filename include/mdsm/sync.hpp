// The coordination objects of mdsm's C++ API (included by <mdsm/mdsm.hpp>, which declares
// mdsm::annotation, mdsm::message and the rest): locks, semaphores, condition variables,
// barriers and work queues, collective and as handles. docs/SYNC.md describes the protocols.
#pragma once

#include <mdsm/error.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <span>
#include <type_traits>
#include <vector>

namespace mdsm {

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
// departures are RELEASE messages tailored to each participant. Two participants send each
// other their arrivals as RELEASE messages instead (no manager). After it, every participant
// sees every participant's writes made before arriving. A global barrier is also where
// garbage collection runs when some rank's consistency metadata exceeds its gc_threshold().
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

}  // namespace mdsm
