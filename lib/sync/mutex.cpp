// The distributed queue lock (TreadMarks/CarlOS), with try_lock by lending.
//
// A token represents the lock; exactly one rank has it (or it is in flight). The manager keeps
// only `last`, the last rank that asked for the lock. lock() on rank r:
//   * token here and free: taken locally, no messages (the lock stays cached at its last holder);
//   * otherwise REQUEST(r) to the manager, which sets last = r and forwards the REQUEST to the
//     previous `last` (or, if that is the manager itself, acts on it in place). There, the token
//     is granted at once with a RELEASE if it is free, or `next = r` is recorded and the grant is
//     sent by unlock(). The REQUEST carries r's vector time, so the grant is tailored to r.
// Messages: an uncontended remote acquire costs 2 (REQUEST, grant) when the manager has the
// token and 3 with the forward; unlock sends nothing unless somebody waits.
//
// try_lock() asks the manager with a "try" REQUEST, forwarded to `last` without changing it. If
// the token is free there and nobody is queued, it is *lent*: the borrower returns it to the
// lender at unlock() (a RELEASE, so the lender's next holder sees the borrower's writes), and the
// lender keeps its place in the queue meanwhile. Otherwise a NONE "deny" answers.
//
// Destroy of a handle's mutex (by any rank): the manager, which alone passes requests to the
// token, holds new ones back and sends a NONE "probe" to `last`, where the token is or is going.
// Per-sender order puts the probe behind every request the manager passed there before, so if the
// token is free there with nobody queued it is idle everywhere: that rank retires it (drops its
// copy) and says so, and the manager destroys the object and answers the held-back requests with
// "gone". Otherwise the reply says why not, and the held-back requests go on as usual.
#include "sync/services.hpp"

#include "sync/handlers.hpp"

#include "common/check.hpp"

#include <atomic>
#include <deque>
#include <iterator>
#include <thread>
#include <unordered_map>
#include <mutex>

namespace mdsm::sync {

namespace {

enum op : std::uint32_t { op_acquire = 1, op_try = 2, op_token = 3, op_deny = 4, op_probe = 5, op_probe_reply = 6 };

// Why a probed token could not be retired (op_probe_reply carries the index).
// Who holds a mutex on this rank: an OS thread, and the user-level thread running on it (upcalls;
// nullptr outside one). Two fibers of one OS thread are different holders: the second waits.
struct owner_id {
  std::thread::id thread;
  void* user = nullptr;
  static owner_id me() { return {std::this_thread::get_id(), detail::current_user_thread()}; }
  friend bool operator==(const owner_id&, const owner_id&) = default;
};

// The mutexes each user-level thread holds, so that a scheduler can refuse to let one end with a
// lock held (mutexes_held_by). Touched only for holders on user-level threads.
std::mutex g_user_held_mu;
std::unordered_map<void*, std::size_t> g_user_held;

void note_holder(const owner_id& o, bool taken) {
  if (o.user == nullptr) return;
  std::lock_guard lk(g_user_held_mu);
  if (taken) {
    ++g_user_held[o.user];
  } else if (auto it = g_user_held.find(o.user); it != g_user_held.end() && --it->second == 0) {
    g_user_held.erase(it);
  }
}

constexpr const char* k_probe_answers[] = {nullptr, "held", "waited on", "lent out", "passing between ranks"};

struct mutex_state final : object {
  // The token starts at the manager. It is set here, before the object is published to the
  // handlers, so a request that arrives while the constructor still runs finds it.
  mutex_state(std::uint64_t id_, kind k_, int manager_, int me) : object(id_, k_, manager_) {
    if (manager_ == me) {
      token = true;
      last = manager_;
    }
  }
  // A handle's mutex on a rank that is not its manager, made on first use: no token here.
  mutex_state(std::uint64_t id_, kind k_, int manager_, remote_copy) : object(id_, k_, manager_) {}
  // All fields guarded by `mu`.
  bool token = false;     // the token is at this rank
  bool held = false;      // an application thread of this rank holds the lock
  bool waiting = false;   // this rank asked for the lock and waits for the token
  bool trying = false;    // a try_lock is out
  int try_result = 0;     // 0 pending, 1 granted (lent), 2 denied
  bool lent = false;      // the token is lent out and will come back
  int lender = -1;        // the token was lent to this rank by `lender`
  bool self_queued = false;  // our own lock() is first in line for the lent token's return
  int next = -1;          // who gets the token at unlock
  int last = -1;          // manager only: the last requester
  stored_message arrived;   // a token (RELEASE) the application thread has yet to accept
  stored_message returned;  // a lent token that came back and was not yet accepted or passed on
  std::atomic<bool> local_owner{false};  // serializes this rank's application threads
  owner_id owner;                        // the application thread that holds it (guarded by mu)
  // Manager, while a destroy probe is out: the requests held back meanwhile (the message to pass
  // on, or none for this rank's own request), in arrival order.
  struct held_request {
    int requester;
    bool is_try;
    stored_message msg;
  };
  std::deque<held_request> held_back;

  const char* busy_reason() const override {
    if (held) return "held";
    if (waiting || trying) return "waited on";
    if (lent) return "lent out";
    return nullptr;
  }
  bool free_here() const { return token && !held && !waiting && !lent; }
  void drain(std::vector<stored_message>& out) override {
    if (arrived) out.push_back(std::move(arrived));
    if (returned) out.push_back(std::move(returned));
  }
  void begin_destroy(int destroyer) override;
};

void set_owner_locked(mutex_state& s) {
  s.owner = owner_id::me();
  note_holder(s.owner, true);
}

std::shared_ptr<mutex_state> state_of(std::uint64_t id) { return current().use<mutex_state>(id, kind::mutex); }

// Sends the token to `to` (mu held). A returned token is passed on as it is (forwarded), so the
// receiver becomes consistent with the borrower that returned it, through this rank's records.
void pass_token_locked(mutex_state& s, int to) {
  services& sv = current();
  s.token = false;
  if (s.returned) {
    s.returned.forward(to);
    s.returned = stored_message();
  } else {
    send(to, sv.h_mutex_token, payload_builder(s.id, op_token).bytes(), annotation::release);
  }
}

// The holder's side of a request (possibly the manager acting in place).
void holder_request_locked(mutex_state& s, int requester, bool is_try) {
  services& sv = current();
  if (is_try) {
    if (s.free_here() && s.next < 0) {
      pass_token_locked(s, requester);
      s.lent = true;
    } else {
      send(requester, sv.h_mutex_deny, payload_builder(s.id, op_deny).bytes(), annotation::none);
    }
    return;
  }
  if (requester == current().rank()) {
    // Our own lock() while the token is lent out (the only way this rank can have the token
    // and not be free for itself): the token's return grants it, see on_mutex_token.
    MDSM_ASSERT(s.lent && s.waiting, "a rank queued behind itself");
    s.self_queued = true;
    return;
  }
  if (s.free_here()) {
    pass_token_locked(s, requester);
  } else {
    MDSM_ASSERT(s.next < 0, "a lock holder has two successors");
    s.next = requester;
  }
}

// The manager's side (mu held). `m` (or `held`, one held back during a destroy probe) is the
// message to forward, or both are null when the manager itself requests (then a fresh REQUEST goes
// to the previous requester).
void manager_request_locked(mutex_state& s, int requester, bool is_try, message* m, stored_message* held = nullptr) {
  services& sv = current();
  if (s.destroyer >= 0) {  // a destroy probe is out: decide after its answer
    s.held_back.push_back({requester, is_try, m != nullptr ? m->store() : stored_message()});
    return;
  }
  const int prev = s.last;
  if (!is_try) s.last = requester;
  if (prev == sv.rank()) {
    holder_request_locked(s, requester, is_try);
  } else if (m != nullptr) {
    m->forward(prev);
  } else if (held != nullptr && *held) {
    held->forward(prev);
  } else {
    send(prev, sv.h_mutex_request, payload_builder(s.id, is_try ? op_try : op_acquire).bytes(), annotation::request);
  }
}

// The rank the token is at (or going to) answers a destroy probe (mu held): retires the token if
// it is free with nobody queued (returns 0), else says why not (an index of k_probe_answers).
std::uint32_t retire_locked(mutex_state& s) {
  if (s.held) return 1;
  if (s.waiting || s.trying || s.next >= 0) return 2;
  if (s.lent) return 3;
  if (!s.token) return 4;
  s.token = false;
  if (s.returned) s.returned.discard();  // the last release, which nobody will acquire now
  return 0;
}

// Manager (mu held): the probe's answer, from rank `where`.
void end_probe_locked(mutex_state& s, std::uint32_t answer, int where) {
  services& sv = current();
  std::deque<mutex_state::held_request> held = std::move(s.held_back);
  s.held_back.clear();
  if (answer == 0) {
    sv.end_destroy(s, nullptr, where);
    for (auto& r : held)  // REQUESTs: nothing to dispose of; the manager's own wait sees `gone`
      if (r.requester != sv.rank()) sv.tell_gone(s.id, r.requester);
    return;
  }
  sv.end_destroy(s, k_probe_answers[answer], where);
  for (auto& r : held) manager_request_locked(s, r.requester, r.is_try, nullptr, &r.msg);
}

void mutex_state::begin_destroy(int /*destroyer*/) {
  services& sv = current();
  if (last == sv.rank() || last < 0) {
    end_probe_locked(*this, retire_locked(*this), sv.rank());
  } else {
    send(last, sv.h_mutex_request, payload_builder(id, op_probe).bytes(), annotation::none);
  }
}

// Waits until the token arrives (waiting or trying set), then accepts it. If another rank
// destroyed the mutex meanwhile and nothing comes, fails (the caller forgets its request).
void take_arrived(mutex_state& s, const char* what) {
  bool answered = false;
  wait_until([&] {
    std::lock_guard lk(s.mu);
    answered = static_cast<bool>(s.arrived) || (s.trying && s.try_result == 2);
    return answered || s.abandoned();
  });
  if (!answered) s.fail_destroyed(what);
  stored_message grant;
  {
    std::lock_guard lk(s.mu);
    grant = std::move(s.arrived);
  }
  if (grant) grant.accept();
}

void acquire_local_owner(mutex_state& s) {
  bool expected = false;
  if (s.local_owner.compare_exchange_strong(expected, true, std::memory_order_acquire)) return;
  detail::wait_subject subject{.what = "another thread of this rank to unlock it"};
  detail::waiting_for waiting(subject);
  wait_until([&] {
    bool e = false;
    return s.local_owner.compare_exchange_strong(e, true, std::memory_order_acquire);
  });
}

// A returned token not yet accepted must be, before this rank's thread holds the lock again.
void accept_returned_locked(mutex_state& s, std::unique_lock<object_mutex>& lk) {
  if (!s.returned) return;
  stored_message r = std::move(s.returned);
  lk.unlock();
  r.accept();
  lk.lock();
}

}  // namespace

// ---- handlers --------------------------------------------------------------------------------

void on_mutex_request(message& m) {
  const auto [h] = read_payload<>(m.payload());
  services& sv = current();
  auto s = sv.for_message<mutex_state>(m, h.id, kind::mutex);
  if (!s) return;
  if (h.op == op_probe) {
    std::uint32_t answer;
    {
      std::lock_guard lk(s->mu);
      answer = retire_locked(*s);
    }
    if (answer == 0) sv.forget(h.id);  // the token is gone: so is this rank's copy
    send(m.origin(), sv.h_mutex_deny, payload_builder(h.id, op_probe_reply).put(answer).bytes(), annotation::none);
    return;
  }
  std::lock_guard lk(s->mu);
  const bool is_try = h.op == op_try;
  if (is_manager_role(*s, m, sv.rank()))
    manager_request_locked(*s, m.origin(), is_try, &m);
  else
    holder_request_locked(*s, m.origin(), is_try);
}

void on_mutex_token(message& m) {
  auto s = current().for_message<mutex_state>(m, std::get<header>(read_payload<>(m.payload())).id, kind::mutex);
  if (!s) return;
  std::lock_guard lk(s->mu);
  if (s->lent) {
    // The lent token comes back (there is one token, and this rank owns it: nobody else can
    // grant it here). Whoever asked first gets it: our own lock(), if it was queued here before
    // any other request (self_queued; `next` then waits for our unlock), else the successor in
    // `next` (our own lock(), if any, is queued further down the chain); else it stays here.
    s->lent = false;
    if (s->self_queued) {  // our lock() asked before anyone queued here: it goes first
      s->self_queued = false;
      s->arrived = m.store();
    } else if (s->next >= 0) {
      s->token = true;
      s->returned = m.store();
      const int to = s->next;
      s->next = -1;
      pass_token_locked(*s, to);
    } else {
      s->token = true;
      s->returned = m.store();
    }
  } else if (s->waiting || (s->trying && s->try_result == 0)) {
    if (s->trying) {
      s->try_result = 1;
      s->lender = m.source();
    }
    s->arrived = m.store();
  } else {
    m.accept();
    detail::fail(MDSM_ERR_MALFORMED, "mutex ", id_text(s->id), ": a lock token arrived at rank ", current().rank(),
                 " which neither waits for it nor lent it");
  }
}

void on_mutex_deny(message& m) {
  const auto [h] = read_payload<>(m.payload());
  auto s = current().for_message<mutex_state>(m, h.id, kind::mutex);
  if (!s) return;
  if (h.op == op_probe_reply) {
    const auto [h2, answer] = read_payload<std::uint32_t>(m.payload());
    if (answer >= std::size(k_probe_answers) || s->manager != current().rank())
      detail::fail(MDSM_ERR_MALFORMED, "mutex ", id_text(h.id), ": a malformed destroy probe answer from rank ",
                   m.origin());
    std::lock_guard lk(s->mu);
    if (s->destroyer >= 0) end_probe_locked(*s, answer, m.origin());
    return;
  }
  std::lock_guard lk(s->mu);
  if (s->trying) s->try_result = 2;
}

}  // namespace mdsm::sync

namespace mdsm::sync {

// ---- the operations, for a collective mutex and a handle alike ------------------------------

void mutex_lock(std::uint64_t id, const char* what) {
  operation op(what);
  auto s = state_of(id);
  {
    std::lock_guard lk(s->mu);
    if (s->held && s->owner == owner_id::me())
      detail::fail(MDSM_ERR_BUSY, what, ": mutex ", id_text(id), " is already held by this thread; an mdsm mutex is "
                   "not recursive (unlock it first)");
  }
  acquire_local_owner(*s);
  // Failing before the lock is ours (another rank destroyed it, a malformed grant): forget the
  // request and let this rank's threads lock again.
  const auto forget = [&] {
    std::lock_guard lk(s->mu);
    s->waiting = false;
    s->local_owner.store(false, std::memory_order_release);
  };
  undo_if_throws(forget, [&] {
    // Deliver requests that already arrived before re-taking a cached token: otherwise a rank
    // that locks in a loop could keep the lock from a forwarded request forever.
    poll();
    std::unique_lock lk(s->mu);
    if (s->free_here()) {
      accept_returned_locked(*s, lk);
      s->held = true;
      set_owner_locked(*s);
      return;
    }
    s->waiting = true;
    services& sv = current();
    if (s->manager == sv.rank()) {
      // The manager asks the previous requester itself: that is whose answer it waits for.
      if (s->last != sv.rank()) op.about("mutex", id, s->last, "the rank that asked for it before, which passes it on");
      else op.about("mutex", id);
      manager_request_locked(*s, sv.rank(), false, nullptr);
    } else {
      op.about("mutex", id, s->manager, "its manager, which passes the request to the holder");
      send(s->manager, sv.h_mutex_request, payload_builder(id, op_acquire).bytes(), annotation::request);
    }
    lk.unlock();
    take_arrived(*s, what);
    lk.lock();
    s->waiting = false;
    s->token = true;
    s->held = true;
    set_owner_locked(*s);
  });
}

bool mutex_try_lock(std::uint64_t id, const char* what) {
  operation op(what);
  auto s = state_of(id);
  bool expected = false;
  if (!s->local_owner.compare_exchange_strong(expected, true, std::memory_order_acquire)) return false;
  const auto forget = [&] {
    std::lock_guard lk(s->mu);
    s->trying = false;
    s->try_result = 0;
    s->local_owner.store(false, std::memory_order_release);
  };
  return undo_if_throws(forget, [&] {
    std::unique_lock lk(s->mu);
    if (s->free_here()) {
      accept_returned_locked(*s, lk);
      s->held = true;
      set_owner_locked(*s);
      return true;
    }
    if (s->token || s->lent) {  // held here, or lent out: not free without waiting
      s->local_owner.store(false, std::memory_order_release);
      return false;
    }
    s->trying = true;
    s->try_result = 0;
    services& sv = current();
    op.about("mutex", id, s->manager, "its manager, which passes the request to the holder");
    if (s->manager == sv.rank())
      manager_request_locked(*s, sv.rank(), true, nullptr);
    else
      send(s->manager, sv.h_mutex_request, payload_builder(id, op_try).bytes(), annotation::request);
    lk.unlock();
    take_arrived(*s, what);
    lk.lock();
    const bool got = s->try_result == 1;
    s->trying = false;
    s->try_result = 0;
    if (got) {
      s->token = true;
      s->held = true;
      set_owner_locked(*s);
    } else {
      s->local_owner.store(false, std::memory_order_release);
    }
    return got;
  });
}

void mutex_unlock(std::uint64_t id, const char* what) {
  operation op(what, operation::releasing);
  auto s = state_of(id);
  std::lock_guard lk(s->mu);
  if (!s->held)
    detail::fail(MDSM_ERR_NOT_HELD, what, ": mutex ", id_text(id), " is not held by rank ", current().rank(),
                 "; unlock only a mutex this rank locked");
  s->held = false;
  note_holder(s->owner, false);
  s->owner = {};
  if (s->lender >= 0) {
    const int to = s->lender;
    s->lender = -1;
    MDSM_ASSERT(s->next < 0, "a borrowed lock has a successor");
    pass_token_locked(*s, to);
  } else if (s->next >= 0) {
    const int to = s->next;
    s->next = -1;
    pass_token_locked(*s, to);
  }
  s->local_owner.store(false, std::memory_order_release);
}

std::size_t mutexes_held_by(void* user_thread) {
  std::lock_guard lk(g_user_held_mu);
  auto it = g_user_held.find(user_thread);
  return it == g_user_held.end() ? 0 : it->second;
}

bool mutex_held(std::uint64_t id) {
  auto s = state_of(id);
  std::lock_guard lk(s->mu);
  return s->held;
}

}  // namespace mdsm::sync

namespace mdsm {
using namespace sync;

// ---- the collective mutex --------------------------------------------------------------------

mutex::mutex() : mutex(-1) {}

mutex::mutex(int manager) {
  operation op("mutex::mutex");
  auto s = current().create<mutex_state>(kind::mutex, manager, 0, current().rank());
  id_ = static_cast<std::uint32_t>(s->id);
}

mutex::~mutex() {
  if (initialized()) current().destroy(id_);
}

void mutex::lock() { mutex_lock(id_, "mutex::lock"); }
bool mutex::try_lock() { return mutex_try_lock(id_, "mutex::try_lock"); }
void mutex::unlock() { mutex_unlock(id_, "mutex::unlock"); }
bool mutex::held() const { return mutex_held(id_); }

// ---- a handle's mutex ------------------------------------------------------------------------

mutex_handle mutex_handle::create() {
  operation op("mutex_handle::create", operation::non_blocking);
  services& sv = current();
  mutex_handle h;
  h.id_ = sv.create_handle<mutex_state>(kind::mutex, sv.rank())->id;
  return h;
}

void mutex_handle::destroy() const {
  operation op("mutex_handle::destroy");
  check_handle(id_, "mutex_handle::destroy");
  current().destroy_handle(state_of(id_), "mutex_handle::destroy");
}

void mutex_handle::lock() const { mutex_lock(check_handle(id_, "mutex_handle::lock"), "mutex_handle::lock"); }
bool mutex_handle::try_lock() const {
  return mutex_try_lock(check_handle(id_, "mutex_handle::try_lock"), "mutex_handle::try_lock");
}
void mutex_handle::unlock() const {
  mutex_unlock(check_handle(id_, "mutex_handle::unlock"), "mutex_handle::unlock");
}
bool mutex_handle::held() const { return mutex_held(check_handle(id_, "mutex_handle::held")); }

}  // namespace mdsm
