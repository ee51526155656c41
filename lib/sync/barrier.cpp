// The barrier (CarlOS): arrivals are RELEASE_NT messages to the manager (the first
// participant), which stores them and, once all are in and it has arrived itself, accepts them
// together as one acquire (accept_all: nothing one arrival carries is fetched for another).
// Departures are RELEASE messages, each tailored to its participant's vector time. A barrier
// on N participants costs 2(N-1) messages.
//
// Garbage collection: each arrival reports the sender's consistency-metadata bytes; when the
// largest exceeds mdsm::gc_threshold() (MDSM_GC_THRESHOLD; by default at least 64 MiB, growing
// with collective allocations; 0 disables) and the barrier spans every rank, the departures say
// so and every rank runs mdsm::gc() (itself collective) before leaving.
#include "sync/services.hpp"

#include "sync/handlers.hpp"

#include "common/check.hpp"

#include <algorithm>
#include <map>
#include <string>

namespace mdsm::sync {

namespace {

enum op : std::uint32_t { op_arrive = 1, op_depart = 2 };


struct barrier_state final : object {
  barrier_state(std::uint32_t id_, kind k_, int manager_, std::vector<int> members_)
      : object(id_, k_, manager_), members(std::move(members_)) {}
  const std::vector<int> members;  // sorted
  // Manager (guarded by mu): arrivals per epoch, and the largest metadata size reported.
  std::map<std::uint64_t, std::vector<stored_message>> arrived;
  std::map<std::uint64_t, std::uint64_t> metadata_max;
  bool mismatch = false;
  // Participant (guarded by mu).
  std::uint64_t epoch = 0;  // barriers this rank completed
  bool in_barrier = false;
  stored_message depart;
  bool collect = false;

  bool is_member(int r) const { return std::binary_search(members.begin(), members.end(), r); }
  const char* busy_reason() const override { return in_barrier ? "waited on" : nullptr; }
  void drain(std::vector<stored_message>& out) override {
    for (auto& [e, v] : arrived)
      for (auto& m : v) out.push_back(std::move(m));
    arrived.clear();
  }
};

std::shared_ptr<barrier_state> state_of(std::uint32_t id) { return current().find<barrier_state>(id, kind::barrier); }

std::uint64_t list_hash(const std::vector<int>& v) {
  std::uint64_t h = 1469598103934665603ull;
  for (int r : v) h = (h ^ static_cast<std::uint64_t>(r)) * 1099511628211ull;
  return h;
}

std::uint64_t my_metadata() { return statistic("metadata_bytes"); }

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

}  // namespace

void on_barrier_arrive(message& m) {
  const auto [h, a] = read_payload<barrier_arrival>(m.payload());
  auto s = state_of(h.id);
  std::lock_guard lk(s->mu);
  if (a.participants != s->members.size() || !s->is_member(m.origin())) s->mismatch = true;
  s->arrived[a.epoch].push_back(m.store());
  auto& mx = s->metadata_max[a.epoch];
  mx = std::max(mx, a.metadata);
}

void on_barrier_depart(message& m) {
  const auto [h, d] = read_payload<barrier_departure>(m.payload());
  auto s = state_of(h.id);
  std::lock_guard lk(s->mu);
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
  id_ = sv.create<barrier_state>(kind::barrier, manager, check, std::move(members))->id;
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
    detail::fail(MDSM_ERR_INVALID_ARGUMENT, "barrier #", id_, ": rank ", me, " is not one of its participants");
  std::uint64_t epoch;
  {
    std::lock_guard lk(s->mu);
    if (s->in_barrier)
      detail::fail(MDSM_ERR_BUSY, "barrier #", id_, ": another thread of rank ", me, " is already in it");
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
    if (s->manager == me) {
      op.about("barrier", id_, -1, nullptr, manager_wait::missing, &mw);
      bool all_here = false;
      wait_until([&] {
        std::lock_guard lk(s->mu);
        auto it = s->arrived.find(epoch);
        all_here = (it == s->arrived.end() ? 0 : it->second.size()) + 1 == n;
        return all_here || s->abandoned();
      });
      if (!all_here) s->fail_destroyed("barrier::arrive_and_wait");
      std::vector<stored_message> arrivals;
      std::uint64_t meta = my_metadata();
      bool mismatch;
      {
        std::lock_guard lk(s->mu);
        if (auto it = s->arrived.find(epoch); it != s->arrived.end()) {
          arrivals = std::move(it->second);
          s->arrived.erase(it);
        }
        meta = std::max(meta, s->metadata_max[epoch]);
        s->metadata_max.erase(epoch);
        mismatch = s->mismatch;
      }
      accept_all(arrivals);
      if (mismatch) {
        detail::fail(MDSM_ERR_MISMATCH, "barrier #", id_, ": an arrival came from a rank that is not a participant "
                     "or that counts a different number of participants");
      }
      const std::uint64_t threshold = gc_threshold();
      collect = global && threshold != 0 && meta > threshold;
      const barrier_departure d{epoch, collect ? 1u : 0u, 0};
      for (int r : s->members)
        if (r != me) send(r, sv.h_barrier_depart, payload_builder(id_, op_depart).put(d).bytes(), annotation::release);
    } else {
      op.about("barrier", id_, s->manager, "its manager, which answers once every participant arrived");
      const barrier_arrival a{epoch, static_cast<std::uint32_t>(n), 0, my_metadata()};
      send(s->manager, sv.h_barrier_arrive, payload_builder(id_, op_arrive).put(a).bytes(), annotation::release_nt);
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

}  // namespace mdsm
