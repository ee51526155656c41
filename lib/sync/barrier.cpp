// The barrier (CarlOS): arrivals are RELEASE_NT messages to the manager (the first
// participant), which stores them and, once all are in and it has arrived itself, accepts them
// together as one acquire (accept_all: nothing one arrival carries is fetched for another).
// Departures are RELEASE messages, each tailored to its participant's vector time. A barrier
// on N participants costs 2(N-1) messages. Two participants have no manager: each sends the
// other its arrival as a RELEASE and leaves once it has accepted the other's (exchange_arrivals).
//
// Garbage collection: each arrival says whether the sender asks for a collection (its
// consistency metadata passed its own mdsm::gc_threshold(): MDSM_GC_THRESHOLD, by default at
// least 64 MiB, growing with collective allocations; 0 never asks); when one member asks and the
// barrier spans every rank, the departures say so and every rank runs mdsm::gc() (itself
// collective) before leaving.
//
// A handle's barrier (mdsm::barrier_handle) counts arrivals instead of knowing its participants:
// its manager (the creating rank) groups them into episodes of `count` in the order they arrive
// (a rank's next arrival cannot come before the episode it is in has ended, so this is exact).
// The episode's *collector* accepts its arrivals together and sends the departures: the manager,
// if it is in the episode (then it costs what the collective barrier costs), else the episode's
// last arrival, to which the manager forwards the other arrivals (the collector's own is dropped:
// it is consistent with itself) and then a NONE "collect" saying how many. Per-sender order puts
// the forwards ahead of that notice.
#include "sync/services.hpp"

#include "sync/handlers.hpp"

#include "common/check.hpp"
#include "net/doorbells.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <string>

namespace mdsm::sync {

namespace {

enum op : std::uint32_t { op_arrive = 1, op_depart = 2, op_collect = 3 };

struct barrier_state final : object {
  barrier_state(std::uint64_t id_, kind k_, int manager_, std::vector<int> members_)
      : object(id_, k_, manager_), members(std::move(members_)) {}
  // A handle's barrier at its manager, and on the other ranks (which need not know the count).
  barrier_state(std::uint64_t id_, kind k_, int manager_, std::uint32_t count_)
      : object(id_, k_, manager_), count(count_) {}
  barrier_state(std::uint64_t id_, kind k_, int manager_, remote_copy) : object(id_, k_, manager_) {}
  const std::vector<int> members;  // collective: sorted; empty for a handle
  const std::uint32_t count = 0;   // a handle's, at its manager: arrivals per episode
  // A handle's manager (guarded by mu): this episode's arrivals in order (the manager's own has
  // no message).
  struct arrival {
    int rank;
    stored_message msg;
    bool collect;  // it asks for a collection
  };
  std::vector<arrival> episode;
  // A handle's collector (guarded by mu): the arrivals to accept and whom to send departures,
  // and how many there will be (-1: not collecting this episode).
  std::vector<stored_message> to_collect;
  std::vector<int> depart_to;
  long expect = -1;
  // Manager, or either member of a pair (guarded by mu): arrivals per epoch, and the epochs in
  // which an arrival asked for a collection.
  std::map<std::uint64_t, std::vector<stored_message>> arrived;
  std::set<std::uint64_t> collect_asked;
  bool mismatch = false;
  // Participant (guarded by mu).
  std::uint64_t epoch = 0;  // barriers this rank completed
  bool in_barrier = false;
  stored_message depart;
  bool collect = false;

  bool is_member(int r) const { return std::binary_search(members.begin(), members.end(), r); }
  const char* busy_reason() const override {
    if (in_barrier) return "waited on";
    if (!episode.empty()) return "waited on (an episode has begun)";
    return nullptr;
  }
  void drain(std::vector<stored_message>& out) override {
    for (auto& [e, v] : arrived)
      for (auto& m : v) out.push_back(std::move(m));
    arrived.clear();
    collect_asked.clear();
  }
};

std::shared_ptr<barrier_state> state_of(std::uint64_t id) { return current().use<barrier_state>(id, kind::barrier); }

std::uint64_t list_hash(const std::vector<int>& v) {
  std::uint64_t h = 1469598103934665603ull;
  for (int r : v) h = (h ^ static_cast<std::uint64_t>(r)) * 1099511628211ull;
  return h;
}

// Whether this rank asks the next global barrier for a collection: its metadata passed its own
// threshold (mdsm.hpp: a rank's threshold is its own, so a rank that sets a low one starts
// collections for all).
bool asks_collect() {
  const std::uint64_t threshold = gc_threshold();
  return threshold != 0 && statistic("metadata_bytes") > threshold;
}

// The manager's wait, for the failure detector's report: who has not arrived.
struct manager_wait {
  const barrier_state* s;
  std::uint64_t epoch;
  int me;
  static std::string missing(const void* ctx) {
    const auto& w = *static_cast<const manager_wait*>(ctx);
    std::lock_guard lk(w.s->mu);
    std::vector<int> here{w.me};
    if (auto it = w.s->arrived.find(w.epoch); it != w.s->arrived.end())
      for (const auto& m : it->second) here.push_back(m.origin());
    std::string out = "the manager waits for the arrival of rank(s)";
    for (int r : w.s->members)
      if (std::find(here.begin(), here.end(), r) == here.end()) out += " " + std::to_string(r);
    return out;
  }
};

// Waits until the arrival of every other member at `epoch` is here, then accepts them together
// (one acquire) and reports an arrival that did not match; returns whether one asked for a
// collection. The manager's step, and each member's of a pair.
bool take_arrivals(barrier_state& s, std::uint64_t epoch) {
  const std::size_t others = s.members.size() - 1;
  bool all_here = false;
  wait_until([&] {
    std::lock_guard lk(s.mu);
    auto it = s.arrived.find(epoch);
    all_here = (it == s.arrived.end() ? 0 : it->second.size()) == others;
    return all_here || s.abandoned();
  });
  if (!all_here) s.fail_destroyed("barrier::arrive_and_wait");
  std::vector<stored_message> arrivals;
  bool asked, mismatch;
  {
    std::lock_guard lk(s.mu);
    if (auto it = s.arrived.find(epoch); it != s.arrived.end()) {
      arrivals = std::move(it->second);
      s.arrived.erase(it);
    }
    asked = s.collect_asked.erase(epoch) != 0;
    mismatch = s.mismatch;
  }
  accept_all(arrivals);
  if (mismatch)
    detail::fail(MDSM_ERR_MISMATCH, "barrier ", id_text(s.id), ": an arrival came from a rank that is not a participant "
                 "or that counts a different number of participants");
  return asked;
}

// A barrier of two members: each sends the other its arrival as a RELEASE (its own records and
// whatever it has acquired from third ranks) and leaves once it has accepted the other's. One
// message each way, as with a manager, but the last to arrive no longer waits for an arrival to
// reach the manager, the manager to close its interval and encode its pushed diffs, and the
// departure to come back: the first to arrive did all that before it waited (apsp 1536 at 2
// ranks: a median 36 -> 22 us from the last arrival to the last departure when the member was
// the last).
// Both decide on a collection from the same two answers: whether each asked for one (each by
// its own threshold, so they agree even if the thresholds differ). Returns whether to collect.
bool exchange_arrivals(barrier_state& s, operation& op, std::uint64_t epoch, int me, bool global) {
  services& sv = current();
  const int other = s.members[0] == me ? s.members[1] : s.members[0];
  op.about("barrier", s.id, other, "the other participant, which sends its arrival when it arrives");
  const bool mine = asks_collect();
  const barrier_arrival a{epoch, 2, mine ? 1u : 0u};
  {  // Quiet: the other member takes it in when it arrives itself.
    net::doorbells::quiet_scope quiet;
    send(other, sv.h_barrier_arrive, payload_builder(s.id, op_arrive).put(a).bytes(), annotation::release);
  }
  const bool asked = take_arrivals(s, epoch);
  return global && (mine || asked);
}

// A handle's manager, mu held: the episode is complete; hand it to its collector.
void complete_episode_locked(barrier_state& s) {
  services& sv = current();
  std::vector<barrier_state::arrival> ep = std::move(s.episode);
  s.episode.clear();
  const bool collect = static_cast<int>(s.count) == sv.size() &&
                       std::any_of(ep.begin(), ep.end(), [](const auto& a) { return a.collect; });
  const bool here = std::any_of(ep.begin(), ep.end(), [&](const auto& a) { return a.rank == sv.rank(); });
  if (here) {  // the manager's own thread collects (arrive_and_wait, below)
    for (auto& a : ep) {
      if (a.rank == sv.rank()) continue;
      s.to_collect.push_back(std::move(a.msg));
      s.depart_to.push_back(a.rank);
    }
    s.collect = collect;
    s.expect = static_cast<long>(s.to_collect.size());
    return;
  }
  const int collector = ep.back().rank;
  for (std::size_t i = 0; i + 1 < ep.size(); ++i) ep[i].msg.forward(collector);
  ep.back().msg.discard();
  const barrier_departure d{ep.size() - 1, collect ? 1u : 0u, 0};
  send(collector, sv.h_barrier_depart, payload_builder(s.id, op_collect).put(d).bytes(), annotation::none);
}

}  // namespace

void on_barrier_arrive(message& m) {
  const auto [h, a] = read_payload<barrier_arrival>(m.payload());
  services& sv = current();
  auto s = sv.for_message<barrier_state>(m, h.id, kind::barrier);
  if (!s) return;
  std::lock_guard lk(s->mu);
  if (is_handle_id(h.id)) {
    if (is_manager_role(*s, m, sv.rank())) {
      s->episode.push_back({m.origin(), m.store(), a.collect != 0});
      if (s->episode.size() >= s->count) complete_episode_locked(*s);
    } else {  // forwarded by the manager to this episode's collector
      s->to_collect.push_back(m.store());
      s->depart_to.push_back(m.origin());
    }
    return;
  }
  if (a.participants != s->members.size() || !s->is_member(m.origin())) s->mismatch = true;
  s->arrived[a.epoch].push_back(m.store());
  if (a.collect != 0) s->collect_asked.insert(a.epoch);
}

void on_barrier_depart(message& m) {
  const auto [h, d] = read_payload<barrier_departure>(m.payload());
  auto s = current().for_message<barrier_state>(m, h.id, kind::barrier);
  if (!s) return;
  std::lock_guard lk(s->mu);
  if (h.op == op_collect) {  // this rank collects the episode (after the forwarded arrivals)
    if (d.epoch > static_cast<std::uint64_t>(current().size()))
      detail::fail(MDSM_ERR_MALFORMED, "barrier ", id_text(h.id), ": a collect notice for ", d.epoch, " arrivals");
    s->collect = d.collect != 0;
    s->expect = static_cast<long>(d.epoch);
    return;
  }
  s->collect = d.collect != 0;
  s->depart = m.store();
}

}  // namespace mdsm::sync

namespace mdsm {
using namespace sync;

namespace {
std::vector<int> all_ranks() {
  std::vector<int> v(static_cast<std::size_t>(current().size()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int>(i);
  return v;
}
}  // namespace

barrier::barrier() : barrier(std::span<const int>(all_ranks())) {}

barrier::barrier(std::span<const int> participants) {
  operation op("barrier::barrier");
  services& sv = current();
  std::vector<int> members(participants.begin(), participants.end());
  std::sort(members.begin(), members.end());
  if (members.empty()) detail::fail(MDSM_ERR_INVALID_ARGUMENT, "barrier: the participant list is empty");
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (members[i] < 0 || members[i] >= sv.size())
      detail::fail(MDSM_ERR_INVALID_RANK, "barrier: participant ", members[i], " is out of range (the job has ",
                   sv.size(), " ranks)");
    if (i > 0 && members[i] == members[i - 1])
      detail::fail(MDSM_ERR_INVALID_ARGUMENT, "barrier: participant ", members[i], " is listed twice");
  }
  const int manager = members.front();
  const std::uint64_t check = list_hash(members);
  id_ = static_cast<std::uint32_t>(sv.create<barrier_state>(kind::barrier, manager, check, std::move(members))->id);
}

barrier::~barrier() {
  if (initialized()) current().destroy(id_);
}

void barrier::arrive_and_wait() {
  operation op("barrier::arrive_and_wait");
  auto s = state_of(id_);
  services& sv = current();
  const int me = sv.rank();
  if (!s->is_member(me))
    detail::fail(MDSM_ERR_INVALID_ARGUMENT, "barrier ", id_text(id_), ": rank ", me, " is not one of its participants");
  std::uint64_t epoch;
  {
    std::lock_guard lk(s->mu);
    if (s->in_barrier)
      detail::fail(MDSM_ERR_BUSY, "barrier ", id_text(id_), ": another thread of rank ", me, " is already in it");
    s->in_barrier = true;
    epoch = s->epoch;
  }
  const auto leave = [&] {
    std::lock_guard lk(s->mu);
    s->in_barrier = false;
  };
  const manager_wait mw{s.get(), epoch, me};  // outlives every wait of the operation (op names it)
  const bool collect = undo_if_throws(leave, [&] {
    const std::size_t n = s->members.size();
    const bool global = static_cast<int>(n) == sv.size();
    bool collect = false;
    if (n == 2) {
      collect = exchange_arrivals(*s, op, epoch, me, global);
    } else if (s->manager == me) {
      op.about("barrier", id_, -1, nullptr, manager_wait::missing, &mw);
      // A departure must carry the records of every arrival but its receiver's own, so the
      // arrivals are taken in first.
      const bool asked = take_arrivals(*s, epoch);
      collect = global && (asked || asks_collect());
      const barrier_departure d{epoch, collect ? 1u : 0u, 0};
      {  // Quiet: every member waits in the barrier, polling for its departure.
        net::doorbells::quiet_scope quiet;
        for (int r : s->members)
          if (r != me) send(r, sv.h_barrier_depart, payload_builder(id_, op_depart).put(d).bytes(), annotation::release);
      }
    } else {
      op.about("barrier", id_, s->manager, "its manager, which answers once every participant arrived");
      const barrier_arrival a{epoch, static_cast<std::uint32_t>(n), asks_collect() ? 1u : 0u};
      {  // Quiet: the manager is a member; it takes the arrival in when it arrives itself.
        net::doorbells::quiet_scope quiet;
        send(s->manager, sv.h_barrier_arrive, payload_builder(id_, op_arrive).put(a).bytes(), annotation::release_nt);
      }
      bool departed = false;
      wait_until([&] {
        std::lock_guard lk(s->mu);
        departed = static_cast<bool>(s->depart);
        return departed || s->abandoned();
      });
      if (!departed) s->fail_destroyed("barrier::arrive_and_wait");
      stored_message d;
      {
        std::lock_guard lk(s->mu);
        d = std::move(s->depart);
        collect = s->collect;
      }
      d.accept();
    }
    {
      std::lock_guard lk(s->mu);
      ++s->epoch;
      s->in_barrier = false;
    }
    return collect;
  });
  if (collect) gc();
}

// ---- a handle's barrier -----------------------------------------------------------------------

barrier_handle barrier_handle::create(int participants) {
  operation op("barrier_handle::create", operation::non_blocking);
  if (participants < 1)
    detail::fail(MDSM_ERR_INVALID_ARGUMENT, "barrier_handle::create: ", participants,
                 " participants; a barrier needs at least one");
  barrier_handle h;
  h.id_ = current().create_handle<barrier_state>(kind::barrier, static_cast<std::uint32_t>(participants))->id;
  return h;
}

void barrier_handle::destroy() const {
  operation op("barrier_handle::destroy");
  current().destroy_handle(state_of(check_handle(id_, "barrier_handle::destroy")), "barrier_handle::destroy");
}

void barrier_handle::arrive_and_wait() const {
  const char* what = "barrier_handle::arrive_and_wait";
  operation op(what);
  const std::uint64_t id = check_handle(id_, what);
  auto s = state_of(id);
  services& sv = current();
  const int me = sv.rank();
  {
    std::lock_guard lk(s->mu);
    if (s->in_barrier) detail::fail(MDSM_ERR_BUSY, what, ": barrier ", id_text(id), ": another thread of rank ", me,
                                    " is already in it");
    s->in_barrier = true;
  }
  const auto leave = [&] {
    std::lock_guard lk(s->mu);
    s->in_barrier = false;
  };
  const bool collect = undo_if_throws(leave, [&] {
    op.about("barrier", id, s->manager, "its manager, which hands each episode to a collector");
    if (s->manager == me) {
      std::lock_guard lk(s->mu);
      s->episode.push_back({me, stored_message(), asks_collect()});
      if (s->episode.size() >= s->count) complete_episode_locked(*s);
    } else {
      const barrier_arrival a{0, 0, asks_collect() ? 1u : 0u};
      send(s->manager, sv.h_barrier_arrive, payload_builder(id, op_arrive).put(a).bytes(), annotation::release_nt);
    }
    bool answered = false;
    wait_until([&] {
      std::lock_guard lk(s->mu);
      answered = static_cast<bool>(s->depart) || (s->expect >= 0 && s->to_collect.size() == static_cast<std::size_t>(s->expect));
      return answered || s->abandoned();
    });
    if (!answered) s->fail_destroyed(what);
    stored_message depart;
    std::vector<stored_message> arrivals;
    std::vector<int> to;
    bool gc_after;
    {
      std::lock_guard lk(s->mu);
      depart = std::move(s->depart);
      arrivals = std::move(s->to_collect);
      to = std::move(s->depart_to);
      s->to_collect.clear();
      s->depart_to.clear();
      s->expect = -1;
      gc_after = s->collect;
    }
    if (depart) {
      depart.accept();
    } else {  // this rank collects the episode
      accept_all(arrivals);
      const barrier_departure d{0, gc_after ? 1u : 0u, 0};
      net::doorbells::quiet_scope quiet;  // every member of the episode waits for its departure
      for (int r : to) send(r, sv.h_barrier_depart, payload_builder(id, op_depart).put(d).bytes(), annotation::release);
    }
    std::lock_guard lk(s->mu);
    s->in_barrier = false;
    return gc_after;
  });
  if (collect) gc();
}

}  // namespace mdsm
