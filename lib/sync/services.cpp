#include "sync/services.hpp"

#include "sync/handlers.hpp"

#include "common/check.hpp"
#include "common/deferred.hpp"
#include "common/env.hpp"

#include <atomic>
#include <cstdio>
#include <sstream>

namespace mdsm::sync {

namespace {
std::atomic<services*> g_current{nullptr};

const char* kind_name(kind k) {
  switch (k) {
    case kind::mutex: return "mutex";
    case kind::semaphore: return "semaphore";
    case kind::condition: return "condition_variable";
    case kind::barrier: return "barrier";
    case kind::queue: return "work_queue";
  }
  return "object";
}

[[noreturn]] void fail(mdsm_status code, const std::string& what) { throw error(code, what); }
}  // namespace

services& current() {
  services* s = g_current.load(std::memory_order_acquire);
  if (s == nullptr) fail(MDSM_ERR_NOT_INITIALIZED, "mdsm is not initialized: call mdsm::init first");
  return *s;
}

void set_current(services* s) noexcept { g_current.store(s, std::memory_order_release); }

void require_application_thread(const char* what) {
  if (in_handler())
    fail(MDSM_ERR_HANDLER_CONTEXT,
         std::string(what) + " waits for other ranks and cannot be called from a message handler");
}

services::services(MPI_Comm comm) {
  MPI_Comm_dup(comm, &comm_);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  g_destroyed_grace_ns.store(
      static_cast<std::int64_t>(detail::env_uint("MDSM_DESTROY_GRACE_MS", 10'000)) * 1'000'000,
      std::memory_order_relaxed);
  // Replies first, then requests (a handler may run as soon as it is registered).
  h_mutex_token = register_handler("mdsm.sync.mutex.token", on_mutex_token);
  h_mutex_deny = register_handler("mdsm.sync.mutex.deny", on_mutex_deny);
  h_mutex_request = register_handler("mdsm.sync.mutex.request", on_mutex_request);
  h_sem_grant = register_handler("mdsm.sync.semaphore.grant", on_sem_grant);
  h_sem_release = register_handler("mdsm.sync.semaphore.release", on_sem_release);
  h_sem_acquire = register_handler("mdsm.sync.semaphore.acquire", on_sem_acquire);
  h_cond_reply = register_handler("mdsm.sync.cond.reply", on_cond_reply);
  h_cond_wait = register_handler("mdsm.sync.cond.wait", on_cond_wait);
  h_cond_notify = register_handler("mdsm.sync.cond.notify", on_cond_notify);
  h_barrier_depart = register_handler("mdsm.sync.barrier.depart", on_barrier_depart);
  h_barrier_arrive = register_handler("mdsm.sync.barrier.arrive", on_barrier_arrive);
  h_queue_reply = register_handler("mdsm.sync.queue.reply", on_queue_reply);
  h_queue_push = register_handler("mdsm.sync.queue.push", on_queue_push);
  h_queue_pop = register_handler("mdsm.sync.queue.pop", on_queue_pop);
  // A NONE message {id}: the sender is destroying object id; waits on it here end with an error.
  h_destroyed = register_handler("mdsm.sync.destroyed", [](message& m) {
    const auto [h] = read_payload<>(m.payload());
    if (auto obj = current().find_if_present(h.id)) obj->mark_destroyed(m.origin());
  });
}

services::~services() {
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void services::allreduce(const void* in, void* out, int count, MPI_Datatype t, MPI_Op op) const {
  MPI_Request req;
  MPI_Iallreduce(in, out, count, t, op, comm_, &req);
  detail::wait_subject subject{.what = "every rank to reach the same collective step (creating or destroying a "
                                       "coordination object)"};
  detail::waiting_for waiting(subject);
  wait_until([&] {
    int done = 0;
    PMPI_Test(&req, &done, MPI_STATUS_IGNORE);
    return done != 0;
  });
}

int services::resolve_manager(int manager, std::uint32_t id) const {
  if (manager < 0) return static_cast<int>(id % static_cast<std::uint32_t>(size_));
  if (manager >= size_) {
    std::ostringstream o;
    o << "mdsm: manager rank " << manager << " is out of range (the job has " << size_ << " ranks)";
    fail(MDSM_ERR_INVALID_RANK, o.str());
  }
  return manager;
}

void services::publish(std::shared_ptr<object> obj) {
  std::lock_guard lk(table_mu_);
  table_[obj->id] = std::move(obj);
}

void services::agree(std::uint32_t id, kind k, int manager, std::uint64_t extra_check) {
  // min and max of (id, kind, manager, extra) in one reduction: max of v and of -v.
  const std::int64_t mine[4] = {id, static_cast<std::int64_t>(k), manager, static_cast<std::int64_t>(extra_check >> 1)};
  std::int64_t both[8], out[8];
  for (int i = 0; i < 4; ++i) {
    both[i] = mine[i];
    both[4 + i] = -mine[i];
  }
  allreduce(both, out, 8, MPI_INT64_T, MPI_MAX);
  bool same = true;
  for (int i = 0; i < 4; ++i) same = same && out[i] == -out[4 + i];
  if (!same) {
    {
      std::lock_guard lk(table_mu_);
      table_.erase(id);
    }
    --next_id_;
    std::ostringstream o;
    o << "mdsm: creating " << kind_name(k) << " #" << id
      << ": the ranks disagree (a different kind of object, manager or participant list on some rank); "
         "create coordination objects collectively, in the same order and with the same arguments on every rank";
    fail(MDSM_ERR_MISMATCH, o.str());
  }
}

void services::destroy(std::uint32_t id) noexcept {
  // Held: an error recorded earlier is the application's next call's to report; thrown into
  // this noexcept function it would only be printed and lost, and the ranks' destroys uneven.
  detail::hold_deferred hold;
  try {
    std::shared_ptr<object> obj;
    {
      std::lock_guard lk(table_mu_);
      auto it = table_.find(id);
      if (it == table_.end()) return;
      obj = it->second;
    }
    std::string busy;
    {
      std::lock_guard lk(obj->mu);
      if (const char* why = obj->busy_reason()) {
        std::ostringstream o;
        o << "mdsm: " << kind_name(obj->k) << " #" << id << " destroyed while " << why << " on rank " << rank_
          << "; destroy coordination objects only when no rank uses them";
        busy = o.str();
      }
    }
    // A rank waiting on the object (a lock it asked for, a barrier it is in) would wait forever
    // for this rank, and this rank for it below: tell every rank first, so such a wait ends with
    // an error and its rank comes here too.
    for (int r = 0; r < size_; ++r)
      if (r != rank_) send(r, h_destroyed, payload_builder(id, 0).bytes(), annotation::none);
    // Nobody may send to it once every rank is here.
    int zero = 0, out = 0;
    allreduce(&zero, &out, 1, MPI_INT, MPI_SUM);
    if (!busy.empty()) detail::defer_error(error(MDSM_ERR_BUSY, busy));
    std::vector<stored_message> left;
    {
      std::lock_guard lk(obj->mu);
      obj->drain(left);
    }
    if (!left.empty()) accept_all(left);
    std::lock_guard lk(table_mu_);
    table_.erase(id);
  } catch (const error& e) {
    std::fprintf(stderr, "%s\n", e.what());
  }
}

std::shared_ptr<object> services::find_if_present(std::uint32_t id) const {
  std::lock_guard lk(table_mu_);
  auto it = table_.find(id);
  return it == table_.end() ? nullptr : it->second;
}

void object::fail_destroyed(const char* what) const {
  detail::fail(MDSM_ERR_BUSY, what, ": ", kind_name(k), " #", id, " was destroyed by rank ",
               destroyed_by.load(std::memory_order_acquire),
               " while this rank waited on it; destroy coordination objects only when no rank uses them");
}

std::shared_ptr<object> services::find_any(std::uint32_t id, kind k) const {
  std::lock_guard lk(table_mu_);
  auto it = table_.find(id);
  if (it == table_.end() || it->second->k != k) {
    std::ostringstream o;
    o << "mdsm: a " << kind_name(k) << " message names object #" << id << ", which does not exist on rank " << rank_
      << " (destroyed, or never created collectively)";
    fail(MDSM_ERR_MALFORMED, o.str());
  }
  return it->second;
}

}  // namespace mdsm::sync
