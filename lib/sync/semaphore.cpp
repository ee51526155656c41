// A counting semaphore whose permits carry consistency.
//
// release() sends a RELEASE to the manager, which stores it and hands it on (forward) to an
// acquirer: the acquirer becomes consistent with the releaser, never with the manager, which
// does not accept. Permits given at creation carry no writes and are granted with a NONE message.
// acquire() is a REQUEST to the manager (handled in place on the manager itself); 2 messages
// when a permit is there. try_acquire() gets a NONE "no" instead of waiting.
#include "sync/services.hpp"

#include "sync/handlers.hpp"

#include "common/check.hpp"

#include <algorithm>
#include <deque>
#include <memory>

namespace mdsm::sync {

namespace {

enum op : std::uint32_t { op_release = 1, op_acquire = 2, op_try = 3, op_plain = 4, op_none = 5 };

struct semaphore_state final : object {
  semaphore_state(std::uint64_t id_, kind k_, int manager_, long initial)
      : object(id_, k_, manager_), plain(initial) {}
  semaphore_state(std::uint64_t id_, kind k_, int manager_, remote_copy) : object(id_, k_, manager_), plain(0) {}
  // Manager side (guarded by mu).
  long plain;                              // permits without consistency (the initial ones)
  std::deque<stored_message> permits;      // released permits, oldest first
  struct waiter {
    int rank;
    bool is_try;
  };
  std::deque<waiter> waiters;
  // Acquirer side (guarded by mu): this rank's acquires whose answer was not taken yet, in the
  // order their requests were made (several threads or fibers of a rank may acquire at once).
  struct acquire {
    bool is_try = false;
    bool left = false;  // its caller left with an error: its answer is given back when it comes
    int result = 0;     // 0 pending, 1 granted, 2 none available (try)
    stored_message arrived;
  };
  std::deque<std::shared_ptr<acquire>> acquires;

  const char* busy_reason() const override {
    if (!waiters.empty() || std::any_of(acquires.begin(), acquires.end(), [](const auto& a) { return !a->left; }))
      return "waited on";
    return nullptr;
  }
  void drain(std::vector<stored_message>& out) override {
    for (auto& p : permits) out.push_back(std::move(p));
    permits.clear();
  }
};

std::shared_ptr<semaphore_state> state_of(std::uint64_t id) {
  return current().use<semaphore_state>(id, kind::semaphore);
}

bool grant_locked(semaphore_state& s, int requester);
void grant_waiters_locked(semaphore_state& s);

// A permit granted to an acquire whose caller left with an error goes back to the manager, so
// none is lost (mu held).
void give_back_locked(semaphore_state& s, stored_message permit) {
  services& sv = current();
  if (s.manager == sv.rank()) {
    if (permit) s.permits.push_front(std::move(permit));
    else ++s.plain;
    grant_waiters_locked(s);
    return;
  }
  // Accepted here, its writes travel on with this rank's RELEASE (transitively).
  if (permit) permit.accept();
  send(s.manager, sv.h_sem_release, payload_builder(s.id, op_release).bytes(), annotation::release);
}

// The acquirer's side of an answer (mu held). The manager answers this rank's requests in the
// order they reached it (over one channel, or in process when it is the manager), except that a
// request that must wait is overtaken by later tries, answered at once -- with "none": a request
// waits only while there is no permit. So a permit is the oldest unanswered request's, and a
// "none" the oldest unanswered try's.
void granted_locked(semaphore_state& s, stored_message permit, bool ok) {
  services& sv = current();
  const auto it = std::find_if(s.acquires.begin(), s.acquires.end(),
                               [&](const auto& a) { return a->result == 0 && (ok || a->is_try); });
  if (it == s.acquires.end()) {
    if (permit) permit.accept();  // disposed of, whatever happens next
    detail::fail(MDSM_ERR_MALFORMED, "semaphore ", id_text(s.id), ": rank ", sv.rank(),
                 " got an answer to no acquire of its own");
  }
  semaphore_state::acquire& a = **it;
  if (!a.left) {
    a.arrived = std::move(permit);
    a.result = ok ? 1 : 2;
    return;
  }
  s.acquires.erase(it);
  if (ok) give_back_locked(s, std::move(permit));
}

// Manager: gives `requester` a permit if there is one (mu held). Returns false if none.
bool grant_locked(semaphore_state& s, int requester) {
  services& sv = current();
  if (!s.permits.empty()) {
    stored_message p = std::move(s.permits.front());
    s.permits.pop_front();
    if (requester == sv.rank())
      granted_locked(s, std::move(p), true);
    else
      p.forward(requester);
    return true;
  }
  if (s.plain > 0) {
    --s.plain;
    if (requester == sv.rank())
      granted_locked(s, stored_message(), true);
    else
      send(requester, sv.h_sem_grant, payload_builder(s.id, op_plain).bytes(), annotation::none);
    return true;
  }
  return false;
}

// Manager: grants waiting requesters while permits last (mu held). Each is taken off the queue
// before its grant, which may give a permit back (granted_locked) and so grant the next ones.
void grant_waiters_locked(semaphore_state& s) {
  while (!s.waiters.empty() && (!s.permits.empty() || s.plain > 0)) {
    const int requester = s.waiters.front().rank;
    s.waiters.pop_front();
    grant_locked(s, requester);
  }
}

void request_locked(semaphore_state& s, int requester, bool is_try) {
  if (grant_locked(s, requester)) return;
  if (!is_try) {
    s.waiters.push_back({requester, false});
    return;
  }
  services& sv = current();
  if (requester == sv.rank())
    granted_locked(s, stored_message(), false);
  else
    send(requester, sv.h_sem_grant, payload_builder(s.id, op_none).bytes(), annotation::none);
}

bool acquire_impl(operation& op, std::uint64_t id, bool is_try, const char* what) {
  auto s = state_of(id);
  services& sv = current();
  auto mine = std::make_shared<semaphore_state::acquire>();
  mine->is_try = is_try;
  const auto forget = [&] {
    std::lock_guard lk(s->mu);
    const auto it = std::find(s->acquires.begin(), s->acquires.end(), mine);
    if (it == s->acquires.end()) return;
    if (mine->result == 0) {
      mine->left = true;  // answered later: given back then (granted_locked)
      return;
    }
    s->acquires.erase(it);
    if (mine->result == 1) give_back_locked(*s, std::move(mine->arrived));  // granted, not taken
  };
  return undo_if_throws(forget, [&] {
    op.about("semaphore", id, s->manager, "its manager, which hands out permits");
    {
      // The request is made and its place in the order taken under one hold of mu.
      std::lock_guard lk(s->mu);
      s->acquires.push_back(mine);
      if (s->manager == sv.rank())
        request_locked(*s, sv.rank(), is_try);
      else
        send(s->manager, sv.h_sem_acquire, payload_builder(id, is_try ? op_try : op_acquire).bytes(),
             annotation::request);
    }
    wait_until([&] {
      std::lock_guard lk(s->mu);
      return mine->result != 0 || s->abandoned();
    });
    stored_message permit;
    bool ok;
    {
      std::lock_guard lk(s->mu);
      if (mine->result == 0) s->fail_destroyed(what);
      permit = std::move(mine->arrived);
      ok = mine->result == 1;
      s->acquires.erase(std::find(s->acquires.begin(), s->acquires.end(), mine));
    }
    if (permit) permit.accept();
    return ok;
  });
}

}  // namespace

void on_sem_release(message& m) {
  auto s = current().for_message<semaphore_state>(m, std::get<header>(read_payload<>(m.payload())).id,
                                                  kind::semaphore, false);
  if (!s) return;
  std::lock_guard lk(s->mu);
  if (is_manager_role(*s, m, current().rank())) {
    s->permits.push_back(m.store());
    grant_waiters_locked(*s);
  } else {  // a permit forwarded by the manager to this acquirer
    granted_locked(*s, m.store(), true);
  }
}

void on_sem_acquire(message& m) {
  const auto [h] = read_payload<>(m.payload());
  auto s = current().for_message<semaphore_state>(m, h.id, kind::semaphore);
  if (!s) return;
  std::lock_guard lk(s->mu);
  request_locked(*s, m.origin(), h.op == op_try);
}

void on_sem_grant(message& m) {
  const auto [h] = read_payload<>(m.payload());
  auto s = current().for_message<semaphore_state>(m, h.id, kind::semaphore);
  if (!s) return;
  std::lock_guard lk(s->mu);
  granted_locked(*s, stored_message(), h.op == op_plain);
}

}  // namespace mdsm::sync

namespace mdsm::sync {

bool semaphore_acquire(std::uint64_t id, bool is_try, const char* what) {
  operation op(what);
  return acquire_impl(op, id, is_try, what);
}

void semaphore_release(std::uint64_t id, long n, const char* what) {
  operation op(what, operation::non_blocking);
  if (n < 0) detail::fail(MDSM_ERR_INVALID_ARGUMENT, what, ": n = ", n, " is negative");
  services& sv = current();
  // A handle's manager is in its id: a rank that only releases needs no state of its own.
  const int manager = is_handle_id(id) ? static_cast<int>(handle_creator(id)) : state_of(id)->manager;
  if (is_handle_id(id) && manager == sv.rank()) state_of(id);  // fails at once if destroyed
  for (long i = 0; i < n; ++i)
    send(manager, sv.h_sem_release, payload_builder(id, op_release).bytes(), annotation::release);
}

}  // namespace mdsm::sync

namespace mdsm {
using namespace sync;

semaphore::semaphore(long initial, int manager) {
  operation op("semaphore::semaphore");
  if (initial < 0) detail::fail(MDSM_ERR_INVALID_ARGUMENT, "semaphore: the initial count ", initial, " is negative");
  id_ = static_cast<std::uint32_t>(
      current().create<semaphore_state>(kind::semaphore, manager, static_cast<std::uint64_t>(initial) << 1, initial)->id);
}

semaphore::~semaphore() {
  if (initialized()) current().destroy(id_);
}

void semaphore::acquire() { semaphore_acquire(id_, false, "semaphore::acquire"); }
bool semaphore::try_acquire() { return semaphore_acquire(id_, true, "semaphore::try_acquire"); }
void semaphore::release(long n) { semaphore_release(id_, n, "semaphore::release"); }

semaphore_handle semaphore_handle::create(long initial) {
  operation op("semaphore_handle::create", operation::non_blocking);
  if (initial < 0)
    detail::fail(MDSM_ERR_INVALID_ARGUMENT, "semaphore_handle::create: the initial count ", initial, " is negative");
  semaphore_handle h;
  h.id_ = current().create_handle<semaphore_state>(kind::semaphore, initial)->id;
  return h;
}

void semaphore_handle::destroy() const {
  operation op("semaphore_handle::destroy");
  current().destroy_handle(state_of(check_handle(id_, "semaphore_handle::destroy")), "semaphore_handle::destroy");
}

void semaphore_handle::acquire() const {
  semaphore_acquire(check_handle(id_, "semaphore_handle::acquire"), false, "semaphore_handle::acquire");
}
bool semaphore_handle::try_acquire() const {
  return semaphore_acquire(check_handle(id_, "semaphore_handle::try_acquire"), true, "semaphore_handle::try_acquire");
}
void semaphore_handle::release(long n) const {
  semaphore_release(check_handle(id_, "semaphore_handle::release"), n, "semaphore_handle::release");
}

}  // namespace mdsm
