// The collectives with a consistency meaning. Their consistency messages are MDSM messages
// without data on the communicator's own duplicate (comm_state::coll, made by the first
// collective on it), so they never match the application's messages; the data moves by the
// plain MPI collective on the application's communicator, after the buffers are made safe.
#include "mpi_ext/ext.hpp"

#include "net/context.hpp"
#include "stats/counters.hpp"

namespace mdsm::mpi_ext {

namespace {

constexpr int k_tag_arrive = 1;  // participant -> root: RELEASE_NT
constexpr int k_tag_depart = 2;  // root -> participant: RELEASE
constexpr int k_tag_bcast = 3;   // root -> receiver: RELEASE

// The collectives' duplicate of comm. Collective the first time (every member makes it in the
// same collective call).
int coll_comm(context& c, MPI_Comm comm, MPI_Comm& out) {
  if (c.cs->coll == MPI_COMM_NULL) {
    if (const int rc = PMPI_Comm_dup(comm, &c.cs->coll); rc != MPI_SUCCESS) return rc;
    PMPI_Comm_set_errhandler(c.cs->coll, MPI_ERRORS_RETURN);
  }
  out = c.cs->coll;
  return MPI_SUCCESS;
}

int empty_send(MPI_Comm coll, int dest, int tag, mdsm_annotation a) {
  context c = enter(coll, "MDSM collective");
  if (c.rc != MPI_SUCCESS) return c.rc;
  send_op op;
  return send(c, op, nullptr, 0, MPI_BYTE, dest, tag, coll, a, send_mode::standard);
}

// Receives an empty MDSM message; with keep, its release information is returned, not acquired.
int empty_recv(MPI_Comm coll, int source, int tag, bool keep, std::optional<coherence::release_info>* out) {
  recv_op op;
  op.c = enter(coll, "MDSM collective");
  if (op.c.rc != MPI_SUCCESS) return op.c.rc;
  op.buf = nullptr;
  op.count = 0;
  op.type = MPI_BYTE;
  op.source = source;
  op.tag = tag;
  op.comm = coll;
  op.keep_release = keep;
  post_recv(op, true);
  advance(op, true);
  if (out != nullptr) *out = std::move(op.release);
  return op.rc;
}

// Every member consistent with every member's writes made before the call: arrivals (RELEASE_NT)
// gathered at rank 0, which acquires them as one group, then departures (RELEASE) tailored to
// each member.
int consistency_barrier(context& c, MPI_Comm comm, const char* call) {
  if (net::current_handler() != nullptr)
    return raise(comm, errc::not_initialized, detail::cat(call, ": called from a message handler (it blocks)"));
  MPI_Comm coll;
  if (const int rc = coll_comm(c, comm, coll); rc != MPI_SUCCESS) return rc;
  int rank = 0, size = 0;
  PMPI_Comm_rank(coll, &rank);
  PMPI_Comm_size(coll, &size);
  if (size == 1) return MPI_SUCCESS;
  if (rank != 0) {
    if (const int rc = empty_send(coll, 0, k_tag_arrive, MDSM_RELEASE_NT); rc != MPI_SUCCESS) return rc;
    return empty_recv(coll, 0, k_tag_depart, false, nullptr);
  }
  std::vector<coherence::release_info> arrivals;
  for (int i = 1; i < size; ++i) {
    std::optional<coherence::release_info> info;
    if (const int rc = empty_recv(coll, MPI_ANY_SOURCE, k_tag_arrive, true, &info); rc != MPI_SUCCESS) return rc;
    if (info) arrivals.push_back(std::move(*info));
  }
  try {
    stats::add(stats::counter::mpi_acquires, arrivals.size());
    c.rt->engine->wait_acquire(c.rt->engine->begin_acquire(std::move(arrivals)));
  } catch (const error& e) {
    return raise(comm, errc::not_initialized, detail::cat(call, ": ", e.what()));
  }
  for (int i = 1; i < size; ++i)
    if (const int rc = empty_send(coll, i, k_tag_depart, MDSM_RELEASE); rc != MPI_SUCCESS) return rc;
  return MPI_SUCCESS;
}

int comm_size(MPI_Comm comm) {
  int n = 0;
  PMPI_Comm_size(comm, &n);
  return n;
}

}  // namespace

}  // namespace mdsm::mpi_ext

using namespace mdsm::mpi_ext;

extern "C" {

int MDSM_Barrier(MPI_Comm comm) {
  context c = enter(comm, "MDSM_Barrier");
  if (c.rc != MPI_SUCCESS) return c.rc;
  return consistency_barrier(c, comm, "MDSM_Barrier");
}

int MDSM_Bcast(void* buf, int count, MPI_Datatype type, int root, MPI_Comm comm) {
  static constexpr const char* k_call = "MDSM_Bcast";
  context c = enter(comm, k_call);
  if (c.rc != MPI_SUCCESS) return c.rc;
  if (mdsm::net::current_handler() != nullptr)
    return raise(comm, errc::not_initialized, "MDSM_Bcast: called from a message handler (it blocks)");
  MPI_Comm coll;
  if (const int rc = coll_comm(c, comm, coll); rc != MPI_SUCCESS) return rc;
  int rank = 0;
  PMPI_Comm_rank(comm, &rank);
  const int size = comm_size(comm);
  if (root < 0 || root >= size) return PMPI_Bcast(buf, count, type, root, comm);  // MPI reports it
  // Receivers first become consistent with the root, then their buffers are made writable (an
  // acquire after that could take the pages away again).
  if (rank == root) {
    for (int i = 0; i < size; ++i)
      if (i != root)
        if (const int rc = empty_send(coll, i, k_tag_bcast, MDSM_RELEASE); rc != MPI_SUCCESS) return rc;
  } else if (const int rc = empty_recv(coll, root, k_tag_bcast, false, nullptr); rc != MPI_SUCCESS) {
    return rc;
  }
  buffer b;
  if (const int rc = describe(c, comm, buf, count, type, rank != root, b, k_call); rc != MPI_SUCCESS) return rc;
  return PMPI_Bcast(buf, count, type, root, comm);
}

int MDSM_Reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, int root,
                MPI_Comm comm) {
  static constexpr const char* k_call = "MDSM_Reduce";
  context c = enter(comm, k_call);
  if (c.rc != MPI_SUCCESS) return c.rc;
  if (const int rc = consistency_barrier(c, comm, k_call); rc != MPI_SUCCESS) return rc;
  int rank = 0;
  PMPI_Comm_rank(comm, &rank);
  buffer b;
  if (sendbuf != MPI_IN_PLACE)
    if (const int rc = describe(c, comm, sendbuf, count, type, false, b, k_call); rc != MPI_SUCCESS) return rc;
  if (rank == root)
    if (const int rc = describe(c, comm, recvbuf, count, type, true, b, k_call); rc != MPI_SUCCESS) return rc;
  return PMPI_Reduce(sendbuf, recvbuf, count, type, op, root, comm);
}

int MDSM_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  static constexpr const char* k_call = "MDSM_Allreduce";
  context c = enter(comm, k_call);
  if (c.rc != MPI_SUCCESS) return c.rc;
  if (const int rc = consistency_barrier(c, comm, k_call); rc != MPI_SUCCESS) return rc;
  buffer b;
  if (sendbuf != MPI_IN_PLACE)
    if (const int rc = describe(c, comm, sendbuf, count, type, false, b, k_call); rc != MPI_SUCCESS) return rc;
  if (const int rc = describe(c, comm, recvbuf, count, type, true, b, k_call); rc != MPI_SUCCESS) return rc;
  return PMPI_Allreduce(sendbuf, recvbuf, count, type, op, comm);
}

int MDSM_Gather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                MPI_Datatype recvtype, int root, MPI_Comm comm) {
  static constexpr const char* k_call = "MDSM_Gather";
  context c = enter(comm, k_call);
  if (c.rc != MPI_SUCCESS) return c.rc;
  if (const int rc = consistency_barrier(c, comm, k_call); rc != MPI_SUCCESS) return rc;
  int rank = 0;
  PMPI_Comm_rank(comm, &rank);
  buffer b;
  if (sendbuf != MPI_IN_PLACE)
    if (const int rc = describe(c, comm, sendbuf, sendcount, sendtype, false, b, k_call); rc != MPI_SUCCESS) return rc;
  if (rank == root)
    if (const int rc = describe(c, comm, recvbuf, recvcount * comm_size(comm), recvtype, true, b, k_call);
        rc != MPI_SUCCESS)
      return rc;
  return PMPI_Gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
}

int MDSM_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                   MPI_Datatype recvtype, MPI_Comm comm) {
  static constexpr const char* k_call = "MDSM_Allgather";
  context c = enter(comm, k_call);
  if (c.rc != MPI_SUCCESS) return c.rc;
  if (const int rc = consistency_barrier(c, comm, k_call); rc != MPI_SUCCESS) return rc;
  buffer b;
  if (sendbuf != MPI_IN_PLACE)
    if (const int rc = describe(c, comm, sendbuf, sendcount, sendtype, false, b, k_call); rc != MPI_SUCCESS) return rc;
  if (const int rc = describe(c, comm, recvbuf, recvcount * comm_size(comm), recvtype, true, b, k_call);
      rc != MPI_SUCCESS)
    return rc;
  return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}

}  // extern "C"
