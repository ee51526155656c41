// A condition variable for mdsm::mutex (Mesa semantics).
//
// wait(m): a REQUEST registers this rank with the manager and is acknowledged (NONE) before the
// mutex is released. The acknowledgement closes a race: without it a notifier that acquires the
// mutex after us could reach the manager before our registration (messages from different
// senders are not ordered) and the wake-up would be lost. Then the mutex is unlocked, a NONE
// wake-up is awaited, and the mutex is locked again. Consistency flows through the mutex, so the
// condition variable's own messages are all non-synchronizing.
// Several threads (or fibers) of one rank may wait at once: each wait takes a ticket, registers
// once, and waits for as many acks and wake-ups to have reached this rank as its ticket says --
// the manager answers one rank's registrations in the order they came (per-sender order) and
// wakes its waiters in that order too (FIFO), so the k-th ack and the k-th wake-up are ticket k's.
// notify_one/notify_all: a NONE message to the manager, which wakes one or all registered ranks.
#include "sync/services.hpp"

#include "sync/handlers.hpp"

#include "common/check.hpp"

#include <deque>
#include <utility>

namespace mdsm::sync {

namespace {

enum op : std::uint32_t { op_wait = 1, op_ack = 2, op_wake = 3, op_notify_one = 4, op_notify_all = 5 };

struct condition_state final : object {
  using object::object;
  condition_state(std::uint64_t id_, kind k_, int manager_, remote_copy) : object(id_, k_, manager_) {}
  std::deque<int> waiters;  // manager: registered ranks, in order (guarded by mu)
  // This rank's waits (guarded by mu): tickets taken, acks and wake-ups received, waits ended.
  std::uint64_t tickets = 0, acks = 0, wakes = 0, ended = 0;

  const char* busy_reason() const override {
    if (ended != tickets || !waiters.empty()) return "waited on";
    return nullptr;
  }
};

std::shared_ptr<condition_state> state_of(std::uint64_t id) {
  return current().use<condition_state>(id, kind::condition);
}

// Delivers a reply to this rank (mu held).
void reply_locked(condition_state& s, int to, op o) {
  services& sv = current();
  if (to == sv.rank()) {
    ++(o == op_ack ? s.acks : s.wakes);
  } else {
    send(to, sv.h_cond_reply, payload_builder(s.id, o).bytes(), annotation::none);
  }
}

void notify_locked(condition_state& s, bool all) {
  while (!s.waiters.empty()) {
    const int w = s.waiters.front();
    s.waiters.pop_front();
    reply_locked(s, w, op_wake);
    if (!all) break;
  }
}

// Waits until `count` (acks or wakes) reaches `ticket`. False if another rank destroyed the
// condition variable and it never did (the caller fails, and ends its wait on the way out).
bool wait_count(condition_state& s, const std::uint64_t& count, std::uint64_t ticket) {
  bool reached = false;
  wait_until([&] {
    std::lock_guard lk(s.mu);
    reached = count >= ticket;
    return reached || s.abandoned();
  });
  return reached;
}

void notify(std::uint64_t id, bool all) {
  services& sv = current();
  // A handle's manager is in its id: a rank that only notifies needs no state of its own.
  if (is_handle_id(id) && handle_creator(id) != static_cast<std::uint64_t>(sv.rank())) {
    send(static_cast<int>(handle_creator(id)), sv.h_cond_notify,
         payload_builder(id, all ? op_notify_all : op_notify_one).bytes(), annotation::none);
    return;
  }
  auto s = state_of(id);
  std::lock_guard lk(s->mu);
  if (s->manager == sv.rank())
    notify_locked(*s, all);
  else
    send(s->manager, sv.h_cond_notify, payload_builder(id, all ? op_notify_all : op_notify_one).bytes(),
         annotation::none);
}

}  // namespace

void on_cond_wait(message& m) {
  auto s = current().for_message<condition_state>(m, std::get<header>(read_payload<>(m.payload())).id, kind::condition);
  if (!s) return;
  std::lock_guard lk(s->mu);
  s->waiters.push_back(m.origin());
  reply_locked(*s, m.origin(), op_ack);
}

void on_cond_notify(message& m) {
  const auto [h] = read_payload<>(m.payload());
  auto s = current().for_message<condition_state>(m, h.id, kind::condition, false);
  if (!s) return;
  std::lock_guard lk(s->mu);
  notify_locked(*s, h.op == op_notify_all);
}

void on_cond_reply(message& m) {
  const auto [h] = read_payload<>(m.payload());
  auto s = current().for_message<condition_state>(m, h.id, kind::condition);
  if (!s) return;
  std::lock_guard lk(s->mu);
  ++(h.op == op_ack ? s->acks : s->wakes);
}

}  // namespace mdsm::sync

namespace mdsm::sync {

// The wait, on the ids of a condition variable and a mutex (collective or handles alike).
void condition_wait(std::uint64_t id_, std::uint64_t mutex_id, const char* what) {
  operation op(what);
  if (!mutex_held(mutex_id))
    detail::fail(MDSM_ERR_NOT_HELD, what, ": mutex ", id_text(mutex_id),
                 " is not held by this rank; lock it before waiting");
  auto s = state_of(id_);
  services& sv = current();
  std::uint64_t ticket;
  {
    std::lock_guard lk(s->mu);
    ticket = ++s->tickets;
  }
  bool ended = false;
  const auto end = [&] {
    std::lock_guard lk(s->mu);
    if (!std::exchange(ended, true)) ++s->ended;
  };
  const auto forget = [&] { end(); };
  undo_if_throws(forget, [&] {
    // The answers come from the manager: its ack, then its wake-up when someone notifies.
    op.about("condition_variable", id_, s->manager, "its manager, which wakes waiters when notified");
    {
      std::lock_guard lk(s->mu);
      if (s->manager == sv.rank()) {
        s->waiters.push_back(sv.rank());
        ++s->acks;
      } else {
        send(s->manager, sv.h_cond_wait, payload_builder(id_, op_wait).bytes(), annotation::request);
      }
    }
    if (!wait_count(*s, s->acks, ticket)) s->fail_destroyed(what);
    mutex_unlock(mutex_id, what);
    if (!wait_count(*s, s->wakes, ticket)) {
      mutex_lock(mutex_id, what);  // returns with the mutex held, as it would have (or fails if it is gone as well)
      s->fail_destroyed(what);
    }
    end();
    mutex_lock(mutex_id, what);
  });
}

}  // namespace mdsm::sync

namespace mdsm {
using namespace sync;

condition_variable::condition_variable() : condition_variable(-1) {}

condition_variable::condition_variable(int manager) {
  operation op("condition_variable::condition_variable");
  id_ = static_cast<std::uint32_t>(current().create<condition_state>(kind::condition, manager, 0)->id);
}

condition_variable::~condition_variable() {
  if (initialized()) current().destroy(id_);
}

void condition_variable::wait(mutex& m) { condition_wait(id_, m.id(), "condition_variable::wait"); }

void condition_variable::notify_one() {
  operation op("condition_variable::notify_one", operation::non_blocking);
  notify(id_, false);
}
void condition_variable::notify_all() {
  operation op("condition_variable::notify_all", operation::non_blocking);
  notify(id_, true);
}

condition_handle condition_handle::create() {
  operation op("condition_handle::create", operation::non_blocking);
  condition_handle h;
  h.id_ = current().create_handle<condition_state>(kind::condition)->id;
  return h;
}

void condition_handle::destroy() const {
  operation op("condition_handle::destroy");
  current().destroy_handle(state_of(check_handle(id_, "condition_handle::destroy")), "condition_handle::destroy");
}

void condition_handle::wait(mutex_handle m) const {
  condition_wait(check_handle(id_, "condition_handle::wait"), check_handle(m.id(), "condition_handle::wait"),
                 "condition_handle::wait");
}
void condition_handle::notify_one() const {
  operation op("condition_handle::notify_one", operation::non_blocking);
  notify(check_handle(id_, "condition_handle::notify_one"), false);
}
void condition_handle::notify_all() const {
  operation op("condition_handle::notify_all", operation::non_blocking);
  notify(check_handle(id_, "condition_handle::notify_all"), true);
}

}  // namespace mdsm
