// lib/sync: the coordination primitives, built only from the public message API (mdsm.hpp) so a
// user can write their own the same way. This header is the shared plumbing: the table of live
// objects, collective creation/destruction, creation by one rank (handles) with lazy state and
// destroy by any rank, and the handlers every primitive's messages use.
//
// Two ways to make an object, one state machine. A collective object (mdsm::mutex, ...) is made
// by every rank at once; a handle's object (mdsm::mutex_handle, ...) by one rank, its creator and
// manager, and by every other rank the first time that rank uses the handle (services::use). The
// per-object state (mutex_state, ...) and its protocol do not know which way it was made; only
// how the id and the manager are chosen and how the object is destroyed differ.
//
// Roles. Every object has a manager rank. Messages to a manager are sent fresh (source ==
// origin); a manager that passes a RELEASE on does so with forward(), which keeps the handler id,
// so a handler tells "I am the manager of this message" from "this was forwarded to me" by
//   is_manager_role(m) := this rank is the manager && m.source() == m.origin().
// Managers never forward to themselves: when the manager is also the receiver it hands the
// message over in-process, so a forwarded message never reaches its manager.
//
// Threads: object state is touched by handlers (progress thread, one at a time) and by the
// application threads that call the object; each object's `mu` protects it. Application threads
// wait only through mdsm::wait_until, with predicates reading state under `mu` briefly, inside an
// `operation` (below), so a wait ends only when its protocol step is done.
#pragma once

#include <mdsm/mdsm.hpp>

#include "common/check.hpp"
#include "common/deferred.hpp"
#include "common/wait_subject.hpp"

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <vector>

namespace mdsm::sync {

enum class kind : std::uint32_t { mutex = 1, semaphore, condition, barrier, queue };
const char* kind_name(kind k) noexcept;

// Object ids. Collective objects count from 0 in creation order (the same on every rank). A
// handle's object carries its creator, which is also its manager:
//   (creator + 1) << 32 | the creator's sequence number,
// so the id is unique in the job without a collective step, 0 (the null handle) is never one, and
// a manager tells a destroyed object of its own (sequence number given out, not in the table) from
// a live one without keeping tombstones.
inline bool is_handle_id(std::uint64_t id) noexcept { return (id >> 32) != 0; }
inline std::uint64_t handle_creator(std::uint64_t id) noexcept { return (id >> 32) - 1; }
inline std::uint32_t handle_sequence(std::uint64_t id) noexcept { return static_cast<std::uint32_t>(id); }
// How an id reads in error messages: "#7" (collective) or "#3.12" (rank 3's 12th handle).
std::string id_text(std::uint64_t id);
// Constructor tag: the state a rank makes on first use of a handle whose manager is another rank.
struct remote_copy {};

// How long a wait on an object another rank destroyed may still complete before it fails
// (object::abandoned): MDSM_DESTROY_GRACE_MS, default 10 s, read when the services start.
inline std::atomic<std::int64_t> g_destroyed_grace_ns{10'000'000'000};

// An object's lock. Handlers take it as well as application threads, so a send made while
// holding it must not wait for flow-control credits: the wait would deliver frames and could run
// such a handler on this thread, which would block on the lock. The holder's sends are therefore
// unthrottled (mdsm::unthrottled_sends); they are bounded anyway, a token, a grant or a request
// per operation. A BasicLockable for std::lock_guard and std::unique_lock.
class object_mutex {
 public:
  void lock() {
    m_.lock();
    unthrottled_.emplace();
  }
  void unlock() {
    unthrottled_.reset();
    m_.unlock();
  }

 private:
  std::mutex m_;
  std::optional<unthrottled_sends> unthrottled_;  // touched only by the holder, on its thread
};

// State common to every object; each primitive derives its own.
struct object {
  object(std::uint64_t id_, kind k_, int manager_) : id(id_), k(k_), manager(manager_) {}
  virtual ~object() = default;
  // Why the object cannot be destroyed now (nullptr: it can). Called with `mu` held.
  virtual const char* busy_reason() const = 0;
  // Stored messages the object still holds at destruction (called with `mu` held); they are
  // accepted, so no RELEASE is dropped (a handle's object, destroyed by a handler of its manager,
  // discards them: nobody can acquire them any more).
  virtual void drain(std::vector<stored_message>& /*out*/) {}
  // A handle's object, at its manager with `mu` held: rank `destroyer` asked to destroy it (no
  // other destroy is under way). Ends, now or later, with services::end_destroy. The default
  // decides from busy_reason() here; a mutex first asks the rank its token is at (mutex.cpp).
  virtual void begin_destroy(int destroyer);
  // Another rank destroyed the object (it tells every rank before waiting for them). A wait of
  // this rank on it may still complete for a while (a barrier departure or a grant from a third
  // rank may be in flight when the notice arrives, on a loaded machine for long); once it has not
  // for g_destroyed_grace_ns, it is taken as never completing: the wait ends with
  // MDSM_ERR_BUSY (fail_destroyed) instead of hanging every rank.
  // A handle's object that was destroyed (`gone`) is abandoned at once.
  bool abandoned() const noexcept {
    if (gone.load(std::memory_order_acquire)) return true;
    if (destroyed_by.load(std::memory_order_acquire) < 0) return false;
    return now_ns() - destroyed_at_ns.load(std::memory_order_relaxed) >
           g_destroyed_grace_ns.load(std::memory_order_relaxed);
  }
  void mark_destroyed(int by) noexcept {  // handlers only (they run one at a time)
    if (destroyed_by.load(std::memory_order_relaxed) >= 0) return;
    destroyed_at_ns.store(now_ns(), std::memory_order_relaxed);
    destroyed_by.store(by, std::memory_order_release);  // publishes destroyed_at_ns
  }
  [[noreturn]] void fail_destroyed(const char* what) const;
  static std::int64_t now_ns() noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  const std::uint64_t id;
  const kind k;
  const int manager;
  mutable object_mutex mu;
  std::atomic<int> destroyed_by{-1};
  std::atomic<std::int64_t> destroyed_at_ns{0};
  // Handles only. The object was destroyed: it is out of this rank's table, and a wait on it
  // ends with MDSM_ERR_INVALID_HANDLE (set by handlers, or by the manager's end_destroy).
  std::atomic<bool> gone{false};
  // Guarded by mu. Manager: the ranks that sent it anything (told when it is destroyed, so they
  // drop their copies), and the rank whose destroy is under way (-1: none).
  std::vector<bool> users;
  int destroyer = -1;
  // Guarded by mu. A destroy this rank asked for: 0 pending or none, else how it ended (services.cpp).
  int destroy_result = 0;
  std::string destroy_reason;
};

// The fixed prefix of every sync message payload.
struct header {
  std::uint64_t id;
  std::uint32_t op;
  std::uint32_t pad;
};
// What a barrier arrival and departure carry after the header (barrier.cpp).
struct barrier_arrival {
  std::uint64_t epoch;
  std::uint32_t participants;
  std::uint32_t collect;  // 1: the sender's metadata passed its own threshold: it asks for a collection
};
struct barrier_departure {
  std::uint64_t epoch;
  std::uint32_t collect;
  std::uint32_t pad;
};

// Builds a payload: the header, then trivially copyable fields, then optional bytes.
class payload_builder {
 public:
  payload_builder(std::uint64_t id, std::uint32_t op) { put(header{id, op, 0}); }
  template <class T>
  payload_builder& put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    return put_bytes(std::as_bytes(std::span<const T, 1>(&v, 1)));
  }
  payload_builder& put_bytes(std::span<const std::byte> b) {
    const std::size_t at = bytes_.size();
    bytes_.resize(at + b.size());
    if (!b.empty()) std::memcpy(bytes_.data() + at, b.data(), b.size());
    return *this;
  }
  std::span<const std::byte> bytes() const { return bytes_; }

 private:
  std::vector<std::byte> bytes_;
};

// Reads a payload written by payload_builder; throws MDSM_ERR_MALFORMED on short input.
class payload_reader {
 public:
  explicit payload_reader(std::span<const std::byte> p) : p_(p) {}
  template <class T>
  T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    need(sizeof(T));
    T v;
    std::memcpy(&v, p_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  std::span<const std::byte> rest() const { return p_.subspan(at_); }

 private:
  // Inline (it is all a decoder needs besides detail::fail), so the fuzz targets build without
  // the rest of the library.
  void need(std::size_t n) const {
    if (p_.size() - at_ < n) detail::fail(MDSM_ERR_MALFORMED, "mdsm: a coordination message is shorter than its fields");
  }
  std::span<const std::byte> p_;
  std::size_t at_ = 0;
};

// Decodes a payload laid out as the header, then Fields... (trailing bytes, such as a queue item,
// are the message's own): every handler reads its message with one call, which test/fuzz runs on
// arbitrary bytes. Throws MDSM_ERR_MALFORMED on short input.
template <class... Fields>
std::tuple<header, Fields...> read_payload(std::span<const std::byte> p) {
  payload_reader in(p);
  return std::tuple<header, Fields...>{in.get<header>(), in.get<Fields>()...};  // read in order
}

class services {
 public:
  // Collective over the communicator mdsm was initialized with (registers the handlers).
  explicit services(MPI_Comm comm);
  ~services();
  services(const services&) = delete;
  services& operator=(const services&) = delete;

  // Collective creation: every rank creates the same kinds in the same order (checked, with
  // MDSM_ERR_MISMATCH). The object is visible to handlers before the check completes, so a
  // message sent once any rank has it finds it everywhere.
  template <class T, class... Args>
  std::shared_ptr<T> create(kind k, int manager, std::uint64_t extra_check, Args&&... args) {
    const std::uint32_t id = next_id_;
    const int m = resolve_manager(manager, id);
    auto obj = std::make_shared<T>(id, k, m, std::forward<Args>(args)...);
    publish(obj);
    ++next_id_;
    agree(id, k, m, extra_check);
    return obj;
  }
  // Collective destruction: reports MDSM_ERR_BUSY (deferred) if the object is in use here, then
  // waits for every rank before forgetting it.
  void destroy(std::uint32_t id) noexcept;

  // Creation by this rank alone (a handle's object): this rank is its manager; no message.
  template <class T, class... Args>
  std::shared_ptr<T> create_handle(kind k, Args&&... args) {
    const std::uint64_t id = next_handle_id();
    auto obj = std::make_shared<T>(id, k, rank_, std::forward<Args>(args)...);
    obj->users.assign(static_cast<std::size_t>(size_), false);
    publish(obj);
    return obj;
  }
  // Destroy of a handle's object, by any rank (application thread): asks the manager, which
  // destroys it if no rank uses it (else MDSM_ERR_BUSY, and the object stays as it was) and tells
  // the ranks that used it. Use after destroy: MDSM_ERR_INVALID_HANDLE.
  void destroy_handle(std::shared_ptr<object> o, const char* what);
  // Manager, `o.mu` held: ends the destroy begun by object::begin_destroy (busy == nullptr: done;
  // the object leaves the table and its stored messages are discarded; else it is `busy` on rank
  // `where` and stays as it was).
  void end_destroy(object& o, const char* busy, int where);

  // The object an application thread operates on: a collective object, or a handle's object,
  // made here on first use when another rank manages it. MDSM_ERR_INVALID_HANDLE for a handle of
  // another kind, one whose object was destroyed, or one that never was (callers check null ids).
  template <class T>
  std::shared_ptr<T> use(std::uint64_t id, kind k) {
    if (auto o = find_if_present(id); o && o->k == k && !o->gone.load(std::memory_order_acquire))
      return std::static_pointer_cast<T>(o);
    return std::static_pointer_cast<T>(use_slow(id, k, [](std::uint64_t i, kind kk, int manager) -> std::shared_ptr<object> {
      return std::make_shared<T>(i, kk, manager, remote_copy{});
    }));
  }
  // The object a message names, for its handler. A handle's object that is not here (destroyed)
  // is answered instead: the message is disposed of, its origin told (its wait, or if `waited`
  // is false its next call, fails with MDSM_ERR_INVALID_HANDLE), and null returned. A manager
  // notes the sender as a user of a handle's object.
  template <class T>
  std::shared_ptr<T> for_message(message& m, std::uint64_t id, kind k, bool waited = true) {
    return std::static_pointer_cast<T>(for_message_any(m, id, k, waited));
  }

  // Tells `rank` that the handle's object `id` it asked about was destroyed (its wait fails).
  void tell_gone(std::uint64_t id, int rank);
  // Drops this rank's copy of a handle's object (it was destroyed); a wait on it fails. Handlers
  // and application threads, without the object's mu.
  void forget(std::uint64_t id) { forget_here(id, false, nullptr); }

  // The object with this id, or null (no error) if there is none here.
  std::shared_ptr<object> find_if_present(std::uint64_t id) const;
  template <class T>
  std::shared_ptr<T> find(std::uint64_t id, kind k) const {
    return std::static_pointer_cast<T>(find_any(id, k));
  }

  // Handler ids, one per message kind (see the .cpp files for what each carries).
  handler_id h_mutex_request, h_mutex_token, h_mutex_deny;
  handler_id h_sem_release, h_sem_acquire, h_sem_grant;
  handler_id h_cond_wait, h_cond_notify, h_cond_reply;
  handler_id h_barrier_arrive, h_barrier_depart;
  handler_id h_queue_push, h_queue_pop, h_queue_reply;
  handler_id h_destroyed;
  handler_id h_handle;  // a handle's lifetime: destroy request and result, gone, forget (services.cpp)

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  MPI_Comm comm() const noexcept { return comm_; }
  // A collective reduction that keeps mdsm progressing while it waits.
  void allreduce(const void* in, void* out, int count, MPI_Datatype t, MPI_Op op) const;

 private:
  int resolve_manager(int manager, std::uint32_t id) const;
  void publish(std::shared_ptr<object> obj);
  void agree(std::uint32_t id, kind k, int manager, std::uint64_t extra_check);
  std::shared_ptr<object> find_any(std::uint64_t id, kind k) const;
  std::uint64_t next_handle_id();
  using make_fn = std::shared_ptr<object> (*)(std::uint64_t id, kind k, int manager);
  std::shared_ptr<object> use_slow(std::uint64_t id, kind k, make_fn make);
  std::shared_ptr<object> for_message_any(message& m, std::uint64_t id, kind k, bool waited);
  void on_handle(message& m);
  void start_destroy(object& o, int destroyer);  // o.mu held
  void destroy_result(object& o, int destroyer, int result, std::string_view reason);  // o.mu held
  void forget_here(std::uint64_t id, bool only_if_idle, const char* later_error);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 0;
  std::uint32_t next_id_ = 0;  // application thread (creation is collective)
  std::atomic<std::uint32_t> next_handle_seq_{0};  // any application thread
  mutable std::mutex table_mu_;
  std::unordered_map<std::uint64_t, std::shared_ptr<object>> table_;
  // Handles whose destroy this rank asked for, where the manager's answer lands (the object may
  // have left table_ meanwhile, e.g. this rank held the mutex token that the destroy retired).
  std::unordered_map<std::uint64_t, std::shared_ptr<object>> destroying_;
};

// The services of the running mdsm session; throws MDSM_ERR_NOT_INITIALIZED outside one.
services& current();
// Set by the runtime at init (after the message layer is up) and cleared at finalize.
void set_current(services* s) noexcept;

// True when `m` reached the object's manager fresh from its sender (see the file comment).
inline bool is_manager_role(const object& o, const message& m, int me) {
  return o.manager == me && m.source() == m.origin();
}

// Fails with `code` and a message when a blocking primitive is used from a handler.
void require_application_thread(const char* what);

// A handle's id, checked before use: MDSM_ERR_INVALID_HANDLE for the null handle (0) and for a
// value that is no handle's id.
std::uint64_t check_handle(std::uint64_t id, const char* what);

// The operations of each primitive on an object id, for the collective classes and the handles
// alike (`what` names the public call in errors).
void mutex_lock(std::uint64_t id, const char* what);
bool mutex_try_lock(std::uint64_t id, const char* what);
void mutex_unlock(std::uint64_t id, const char* what);
bool mutex_held(std::uint64_t id);
// How many mdsm mutexes user-level thread `user_thread` (upcalls::current's answer) holds.
std::size_t mutexes_held_by(void* user_thread);
bool semaphore_acquire(std::uint64_t id, bool is_try, const char* what);
void semaphore_release(std::uint64_t id, long n, const char* what);
void condition_wait(std::uint64_t id, std::uint64_t mutex_id, const char* what);

// Every coordination call (and collective creation) runs as one operation. An error a handler
// recorded earlier (lib/common/deferred.hpp) is thrown when the operation starts, before it
// changes anything; from then on such errors are held, so its sends, accepts and waits do not
// throw them halfway (which left objects marked busy and other ranks waiting forever), and the
// next call reports them. Before it waits for another rank it names what for (about()), for the
// failure detector's report (common/wait_subject.hpp); fast paths that do not wait name nothing.
//
// mutex::unlock does not report an earlier error: it runs in destructors (std::lock_guard), where
// a throw ends the program, and one thrown before it unlocked would keep the lock from every rank.
class operation {
 public:
  enum entry_kind {
    blocking,      // may wait for other ranks: not in a handler; reports an earlier error
    non_blocking,  // reports an earlier error
    releasing,     // reports nothing (unlock)
  };
  explicit operation(const char* what, entry_kind k = blocking) : entry_(what, k), what_(what) {}
  ~operation() {
    if (named_) detail::t_wait_subject = named_subject_.s.outer;
  }
  operation(const operation&) = delete;
  operation& operator=(const operation&) = delete;

  // The object the operation is about to wait on, the rank whose answer it waits for (-1: none)
  // and that rank's role; `detail` adds what only the report needs. May be called again.
  void about(const char* object, std::uint64_t id, int peer = -1, const char* peer_role = nullptr,
             std::string (*detail)(const void*) = nullptr, const void* detail_ctx = nullptr) {
    const detail::wait_subject* outer = named_ ? named_subject_.s.outer : detail::t_wait_subject;
    std::construct_at(&named_subject_.s, detail::wait_subject{what_, object, id, peer, peer_role, detail, detail_ctx, outer});
    detail::t_wait_subject = &named_subject_.s;
    named_ = true;
  }

 private:
  struct entry {
    entry(const char* what, entry_kind k) {
      if (k == blocking) require_application_thread(what);
      if (k != releasing) detail::rethrow_deferred();
    }
  };
  entry entry_;  // first: checks before the hold begins
  detail::hold_deferred hold_;
  const char* what_;
  bool named_ = false;
  // Constructed by about(); until then raw storage, so fast paths that never wait pay nothing
  // for it (wait_subject is trivially destructible).
  union subject_storage {
    subject_storage() {}
    detail::wait_subject s;
  } named_subject_;
};

// Runs body(); if it throws, runs undo() and rethrows, so a call that fails halfway leaves its
// object usable (not marked entered or requested, its local owner free) for the next call.
// try/catch rather than a guard object: nothing to pay on the path that does not throw.
template <class Undo, class Body>
decltype(auto) undo_if_throws(Undo&& undo, Body&& body) {
  try {
    return body();
  } catch (...) {
    undo();
    throw;
  }
}

// A work-queue item popped by this rank that its caller could not take (wrong size): the next
// pop on this rank returns it (work_queue.cpp).
void queue_keep(std::uint32_t id, std::vector<std::byte> item);

}  // namespace mdsm::sync
