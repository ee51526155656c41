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

[[noreturn]] void fail(mdsm_status code, const std::string& what) { throw error(code, what); }

// The operations of h_handle (a handle's lifetime). Their messages are NONE: destroying an
// object synchronizes nothing.
enum handle_op : std::uint32_t {
  op_destroy = 1,     // destroyer -> manager: {kind}
  op_result = 2,      // manager -> destroyer: {result}, then the reason's text
  op_forget = 3,      // manager -> a rank that used the object: it was destroyed, drop your copy
  op_gone = 4,        // manager -> a message's origin: the object it named was destroyed (a wait fails)
  op_gone_later = 5,  // the same for a message nobody waits on (the next call fails)
};
enum destroy_outcome : std::uint32_t { destroyed = 1, busy = 2, no_object = 3 };
}  // namespace

const char* kind_name(kind k) noexcept {
  switch (k) {
    case kind::mutex: return "mutex";
    case kind::semaphore: return "semaphore";
    case kind::condition: return "condition_variable";
    case kind::barrier: return "barrier";
    case kind::queue: return "work_queue";
  }
  return "object";
}

std::string id_text(std::uint64_t id) {
  // detail::cat, not "#" + std::string: GCC 12 at -O2 reports a false -Wrestrict on the latter.
  if (!is_handle_id(id)) return detail::cat("#", id);
  return detail::cat("#", handle_creator(id), ".", handle_sequence(id));
}

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
  h_handle = register_handler("mdsm.sync.handle", [](message& m) { current().on_handle(m); });
}

services::~services() {
  // Handles still alive at finalize (pthreads-style programs seldom destroy their locks): what
  // they store (unclaimed permits, a returned loan) is given up quietly, as a destroy would.
  // A collective object left undestroyed still reports its stored messages.
  std::vector<stored_message> left;
  for (auto& [id, o] : table_) {
    if (!is_handle_id(id)) continue;
    std::lock_guard lk(o->mu);
    o->drain(left);
  }
  for (auto& m : left)
    if (m && !m.disposed()) m.discard();
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

std::shared_ptr<object> services::find_if_present(std::uint64_t id) const {
  std::lock_guard lk(table_mu_);
  auto it = table_.find(id);
  return it == table_.end() ? nullptr : it->second;
}

void object::fail_destroyed(const char* what) const {
  if (gone.load(std::memory_order_acquire))
    detail::fail(MDSM_ERR_INVALID_HANDLE, what, ": ", kind_name(k), " ", id_text(id),
                 " was destroyed; a handle must not be used after destroy()");
  detail::fail(MDSM_ERR_BUSY, what, ": ", kind_name(k), " #", id, " was destroyed by rank ",
               destroyed_by.load(std::memory_order_acquire),
               " while this rank waited on it; destroy coordination objects only when no rank uses them");
}

std::shared_ptr<object> services::find_any(std::uint64_t id, kind k) const {
  std::lock_guard lk(table_mu_);
  auto it = table_.find(id);
  if (it == table_.end() || it->second->k != k) {
    std::ostringstream o;
    o << "mdsm: a " << kind_name(k) << " message names object " << id_text(id) << ", which does not exist on rank " << rank_
      << " (destroyed, or never created collectively)";
    fail(MDSM_ERR_MALFORMED, o.str());
  }
  return it->second;
}

// ---- handles: objects created by one rank ------------------------------------------------------

std::uint64_t services::next_handle_id() {
  const std::uint32_t seq = next_handle_seq_.fetch_add(1, std::memory_order_relaxed);
  if (seq == UINT32_MAX)
    fail(MDSM_ERR_OUT_OF_MEMORY, "mdsm: this rank has created 2^32 - 1 coordination handles; no ids are left");
  return (static_cast<std::uint64_t>(rank_) + 1) << 32 | seq;
}

std::shared_ptr<object> services::use_slow(std::uint64_t id, kind k, make_fn make) {
  if (!is_handle_id(id)) return find_any(id, k);
  const std::uint64_t creator = handle_creator(id);
  if (creator >= static_cast<std::uint64_t>(size_))
    detail::fail(MDSM_ERR_INVALID_HANDLE, "a ", kind_name(k), " handle names object ", id_text(id),
                 ", which no rank of this job created (garbage in place of a handle?)");
  std::lock_guard lk(table_mu_);
  auto [it, inserted] = table_.try_emplace(id);
  if (inserted) {
    if (creator == static_cast<std::uint64_t>(rank_)) {  // its manager made it and no longer has it
      table_.erase(it);
      if (handle_sequence(id) < next_handle_seq_.load(std::memory_order_relaxed))
        detail::fail(MDSM_ERR_INVALID_HANDLE, kind_name(k), " ", id_text(id),
                     " was destroyed; a handle must not be used after destroy()");
      detail::fail(MDSM_ERR_INVALID_HANDLE, "a ", kind_name(k), " handle names object ", id_text(id),
                   ", which was never created (garbage in place of a handle?)");
    }
    it->second = make(id, k, static_cast<int>(creator));
  }
  const auto& o = it->second;
  if (o->k != k)
    detail::fail(MDSM_ERR_INVALID_HANDLE, "a ", kind_name(k), " handle names ", kind_name(o->k), " ", id_text(id));
  if (o->gone.load(std::memory_order_acquire))
    detail::fail(MDSM_ERR_INVALID_HANDLE, kind_name(k), " ", id_text(id),
                 " was destroyed; a handle must not be used after destroy()");
  return o;
}

std::shared_ptr<object> services::for_message_any(message& m, std::uint64_t id, kind k, bool waited) {
  if (!is_handle_id(id)) return find_any(id, k);
  if (auto o = find_if_present(id)) {
    if (o->k != k) return find_any(id, k);  // reports the mismatch
    if (o->manager == rank_ && m.source() == m.origin() && m.origin() != rank_) {
      std::lock_guard lk(o->mu);
      o->users[static_cast<std::size_t>(m.origin())] = true;
    }
    return o;
  }
  // Destroyed (or never made here): nobody will take what the message brings.
  if (m.annot() == annotation::release || m.annot() == annotation::release_nt) m.store().discard();
  if (m.origin() != rank_)
    send(m.origin(), h_handle, payload_builder(id, waited ? op_gone : op_gone_later).bytes(), annotation::none);
  return nullptr;
}

std::uint64_t check_handle(std::uint64_t id, const char* what) {
  if (id == 0)
    detail::fail(MDSM_ERR_INVALID_HANDLE, what, ": the handle is null (default-constructed or zeroed); make one with "
                 "create() on some rank and pass it on");
  if (!is_handle_id(id))
    detail::fail(MDSM_ERR_INVALID_HANDLE, what, ": ", id, " is not a handle's id (garbage in place of a handle?)");
  return id;
}

void services::tell_gone(std::uint64_t id, int rank) {
  send(rank, h_handle, payload_builder(id, op_gone).bytes(), annotation::none);
}

void object::begin_destroy(int /*destroyer*/) { current().end_destroy(*this, busy_reason(), current().rank()); }

void services::start_destroy(object& o, int destroyer) {
  if (o.destroyer >= 0) {
    destroy_result(o, destroyer, busy, detail::cat("rank ", o.destroyer, " is destroying it"));
    return;
  }
  o.destroyer = destroyer;
  o.begin_destroy(destroyer);
}

void services::destroy_result(object& o, int destroyer, int result, std::string_view reason) {
  if (destroyer == rank_) {
    o.destroy_result = result;
    o.destroy_reason = reason;
  } else {
    send(destroyer, h_handle,
         payload_builder(o.id, op_result)
             .put(static_cast<std::uint32_t>(result))
             .put_bytes(std::as_bytes(std::span<const char>(reason.data(), reason.size())))
             .bytes(),
         annotation::none);
  }
}

void services::end_destroy(object& o, const char* busy_why, int where) {
  const int d = o.destroyer;
  o.destroyer = -1;
  if (busy_why != nullptr) {
    destroy_result(o, d, busy, detail::cat(busy_why, " on rank ", where));
    return;
  }
  std::vector<stored_message> left;
  o.drain(left);
  for (auto& m : left) m.discard();
  o.gone.store(true, std::memory_order_release);
  {
    std::lock_guard lk(table_mu_);
    table_.erase(o.id);
  }
  for (int r = 0; r < size_; ++r)
    if (r != rank_ && r != d && o.users[static_cast<std::size_t>(r)])
      send(r, h_handle, payload_builder(o.id, op_forget).bytes(), annotation::none);
  destroy_result(o, d, destroyed, {});
}

void services::forget_here(std::uint64_t id, bool only_if_idle, const char* later_error) {
  std::shared_ptr<object> o = find_if_present(id);
  if (o && o->manager == rank_ && !o->gone.load(std::memory_order_acquire)) return;  // its manager decides that
  if (o) {
    std::lock_guard lk(o->mu);
    if (only_if_idle && o->busy_reason() != nullptr) return;  // its answers are still on their way
    o->gone.store(true, std::memory_order_release);
    std::lock_guard tl(table_mu_);
    table_.erase(id);
  }
  if (later_error != nullptr)
    detail::defer_error(error(MDSM_ERR_INVALID_HANDLE,
                              detail::cat("mdsm: ", later_error, " object ", id_text(id),
                                          " after it was destroyed; a handle must not be used after destroy()")));
}

void services::on_handle(message& m) {
  payload_reader in(m.payload());
  const auto h = in.get<header>();
  switch (h.op) {
    case op_destroy: {
      const auto k = static_cast<kind>(in.get<std::uint32_t>());
      auto o = is_handle_id(h.id) ? find_if_present(h.id) : nullptr;
      if (o == nullptr || o->k != k || o->manager != rank_) {
        send(m.origin(), h_handle, payload_builder(h.id, op_result).put(static_cast<std::uint32_t>(no_object)).bytes(),
             annotation::none);
        return;
      }
      std::lock_guard lk(o->mu);
      start_destroy(*o, m.origin());
      return;
    }
    case op_result: {
      const auto result = in.get<std::uint32_t>();
      const auto text = in.rest();
      std::shared_ptr<object> o;
      {
        std::lock_guard lk(table_mu_);
        if (auto it = destroying_.find(h.id); it != destroying_.end()) o = it->second;
      }
      if (o) {
        std::lock_guard lk(o->mu);
        o->destroy_result = static_cast<int>(result);
        o->destroy_reason.assign(reinterpret_cast<const char*>(text.data()), text.size());
      }
      return;
    }
    case op_forget: forget_here(h.id, true, nullptr); return;
    case op_gone: forget_here(h.id, false, nullptr); return;
    case op_gone_later: forget_here(h.id, false, "a message of this rank named"); return;
    default: detail::fail(MDSM_ERR_MALFORMED, "mdsm: a coordination handle message has unknown operation ", h.op);
  }
}

void services::destroy_handle(std::shared_ptr<object> o, const char* what) {
  const std::uint64_t id = o->id;
  {
    std::lock_guard lk(table_mu_);
    if (!destroying_.try_emplace(id, o).second)
      detail::fail(MDSM_ERR_BUSY, what, ": another thread of rank ", rank_, " is destroying ", kind_name(o->k), " ",
                   id_text(id));
  }
  const auto done = [&] {
    std::lock_guard lk(table_mu_);
    destroying_.erase(id);
  };
  int result = 0;
  std::string reason;
  undo_if_throws(done, [&] {
    {
      std::lock_guard lk(o->mu);
      o->destroy_result = 0;
      if (o->manager == rank_) start_destroy(*o, rank_);
    }
    if (o->manager != rank_)
      send(o->manager, h_handle, payload_builder(id, op_destroy).put(static_cast<std::uint32_t>(o->k)).bytes(),
           annotation::none);
    wait_until([&] {
      std::lock_guard lk(o->mu);
      return o->destroy_result != 0;
    });
    std::lock_guard lk(o->mu);
    result = o->destroy_result;
    reason = std::move(o->destroy_reason);
    o->destroy_result = 0;
  });
  done();
  if (result == destroyed) {
    if (o->manager != rank_) forget_here(id, false, nullptr);
    return;
  }
  if (result == busy)
    detail::fail(MDSM_ERR_BUSY, what, ": ", kind_name(o->k), " ", id_text(id), " is ", reason,
                 "; destroy an object only when no rank uses it (it stays usable)");
  forget_here(id, false, nullptr);
  detail::fail(MDSM_ERR_INVALID_HANDLE, what, ": ", kind_name(o->k), " ", id_text(id),
               " was already destroyed; a handle must not be used after destroy()");
}

}  // namespace mdsm::sync
