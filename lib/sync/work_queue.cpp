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
//
// Fair turns. The manager's own pop is served in place, a remote rank's costs it a round trip,
// so with items that take no time the manager took ~99.99% of them. Now the manager's pop waits
// its turn: while a rank that popped this round has been served fewer items than the manager
// and its next request is not in yet, the manager waits -- for at most twice that rank's last
// turnaround (from our forwarding its item to its next request arriving; 200 us to 1 ms). A rank
// that stays away longer has stopped popping for now and counts as inactive until its next
// request. With costly items the requests are in by the time the manager pops again and nobody
// waits; with free ones the ranks take turns. Not for lifo_local, whose point is that each rank
// gets its own items first.
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
      : object(id_, k_, manager_),
        order(o),
        served(static_cast<std::size_t>(current().size())),
        forwarded_ns(served.size()),
        turnaround_ns(served.size(), k_first_turnaround_ns),
        active(served.size(), true) {}
  static constexpr std::int64_t k_first_turnaround_ns = 100'000;  // until one is measured
  // A rank whose next request has not come for this long has stopped popping for now.
  static constexpr std::int64_t k_away_ns = 5'000'000;
  const work_queue::order order;
  // Manager (guarded by mu).
  std::deque<stored_message> items;
  std::deque<int> waiters;
  // The manager's own pushes still on their way to it (they travel as messages, its own pop is
  // handled in place, so per-sender order does not cover them): termination waits for them.
  int own_pushes_in_flight = 0;
  // Manager, fair turns (guarded by mu; per rank, reset every round).
  std::vector<std::uint64_t> served;       // items delivered to each rank this round
  std::vector<std::int64_t> forwarded_ns;  // when the last one was sent to it (0: none yet)
  std::vector<std::int64_t> turnaround_ns;  // from that to its next request, last measured
  // Expected to pop: every rank at the start of a round (a round ends only when all pop), until
  // it stays away past its patience; again when its next request arrives.
  std::vector<bool> active;
  std::int64_t round_start_ns = 0;  // the manager's first pop of the round (0: none yet)
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
  ++s.served[static_cast<std::size_t>(to)];
  if (to == sv.rank()) {
    s.arrived = std::move(item);
    s.result = 1;
  } else {
    s.forwarded_ns[static_cast<std::size_t>(to)] = object::now_ns();
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
  std::fill(s.served.begin(), s.served.end(), 0);
  std::fill(s.forwarded_ns.begin(), s.forwarded_ns.end(), 0);
  std::fill(s.active.begin(), s.active.end(), true);
  s.round_start_ns = 0;
}

// Manager: must its pop wait for some rank that pops this round, is behind the manager and
// whose next request is not in yet (see "Fair turns")? Marks a rank away too long inactive
// (mu held).
bool someone_behind_locked(queue_state& s, int me) {
  if (s.items.empty()) return false;  // nothing to take now: the manager's pop waits in line
  const std::int64_t now = object::now_ns();
  if (s.round_start_ns == 0) s.round_start_ns = now;
  const std::uint64_t mine = s.served[static_cast<std::size_t>(me)];
  for (std::size_t r = 0; r < s.served.size(); ++r) {
    if (static_cast<int>(r) == me || !s.active[r] || s.served[r] >= mine) continue;
    // Away since its last item (a rank not served yet this round: since the manager's first
    // pop, its first request may be on its way). Past k_away_ns it has stopped popping for now
    // (it computes, or does something else): inactive until its next request, not waited for.
    const bool first = s.forwarded_ns[r] == 0;
    const std::int64_t away = now - (first ? s.round_start_ns : s.forwarded_ns[r]);
    if (away > queue_state::k_away_ns) {
      s.active[r] = false;
      continue;
    }
    // Until then the manager may move ahead of it by one item per turn, a turn being twice its
    // last turnaround (200 us - 1 ms: a rank that takes longer per item computes, and waiting
    // longer for it would only idle the manager). So a rank that lost its core for a while, or
    // sits behind a slow network, misses a few turns, not the queue: with a patience per item
    // instead (wait one turn, then treat it as inactive), the manager emptied a queue of
    // zero-cost items while such a rank was away (7 of 10,000 items for one rank of 4 on an
    // oversubscribed host).
    const std::int64_t turn = std::clamp<std::int64_t>(2 * s.turnaround_ns[r], 200'000, 1'000'000);
    const auto lead = static_cast<std::int64_t>(mine - s.served[r]);
    if (lead * turn > away) return true;
  }
  return false;
}

// The manager's pop waits its turn (application thread). It first delivers the requests that
// already arrived: served in place, its pops need no progress, and the progress thread may not
// get the core while the application pops.
void wait_turn(queue_state& s, int me) {
  // lifo_local hands each rank its own items first: locality, not turns, decides who gets what.
  if (s.order == work_queue::order::lifo_local) return;
  poll();
  {
    std::lock_guard lk(s.mu);
    if (!someone_behind_locked(s, me)) return;
  }
  wait_until([&] {
    std::lock_guard lk(s.mu);
    return !someone_behind_locked(s, me);
  });
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
  const auto r = static_cast<std::size_t>(m.origin());
  if (s->forwarded_ns[r] != 0) s->turnaround_ns[r] = object::now_ns() - s->forwarded_ns[r];
  s->active[r] = true;
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
  operation op("work_queue::work_queue");
  // Every rank must create the queue with the same order (checked with the manager).
  const std::uint64_t check = o == order::fifo ? 0 : o == order::lifo ? 2 : 4;
  id_ = current().create<queue_state>(kind::queue, manager, check, o)->id;
}

work_queue::~work_queue() {
  if (initialized()) current().destroy(id_);
}

void work_queue::push(std::span<const std::byte> item) {
  operation op("work_queue::push", operation::non_blocking);
  auto s = state_of(id_);
  if (s->manager == current().rank()) {
    std::lock_guard lk(s->mu);
    ++s->own_pushes_in_flight;
  }
  send(s->manager, current().h_queue_push, payload_builder(id_, op_push).put_bytes(item).bytes(), annotation::release);
}

std::optional<std::vector<std::byte>> work_queue::pop() {
  operation op("work_queue::pop");
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
  }
  const auto forget = [&] {
    std::lock_guard lk(s->mu);
    s->popping = false;
    s->result = 0;
  };
  return undo_if_throws(forget, [&]() -> std::optional<std::vector<std::byte>> {
    op.about("work_queue", id_, s->manager, "its manager, which hands out items");
    if (s->manager == sv.rank()) wait_turn(*s, sv.rank());
    {
      std::lock_guard lk(s->mu);
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
      if (s->result == 0) s->fail_destroyed("work_queue::pop");
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
  });
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
