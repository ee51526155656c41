// Remote spawn (include/mdsm/fibers.hpp): a registered task shipped to another rank's home
// scheduler in a message whose annotation the caller chooses, run there as a detached fiber, its
// result sent back to a future (remote_result). docs/FIBERS.md.
#include "threads/fibers_internal.hpp"

#include "common/check.hpp"
#include "common/wait_subject.hpp"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace mdsm::fibers {

namespace detail {
struct remote_call {
  // A result nobody asked for (the remote_result was dropped, or get() threw before accepting):
  // its RELEASE is given up, with the consistency it carried, rather than reported undisposed.
  ~remote_call() {
    if (stored && !stored.disposed()) {
      try {
        stored.discard();
      } catch (...) {
      }
    }
  }
  std::atomic<bool> arrived{false};
  bool taken = false;
  stored_message stored;         // a RELEASE reply, accepted by get()
  std::vector<std::byte> bytes;  // a NONE reply's payload
  std::string task;              // for messages
  int rank = -1;
};
}  // namespace detail

using internal::scheduler;

namespace {

// The incoming remote spawns of this rank, for its first scheduling thread (the home scheduler).
struct incoming_spawn {
  handler_id task;
  int origin;
  std::uint64_t call;
  annotation annot;
  stored_message stored;         // a RELEASE kind: accepted by the task's fiber before it runs
  std::vector<std::byte> bytes;  // otherwise the payload
};

struct remote_registry {
  std::uint64_t session = 0;  // runtime::session it was made in
  int rank = -1;              // this rank in that session
  std::mutex mu;
  handler_id h_reply = 0;
  bool have_reply = false;
  std::map<handler_id, std::pair<std::string, task_fn>> tasks;
  std::deque<incoming_spawn> inbox;
  std::atomic<std::size_t> inbox_size{0};
  std::uint64_t next_call = 1;
  std::map<std::uint64_t, std::shared_ptr<detail::remote_call>> calls;  // outstanding, by id
  // Results that arrived as RELEASEs, maybe still held by the program: discarded at finalize
  // (a stored message must not outlive its session).
  std::vector<std::weak_ptr<detail::remote_call>> stored_results;
  std::atomic<scheduler*> home{nullptr};  // written under mu
};
remote_registry g_remote;

// Spawn payload: call id, then the arguments. Reply payload: call id, ok (1 byte), then the
// result (ok) or the task's error message.
constexpr std::size_t k_call_bytes = sizeof(std::uint64_t);

void on_reply(message& m) {
  const auto p = m.payload();
  if (p.size() < k_call_bytes + 1)
    mdsm::detail::fail(MDSM_ERR_MALFORMED, "remote spawn reply of ", p.size(), " bytes from rank ", m.source());
  std::uint64_t id;
  std::memcpy(&id, p.data(), sizeof id);
  std::shared_ptr<detail::remote_call> c;
  {
    std::lock_guard lk(g_remote.mu);
    auto it = g_remote.calls.find(id);
    if (it != g_remote.calls.end()) {
      c = std::move(it->second);
      g_remote.calls.erase(it);
    }
  }
  if (!c) {
    if (m.annot() == annotation::release || m.annot() == annotation::release_nt) m.accept();
    mdsm::detail::fail(MDSM_ERR_MALFORMED, "a remote spawn reply from rank ", m.source(), " names call ", id,
                       ", which this rank is not waiting for");
  }
  if (m.annot() == annotation::release || m.annot() == annotation::release_nt) {
    c->stored = m.store();
    std::lock_guard lk(g_remote.mu);
    g_remote.stored_results.push_back(c);
  } else {
    c->bytes.assign(p.begin(), p.end());
  }
  c->arrived.store(true, std::memory_order_release);
}

void on_spawn(message& m) {
  const auto p = m.payload();
  if (p.size() < k_call_bytes) {
    if (m.annot() == annotation::release || m.annot() == annotation::release_nt) m.accept();
    mdsm::detail::fail(MDSM_ERR_MALFORMED, "remote spawn of ", p.size(), " bytes from rank ", m.source());
  }
  incoming_spawn in{m.handler(), m.origin(), 0, m.annot(), {}, {}};
  std::memcpy(&in.call, p.data(), sizeof in.call);
  if (m.annot() == annotation::release || m.annot() == annotation::release_nt)
    in.stored = m.store();
  else
    in.bytes.assign(p.begin(), p.end());
  std::lock_guard lk(g_remote.mu);
  g_remote.inbox.push_back(std::move(in));
  g_remote.inbox_size.fetch_add(1, std::memory_order_release);
}

// The body of a remotely spawned fiber.
void run_spawned(incoming_spawn& in) {
  if (in.stored) in.stored.accept();  // the task sees the spawner's writes
  const std::span<const std::byte> p = in.stored ? in.stored.payload() : std::span<const std::byte>(in.bytes);
  const std::span<const std::byte> args = p.subspan(k_call_bytes);
  task_fn fn;
  handler_id h_reply;
  {
    std::lock_guard lk(g_remote.mu);
    fn = g_remote.tasks.at(in.task).second;
    h_reply = g_remote.h_reply;
  }
  std::vector<std::byte> out(k_call_bytes + 1);
  std::memcpy(out.data(), &in.call, sizeof in.call);
  try {
    std::vector<std::byte> r = fn(args);
    out[k_call_bytes] = std::byte{1};
    out.insert(out.end(), r.begin(), r.end());
  } catch (const std::exception& e) {
    const std::string what = e.what();
    out[k_call_bytes] = std::byte{0};
    for (char c : what) out.push_back(static_cast<std::byte>(c));
  } catch (...) {
    out[k_call_bytes] = std::byte{0};
  }
  send(in.origin, h_reply, out, in.annot == annotation::none ? annotation::none : annotation::release);
}

}  // namespace

void internal::scheduler_made(scheduler* s) {
  std::lock_guard lk(g_remote.mu);
  if (g_remote.home.load() == nullptr) g_remote.home.store(s);
}

void internal::scheduler_gone(scheduler* s) noexcept {
  std::lock_guard lk(g_remote.mu);
  if (g_remote.home.load() == s) g_remote.home.store(nullptr);
}

bool internal::incoming_waiting(const scheduler* s) noexcept {
  return g_remote.home.load(std::memory_order_relaxed) == s && g_remote.inbox_size.load(std::memory_order_acquire) != 0;
}

void internal::start_incoming(scheduler& s) {
  if (!incoming_waiting(&s)) return;
  std::deque<incoming_spawn> batch;
  {
    std::lock_guard lk(g_remote.mu);
    batch.swap(g_remote.inbox);
    g_remote.inbox_size.store(0, std::memory_order_release);
  }
  for (incoming_spawn& in : batch) {
    auto shared = std::make_shared<incoming_spawn>(std::move(in));
    spawn_detached(s, [shared] { run_spawned(*shared); });
  }
}

namespace {
// At finalize: spawns this rank never ran (its scheduler never ran after they came) are reported
// and dropped; results nobody took are given up. Nothing stored outlives the session.
void finalize_registry() {
  std::deque<incoming_spawn> inbox;
  std::vector<std::weak_ptr<detail::remote_call>> results;
  {
    std::lock_guard lk(g_remote.mu);
    inbox.swap(g_remote.inbox);
    g_remote.inbox_size.store(0);
    results.swap(g_remote.stored_results);
    g_remote.calls.clear();
  }
  if (!inbox.empty())
    std::fprintf(stderr,
                 "mdsm: rank %d finalizes with %zu remote spawn(s) it never ran (no fiber scheduler ran on it "
                 "after they came: call fibers::run_until, join or yield)\n",
                 g_remote.rank, inbox.size());
  // Nothing here may stop finalize: a discard that fails leaves its message to be reported.
  const auto give_up = [](stored_message& m) {
    try {
      if (m && !m.disposed()) m.discard();
    } catch (const error&) {
    }
  };
  for (incoming_spawn& in : inbox) give_up(in.stored);
  for (auto& w : results)
    if (auto c = w.lock()) give_up(c->stored);
}
}  // namespace

void internal::check_session(mdsm::detail::runtime& r) {
  std::lock_guard lk(g_remote.mu);
  if (g_remote.session == r.session) return;
  g_remote.session = r.session;
  g_remote.rank = r.transport->rank();
  r.at_finalize.push_back(&finalize_registry);
  g_remote.have_reply = false;
  g_remote.tasks.clear();
  g_remote.inbox.clear();
  g_remote.inbox_size.store(0);
  g_remote.calls.clear();
  g_remote.stored_results.clear();
}

task_id register_task(std::string_view name, task_fn fn) {
  if (!fn) mdsm::detail::fail(MDSM_ERR_INVALID_ARGUMENT, "fibers::register_task: empty function");
  mdsm::detail::runtime& r = mdsm::detail::rt_blocking("fibers::register_task");
  internal::check_session(r);
  bool need_reply;
  {
    std::lock_guard lk(g_remote.mu);
    need_reply = !g_remote.have_reply;
  }
  // Collective like every registration: each rank registers the reply handler before its first
  // task, so the handler ids agree.
  if (need_reply) {
    const handler_id h = register_handler("mdsm.fibers.reply", &on_reply);
    std::lock_guard lk(g_remote.mu);
    g_remote.h_reply = h;
    g_remote.have_reply = true;
  }
  std::string full = "mdsm.fibers.task:";
  full += name;
  const handler_id h = register_handler(full, &on_spawn);
  std::lock_guard lk(g_remote.mu);
  g_remote.tasks[h] = {std::string(name), std::move(fn)};
  return h;
}

remote_result spawn_remote(int rank, task_id task, std::span<const std::byte> args, annotation a) {
  mdsm::detail::runtime& r = mdsm::detail::rt();
  if (rank < 0 || rank >= r.transport->size())
    mdsm::detail::fail(MDSM_ERR_INVALID_RANK, "fibers::spawn_remote: rank ", rank, " is outside [0, ",
                       r.transport->size(), ")");
  if (a != annotation::none && a != annotation::request && a != annotation::release && a != annotation::release_nt)
    mdsm::detail::fail(MDSM_ERR_INVALID_ANNOTATION, "fibers::spawn_remote: annotation ", static_cast<int>(a));
  if (args.data() == nullptr && !args.empty())
    mdsm::detail::fail(MDSM_ERR_INVALID_ARGUMENT, "fibers::spawn_remote: null arguments with a nonzero length");
  internal::check_session(r);
  auto c = std::make_shared<detail::remote_call>();
  c->rank = rank;
  std::uint64_t id;
  {
    std::lock_guard lk(g_remote.mu);
    auto it = g_remote.tasks.find(task);
    if (it == g_remote.tasks.end())
      mdsm::detail::fail(MDSM_ERR_UNKNOWN_HANDLER, "fibers::spawn_remote: task ", task,
                         " was never registered (fibers::register_task)");
    c->task = it->second.first;
    id = g_remote.next_call++;
    g_remote.calls[id] = c;
  }
  std::vector<std::byte> out(k_call_bytes);
  std::memcpy(out.data(), &id, sizeof id);
  out.insert(out.end(), args.begin(), args.end());
  try {
    send(rank, task, out, a);
  } catch (...) {
    std::lock_guard lk(g_remote.mu);
    g_remote.calls.erase(id);
    throw;
  }
  return remote_result(std::move(c));
}

bool remote_result::ready() const {
  if (!c_) mdsm::detail::fail(MDSM_ERR_INVALID_HANDLE, "remote_result::ready: an empty result");
  return c_->arrived.load(std::memory_order_acquire);
}

std::vector<std::byte> remote_result::get() {
  if (!c_ || c_->taken) mdsm::detail::fail(MDSM_ERR_INVALID_HANDLE, "remote_result::get: an empty or used result");
  detail::remote_call& c = *c_;
  {
    mdsm::detail::wait_subject subject{
        .what = "the result of a remote spawn", .object = "call", .peer = c.rank, .peer_role = "which runs the task"};
    mdsm::detail::waiting_for waiting(subject);
    const auto arrived = [&c] { return c.arrived.load(std::memory_order_acquire); };
    // In a fiber the wait suspends it. Outside one the thread runs its fibers meanwhile: a task
    // spawned on this very rank runs on them, and so may the fibers that produce what it needs.
    if (in_fiber()) mdsm::wait_until(arrived);
    else internal::run_until(internal::this_scheduler("remote_result::get"), arrived);
  }
  c.taken = true;
  if (c.stored) c.stored.accept();
  const std::span<const std::byte> p = c.stored ? c.stored.payload() : std::span<const std::byte>(c.bytes);
  const bool ok = p[k_call_bytes] == std::byte{1};
  std::vector<std::byte> result(p.begin() + static_cast<std::ptrdiff_t>(k_call_bytes + 1), p.end());
  std::shared_ptr<detail::remote_call> keep = std::move(c_);
  if (!ok) {
    std::string what(reinterpret_cast<const char*>(result.data()), result.size());
    mdsm::detail::fail(MDSM_ERR_TASK_FAILED, "remote task '", keep->task, "' on rank ", keep->rank,
                       " ended with an exception: ", what.empty() ? "(not a std::exception)" : what);
  }
  return result;
}

void remote_result::check_size(std::size_t got, std::size_t want) {
  if (got != want)
    mdsm::detail::fail(MDSM_ERR_INVALID_ARGUMENT, "remote_result::get_as: the result has ", got, " bytes, not ", want);
}

}  // namespace mdsm::fibers
