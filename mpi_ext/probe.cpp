// MDSM_Probe and MDSM_Iprobe, and the stash of messages they take out of MPI.
//
// A large message's data travels on the side channel (ext.hpp), so what a probe finds on the
// user's communicator is the header alone, whose size says nothing of the user's count. A probe
// that finds a message of exactly a header's size therefore takes it out of MPI (a matched probe,
// then MPI_Mrecv), reads the header and, for a large message, the data's size it states. The
// header then waits in the communicator's stash for the receive that follows:
// every receive form takes from the stash first (post_recv; the fast paths go to it while
// any_stashed()). Any other message keeps MPI's own probe: its size tells the count and it stays
// in MPI, where its order is MPI's.
#include "mpi_ext/ext.hpp"

#include "net/context.hpp"

namespace mdsm::mpi_ext {

std::atomic<int> g_stashed{0};

namespace {

bool matches(const comm_state::stashed& e, int source, int tag) {
  return (source == MPI_ANY_SOURCE || e.status.MPI_SOURCE == source) &&
         (tag == MPI_ANY_TAG || e.status.MPI_TAG == tag);
}

// Probes (source, tag) on comm; `block`: until a message is there, inside MPI when may_block,
// else polling while mdsm's frames are delivered (ext.hpp, may_block).
int probe_mpi(const detail::runtime& rt, int source, int tag, MPI_Comm comm, bool block, int* flag,
              MPI_Status* st) {
  if (!block) return PMPI_Iprobe(source, tag, comm, flag, st);
  *flag = 1;
  if (may_block(rt)) {
    stats::mpi_wait_scope waiting;
    return PMPI_Probe(source, tag, comm, st);
  }
  int rc = MPI_SUCCESS;
  net::no_switch_scope stay;  // MPI waits block the OS thread (docs/FIBERS.md)
  rt.progress->wait_until([&] {
    int f = 0;
    rc = PMPI_Iprobe(source, tag, comm, &f, st);
    return f != 0 || rc != MPI_SUCCESS;
  });
  return rc;
}

enum class found { none, yes };

// The first stashed message that (source, tag) match, as a probe reports it: its status with the
// user's count. A large message's count is its data's, which its header states (ext.hpp,
// side_bytes): the data itself may still be on its way.
found from_stash(context& c, int source, int tag, MPI_Status* st) {
  comm_state& cs = *c.cs;
  std::lock_guard lk(cs.stash_mu);
  auto it = cs.stash.begin();
  while (it != cs.stash.end() && !matches(*it, source, tag)) ++it;
  if (it == cs.stash.end()) return found::none;
  *st = it->status;
  if (!it->received) {  // a whole message, still in MPI: its size tells
    const std::size_t bytes = net::received_bytes(it->status);
    set_received_bytes(st, static_cast<MPI_Count>(probed_data(bytes)));
  } else if (it->h.magic != k_magic || !it->h.side_data) {  // no data (or no MDSM message: the receive reports it)
    set_received_bytes(st, 0);
  } else {
    set_received_bytes(st, static_cast<MPI_Count>(side_bytes(it->h)));
  }
  return found::yes;
}

// MDSM_Probe (block) and MDSM_Iprobe.
int probe(int source, int tag, MPI_Comm comm, bool block, int* flag, MPI_Status* status, const char* call) {
  context c = enter(comm, call);
  if (c.rc != MPI_SUCCESS) return c.rc;
  for (;;) {
    MPI_Status st;
    int rc = MPI_SUCCESS;
    // A stashed message matched before anything still in MPI.
    if (any_stashed() && from_stash(c, source, tag, &st) == found::yes) {
      *flag = 1;
      if (status != MPI_STATUS_IGNORE) *status = st;
      return MPI_SUCCESS;
    }
    rc = probe_mpi(*c.rt, source, tag, comm, block, flag, &st);
    if (rc != MPI_SUCCESS || !*flag) return rc;
    const std::size_t bytes = net::received_bytes(st);
    if (bytes != static_cast<std::size_t>(k_header)) {
      // The data is in the message, behind a full header or alone (headerless), which its size
      // tells (or it is no MDSM message: the receive reports that).
      set_received_bytes(&st, static_cast<MPI_Count>(probed_data(bytes)));
      if (status != MPI_STATUS_IGNORE) *status = st;
      return MPI_SUCCESS;
    }
    // Possibly a large message's header: take it out of MPI. The message just probed is the first
    // from its source with its tag, so a matched probe for exactly those finds it, unless another
    // thread received it meanwhile (then it finds a later one, or none).
    MPI_Message m = MPI_MESSAGE_NULL;
    int got = 0;
    MPI_Status mst;
    if (rc = PMPI_Improbe(st.MPI_SOURCE, st.MPI_TAG, comm, &got, &m, &mst); rc != MPI_SUCCESS) return rc;
    if (!got) continue;
    comm_state::stashed e;
    e.status = mst;
    if (net::received_bytes(mst) == static_cast<std::size_t>(k_header)) {
      if (rc = PMPI_Mrecv(&e.h, k_header, MPI_BYTE, &m, &e.status); rc != MPI_SUCCESS) return rc;
      e.received = true;
    } else {
      e.msg = m;  // another thread's receive raced this probe: the receive that takes it posts MPI_Mrecv
    }
    {
      std::lock_guard lk(c.cs->stash_mu);
      c.cs->stash.push_back(e);
    }
    g_stashed.fetch_add(1, std::memory_order_release);
    // The next turn reports it from the stash (or an earlier stashed match).
  }
}

}  // namespace

bool take_stashed(recv_op& op) {
  comm_state& cs = *op.c.cs;
  std::lock_guard lk(cs.stash_mu);
  for (auto it = cs.stash.begin(); it != cs.stash.end(); ++it) {
    if (!matches(*it, op.source, op.tag)) continue;
    op.status = it->status;
    if (it->received) op.h = it->h;
    else op.msg = it->msg;
    cs.stash.erase(it);
    g_stashed.fetch_sub(1, std::memory_order_release);
    return true;
  }
  return false;
}

}  // namespace mdsm::mpi_ext

using namespace mdsm::mpi_ext;

extern "C" {

int MDSM_Probe(int source, int tag, MPI_Comm comm, MPI_Status* status) {
  if (source == MPI_PROC_NULL) return PMPI_Probe(source, tag, comm, status);
  int flag = 0;
  return probe(source, tag, comm, true, &flag, status, "MDSM_Probe");
}

int MDSM_Iprobe(int source, int tag, MPI_Comm comm, int* flag, MPI_Status* status) {
  if (source == MPI_PROC_NULL) return PMPI_Iprobe(source, tag, comm, flag, status);
  return probe(source, tag, comm, false, flag, status, "MDSM_Iprobe");
}

}  // extern "C"
