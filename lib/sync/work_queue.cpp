// The work queue / work stack (CarlOS): a fixed manager stores the enqueued RELEASE messages and
// forwards them to dequeuers; it never accepts them, so a consumer becomes consistent with the
// producer of the item it gets (and what that producer had seen), not with the manager.
//
//   push(item)  RELEASE {id, item bytes} to the manager (asynchronous; also from the manager).
//   pop()       REQUEST to the manager (handled in place on the manager), which forwards the
//               oldest (FIFO) or newest (LIFO) stored item, or remembers the waiter. LIFO_LOCAL:
//               the newest item the popping rank pushed itself, else the newest of all; a rank
//               then keeps working on the data it produced (its item's RELEASE brings it nothing
//               to fetch) and takes others' work only when it has none of its own.
// Termination: when every rank waits in pop() and nothing is stored, the manager answers every
// waiter with a NONE "done" and pop() returns nullopt; the queue is then ready for another round.
// Per-sender order makes this exact for items pushed by application threads: a rank's pushes
// reach the manager before its own pop request does. (Items pushed from message handlers are
// not covered: a handler's push could still be in flight.)
#include "sync/services.hpp"

#include "sync/handlers.hpp"

#include "common/check.hpp"

#include <algorithm>
#include <deque>
#include <iterator>

namespace mdsm::sync {

namespace {

enum op : std::uint32_t { op_push = 1, op_pop = 2, op_done = 3 };

struct queue_state final : object {
  queue_state(std::uint32_t id_, kind k_, int manager_, work_queue::order o)
      : object(id_, k_, manager_), order(o) {}
  const work_queue::order order;
  // Manager (guarded by mu).
  std::deque<stored_message> items;
  std::deque<int> waiters;
  // The manager's own pushes still on their way to it (they travel as messages, its own pop is
  // handled in place, so per-sender order does not cover them): termination waits for them.
  int own_pushes_in_flight = 0;
  // Consumer (guarded by mu).
  bool popping = false;
  int result = 0;  // 0 pending, 1 item, 2 done
  stored_message arrived;
  std::optional<std::vector<std::byte>> kept;  // C API: an item that did not fit, returned next

  const char* busy_reason() const override { return popping ? "waited on" : nullptr; }
  void drain(std::vector<stored_message>& out) override {
    for (auto& m : items) out.push_back(std::move(m));
    items.clear();
  }
};

std::shared_ptr<queue_state> state_of(std::uint32_t id) { return current().find<queue_state>(id, kind::queue); }

void deliver_locked(queue_state& s, int to, stored_message item) {
  services& sv = current();
  if (to == sv.rank()) {
    s.arrived = std::move(item);
    s.result = 1;
  } else {
    item.forward(to);
  }
}

void finish_round_locked(queue_state& s) {
  services& sv = current();
  for (int w : s.waiters) {
    if (w == sv.rank())
      s.result = 2;
    else
      send(w, sv.h_queue_reply, payload_builder(s.id, op_done).bytes(), annotation::none);
  }
  s.waiters.clear();
}

// Manager: matches stored items with waiters, then checks for termination (mu held).
void match_locked(queue_state& s) {
  while (!s.items.empty() && !s.waiters.empty()) {
    const int w = s.waiters.front();
    s.waiters.pop_front();
    auto it = s.order == work_queue::order::fifo ? s.items.begin() : std::prev(s.items.end());
    if (s.order == work_queue::order::lifo_local) {
      // The newest of the waiter's own items, if any (items are few: a scan is cheap next to the
      // message that brought each).
      auto own = std::find_if(s.items.rbegin(), s.items.rend(), [&](const stored_message& m) { return m.origin() == w; });
      if (own != s.items.rend()) it = std::prev(own.base());
    }
    stored_message item = std::move(*it);
    s.items.erase(it);
    deliver_locked(s, w, std::move(item));
  }
  if (s.items.empty() && s.own_pushes_in_flight == 0 && static_cast<int>(s.waiters.size()) == current().size())
    finish_round_locked(s);
}

}  // namespace

void on_queue_push(message& m) {
  auto s = state_of(std::get<header>(read_payload<>(m.payload())).id);
  std::lock_guard lk(s->mu);
  if (is_manager_role(*s, m, current().rank())) {
    if (m.origin() == current().rank()) --s->own_pushes_in_flight;
    s->items.push_back(m.store());
    match_locked(*s);
  } else {  // an item forwarded to this consumer
    s->arrived = m.store();
    s->result = 1;
  }
}

void on_queue_pop(message& m) {
  auto s = state_of(std::get<header>(read_payload<>(m.payload())).id);
  std::lock_guard lk(s->mu);
  s->waiters.push_back(m.origin());
  match_locked(*s);
}

void on_queue_reply(message& m) {
  auto s = state_of(std::get<header>(read_payload<>(m.payload())).id);
  std::lock_guard lk(s->mu);
  s->result = 2;
}

}  // namespace mdsm::sync

namespace mdsm {
using namespace sync;

work_queue::work_queue(order o, int manager) {
  require_application_thread("work_queue::work_queue");
  // Every rank must create the queue with the same order (checked with the manager).
  const std::uint64_t check = o == order::fifo ? 0 : o == order::lifo ? 2 : 4;
  id_ = current().create<queue_state>(kind::queue, manager, check, o)->id;
}

work_queue::~work_queue() {
  if (initialized()) current().destroy(id_);
}

void work_queue::push(std::span<const std::byte> item) {
  auto s = state_of(id_);
  if (s->manager == current().rank()) {
    std::lock_guard lk(s->mu);
    ++s->own_pushes_in_flight;
  }
  send(s->manager, current().h_queue_push, payload_builder(id_, op_push).put_bytes(item).bytes(), annotation::release);
}

std::optional<std::vector<std::byte>> work_queue::pop() {
  require_application_thread("work_queue::pop");
  auto s = state_of(id_);
  services& sv = current();
  {
    std::lock_guard lk(s->mu);
    if (s->kept) {
      auto v = std::move(s->kept);
      s->kept.reset();
      return v;
    }
    if (s->popping)
      detail::fail(MDSM_ERR_BUSY, "work_queue #", id_, ": another thread of rank ", sv.rank(), " is popping");
    s->popping = true;
    s->result = 0;
    if (s->manager == sv.rank()) {
      s->waiters.push_back(sv.rank());
      match_locked(*s);
    } else {
      send(s->manager, sv.h_queue_pop, payload_builder(id_, op_pop).bytes(), annotation::request);
    }
  }
  wait_until([&] {
    std::lock_guard lk(s->mu);
    return s->result != 0 || s->abandoned();
  });
  stored_message item;
  {
    std::lock_guard lk(s->mu);
    if (s->result == 0) {
      s->popping = false;
      s->fail_destroyed("work_queue::pop");
    }
    item = std::move(s->arrived);
    s->popping = false;
    s->result = 0;
  }
  if (!item) return std::nullopt;
  item.accept();
  payload_reader in(item.payload());
  in.get<header>();
  const auto rest = in.rest();
  return std::vector<std::byte>(rest.begin(), rest.end());
}

void work_queue::check_item_size(std::vector<std::byte>& item, std::size_t want) {
  if (item.size() == want) return;
  // Like the C API: the item is not lost; it is what this rank's next pop returns.
  const std::size_t got = item.size();
  queue_keep(id_, std::move(item));
  detail::fail(MDSM_ERR_INVALID_ARGUMENT, "work_queue::pop_value: the item has ", got, " bytes, not ", want,
               "; it is kept for this rank's next pop");
}

}  // namespace mdsm

namespace mdsm::sync {
// The C API's pop keeps an item that does not fit the caller's buffer for the next pop.
void queue_keep(std::uint32_t id, std::vector<std::byte> item) {
  auto s = state_of(id);
  std::lock_guard lk(s->mu);
  s->kept = std::move(item);
}
}  // namespace mdsm::sync
