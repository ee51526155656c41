// Nonblocking annotated calls. MDSM_Isend / MDSM_Irecv return a generalized request
// (MPI_Grequest_start): MPI reports it complete only once mdsm has finished the message (data
// copied out, side channel received, acquire complete). Whoever waits finishes it: an MDSM_Wait*
// or MDSM_Test* call at once, on the calling thread; a plain MPI_Wait* / MPI_Test* through the
// progress thread, which finishes every pending request on each turn of its loop.
#include "mpi_ext/ext.hpp"

#include "net/context.hpp"

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace mdsm::mpi_ext {

namespace {

struct request {
  std::mutex mu;  // held by whoever advances it
  bool is_send = false;
  send_op send;
  recv_op recv;
  MPI_Request greq = MPI_REQUEST_NULL;
  MPI_Comm comm = MPI_COMM_NULL;
  const detail::runtime* rt = nullptr;
  MPI_Status status{};    // reported by query()
  int rc = MPI_SUCCESS;   // how it ended
  bool finished = false;  // MPI_Grequest_complete was called (guarded by mu)
  // Whether query() puts rc into the status MPI sees. MPI raises a generalized request's error on
  // MPI_COMM_WORLD (it knows no other communicator), so the MDSM_Wait* / Test* calls clear this
  // and raise the error on the request's own communicator themselves; a plain MPI_Wait* leaves
  // it set (the error is then MPI_COMM_WORLD's).
  std::atomic<bool> report_error{true};
};

struct registry {
  std::mutex mu;
  std::unordered_map<MPI_Request, std::shared_ptr<request>> live;  // by generalized request
  std::atomic<int> pending{0};  // not yet finished
};
registry g_requests;

// The requests this thread holds (their mu), innermost last: a turn of background() on a thread
// inside one of them must not lock it again (std::mutex is not recursive). Each thread its own.
thread_local std::vector<const request*> t_held;
struct hold {
  std::unique_lock<std::mutex> lk;
  explicit hold(request& r) : lk(r.mu) { t_held.push_back(&r); }
  hold(request& r, std::try_to_lock_t) : lk(r.mu, std::try_to_lock) {
    if (lk.owns_lock()) t_held.push_back(&r);
  }
  ~hold() {
    if (lk.owns_lock()) t_held.pop_back();
  }
  hold(const hold&) = delete;
  hold& operator=(const hold&) = delete;
};

int query(void* extra, MPI_Status* status) {
  auto* r = static_cast<request*>(extra);
  *status = r->status;
  status->MPI_ERROR = r->report_error.load() ? r->rc : MPI_SUCCESS;
  return MPI_SUCCESS;
}

int free_request(void* extra) {
  auto* r = static_cast<request*>(extra);
  std::lock_guard lk(g_requests.mu);
  g_requests.live.erase(r->greq);  // may destroy r
  return MPI_SUCCESS;
}

int cancel_request(void*, int) { return MPI_SUCCESS; }  // an MDSM message cannot be cancelled

std::shared_ptr<request> find(MPI_Request req) {
  if (req == MPI_REQUEST_NULL) return nullptr;
  std::lock_guard lk(g_requests.mu);
  auto it = g_requests.live.find(req);
  return it == g_requests.live.end() ? nullptr : it->second;
}

// Moves r on (to the end with `block`); completes the generalized request once done.
// Pre: r.mu held.
bool advance(request& r, bool block) {
  if (r.finished) return true;
  if (r.is_send) {
    int flag = 1, rc = MPI_SUCCESS;
    if (block) rc = wait_send(*r.rt, r.send, r.comm);
    else rc = PMPI_Testall(3, r.send.req, &flag, MPI_STATUSES_IGNORE);
    if (!flag) return false;
    r.rc = rc;
    r.status = MPI_Status{};
    r.status.MPI_SOURCE = MPI_ANY_SOURCE;
    r.status.MPI_TAG = MPI_ANY_TAG;
    set_received_bytes(&r.status, 0);
  } else {
    if (!mpi_ext::advance(r.recv, block)) return false;
    r.rc = r.recv.rc;
    r.status = r.recv.status;
  }
  r.finished = true;
  g_requests.pending.fetch_sub(1, std::memory_order_relaxed);
  PMPI_Grequest_complete(r.greq);
  return true;
}

// The progress thread's turn: finishes what nobody waits for in MDSM_Wait* (plain MPI_Wait).
// True while requests remain unfinished.
bool background(void*) {
  if (g_requests.pending.load(std::memory_order_relaxed) == 0) return false;
  std::vector<std::shared_ptr<request>> todo;
  {
    std::lock_guard lk(g_requests.mu);
    for (auto& [h, r] : g_requests.live) todo.push_back(r);
  }
  for (auto& r : todo) {
    if (std::find(t_held.begin(), t_held.end(), r.get()) != t_held.end()) continue;
    hold h(*r, std::try_to_lock);
    if (h.lk.owns_lock()) advance(*r, false);
  }
  return g_requests.pending.load(std::memory_order_relaxed) != 0;
}

// Registers r under a new generalized request, returned in *out.
int start(context& c, const std::shared_ptr<request>& r, MPI_Request* out) {
  // Each mdsm session has its own progress thread: register with this one (once per process
  // left every later session's plain MPI_Wait, and its large sends to itself, waiting forever).
  static std::atomic<std::uint64_t> session{0};
  if (session.exchange(c.rt->session, std::memory_order_acq_rel) != c.rt->session)
    c.rt->progress->set_background(&background, nullptr);
  PMPI_Grequest_start(query, free_request, cancel_request, r.get(), &r->greq);
  {
    std::lock_guard lk(g_requests.mu);
    g_requests.live.emplace(r->greq, r);
  }
  g_requests.pending.fetch_add(1, std::memory_order_relaxed);
  c.rt->progress->background_added();  // a deep nap would not see it for 20 ms
  *out = r->greq;
  return MPI_SUCCESS;
}

// The runtime, if mdsm is up (plain requests may be waited for without it).
const detail::runtime* runtime_if_up() {
  if (!mdsm::initialized()) return nullptr;
  try {
    return &detail::rt();
  } catch (const error&) {
    return nullptr;
  }
}

// MPI_Wait / MPI_Waitall on plain (or finished) requests, serving mdsm meanwhile when blocking
// inside MPI is not allowed (ext.hpp, may_block).
int wait_plain(MPI_Request* req, MPI_Status* status) {
  const detail::runtime* rt = runtime_if_up();
  return rt ? wait_one(*rt, req, status) : PMPI_Wait(req, status);
}

int wait_plain_all(int count, MPI_Request reqs[], MPI_Status statuses[]) {
  const detail::runtime* rt = runtime_if_up();
  if (rt == nullptr || may_block(*rt)) {
    stats::mpi_wait_scope waiting;
    return PMPI_Waitall(count, reqs, statuses);
  }
  int rc = MPI_SUCCESS;
  net::no_switch_scope stay;  // MPI waits block the OS thread (docs/FIBERS.md)
  rt->progress->wait_until([&] {
    int flag = 0;
    rc = PMPI_Testall(count, reqs, &flag, statuses);
    return flag != 0 || rc != MPI_SUCCESS;
  });
  return rc;
}

// Finishes every MDSM request among reqs (blocking) or moves them on (not).
void advance_all(int count, MPI_Request reqs[], bool block) {
  for (int i = 0; i < count; ++i)
    if (auto r = find(reqs[i])) {
      hold h(*r);
      advance(*r, block);
    }
}

// After MPI reported r complete (its error hidden from MPI): r's error, raised on r's
// communicator, else rc.
int outcome(const std::shared_ptr<request>& r, int rc) {
  if (!r || r->rc == MPI_SUCCESS) return rc;
  PMPI_Comm_call_errhandler(r->comm, r->rc);
  return r->rc;
}

// The MDSM requests among reqs, by index, their errors hidden from MPI (see request::report_error).
std::vector<std::pair<int, std::shared_ptr<request>>> take_errors(int count, MPI_Request reqs[]) {
  std::vector<std::pair<int, std::shared_ptr<request>>> out;
  for (int i = 0; i < count; ++i)
    if (auto r = find(reqs[i])) {
      r->report_error.store(false);
      out.emplace_back(i, std::move(r));
    }
  return out;
}

// After a Waitall / Testall that completed all `count` requests: the MDSM requests' errors go into
// the statuses (MPI_ERR_IN_STATUS, raised on the first failed request's communicator), else rc.
int outcome_all(const std::vector<std::pair<int, std::shared_ptr<request>>>& mine, int rc, int count,
                MPI_Status statuses[]) {
  const request* failed = nullptr;
  for (const auto& [i, r] : mine)
    if (r->rc != MPI_SUCCESS) {
      failed = r.get();
      break;
    }
  if (failed == nullptr) return rc;
  if (statuses != MPI_STATUSES_IGNORE) {
    // Unless MPI reported an error itself, it set no MPI_ERROR field: all the others succeeded.
    if (rc != MPI_ERR_IN_STATUS)
      for (int i = 0; i < count; ++i) statuses[i].MPI_ERROR = MPI_SUCCESS;
    for (const auto& [i, r] : mine) statuses[i].MPI_ERROR = r->rc;
  }
  PMPI_Comm_call_errhandler(failed->comm, MPI_ERR_IN_STATUS);
  return MPI_ERR_IN_STATUS;
}

}  // namespace

}  // namespace mdsm::mpi_ext

using namespace mdsm::mpi_ext;

extern "C" {

int MDSM_Isend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, mdsm_annotation given,
               MPI_Request* request) {
  mdsm_annotation a = MDSM_NONE;
  if (const int rc = checked_annotation(&given, comm, "MDSM_Isend", a); rc != MPI_SUCCESS) return rc;
  if (dest == MPI_PROC_NULL) return PMPI_Isend(buf, count, type, dest, tag, comm, request);
  context c = enter(comm, "MDSM_Isend");
  if (c.rc != MPI_SUCCESS) return c.rc;
  auto r = std::make_shared<mdsm::mpi_ext::request>();
  r->is_send = true;
  r->rt = c.rt;
  r->comm = comm;
  if (const int rc = send(c, r->send, buf, count, type, dest, tag, comm, a, send_mode::nonblocking);
      rc != MPI_SUCCESS)
    return rc;
  return start(c, r, request);
}

int MDSM_Irecv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm, MPI_Request* request) {
  if (source == MPI_PROC_NULL) return PMPI_Irecv(buf, count, type, source, tag, comm, request);
  auto r = std::make_shared<mdsm::mpi_ext::request>();
  recv_op& op = r->recv;
  r->comm = comm;
  if (const int rc = prepare_recv(op, buf, count, type, source, tag, comm, "MDSM_Irecv"); rc != MPI_SUCCESS) return rc;
  if (const int rc = post_recv(op, false); rc != MPI_SUCCESS) return rc;
  r->rt = op.c.rt;
  return start(op.c, r, request);
}

int MDSM_Wait(MPI_Request* request, MPI_Status* status) {
  auto r = find(*request);
  if (r) {
    if (mdsm::net::current_handler() != nullptr)
      return raise(r->comm, errc::not_initialized, "MDSM_Wait: called from a message handler (it blocks)");
    hold h(*r);
    advance(*r, true);
    r->report_error.store(false);
  }
  const int rc = wait_plain(request, status);
  return outcome(r, rc);
}

int MDSM_Test(MPI_Request* request, int* flag, MPI_Status* status) {
  auto r = find(*request);
  if (r) {
    hold h(*r);
    advance(*r, false);
    r->report_error.store(false);
  }
  const int rc = PMPI_Test(request, flag, status);
  if (r && !*flag) r->report_error.store(true);
  return *flag ? outcome(r, rc) : rc;
}

int MDSM_Waitall(int count, MPI_Request requests[], MPI_Status statuses[]) {
  if (mdsm::net::current_handler() != nullptr)
    return raise(MPI_COMM_WORLD, errc::not_initialized, "MDSM_Waitall: called from a message handler (it blocks)");
  advance_all(count, requests, true);
  const auto mine = take_errors(count, requests);
  const int rc = wait_plain_all(count, requests, statuses);
  return outcome_all(mine, rc, count, statuses);
}

int MDSM_Testall(int count, MPI_Request requests[], int* flag, MPI_Status statuses[]) {
  advance_all(count, requests, false);
  const auto mine = take_errors(count, requests);
  const int rc = PMPI_Testall(count, requests, flag, statuses);
  if (!*flag) {
    for (const auto& [i, r] : mine) r->report_error.store(true);
    return rc;
  }
  return outcome_all(mine, rc, count, statuses);
}

int MDSM_Waitany(int count, MPI_Request requests[], int* index, MPI_Status* status) {
  if (mdsm::net::current_handler() != nullptr)
    return raise(MPI_COMM_WORLD, errc::not_initialized, "MDSM_Waitany: called from a message handler (it blocks)");
  for (;;) {
    advance_all(count, requests, false);
    const auto mine = take_errors(count, requests);
    int flag = 0;
    const int rc = PMPI_Testany(count, requests, index, &flag, status);
    std::shared_ptr<request> done;
    for (const auto& [i, r] : mine) {
      if (flag && i == *index) done = r;
      else r->report_error.store(true);
    }
    if (flag) return outcome(done, rc);
    if (rc != MPI_SUCCESS) return rc;
    // Deliver mdsm's own frames meanwhile (an acquire may wait for records).
    mdsm::detail::rt().progress->poll_once();
  }
}

}  // extern "C"
