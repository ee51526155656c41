// libmdsm_safe: the PMPI interposition layer of safe mode (docs/MPI.md, "Safe mode").
//
// The plain MPI calls below behave as their MDSM_ forms with the communicator's annotation
// (annotation_policy.hpp; RELEASE unless changed), so an unmodified MPI program may pass pointers
// into the coherent region. MPI_Init / MPI_Init_thread start MPI at MPI_THREAD_MULTIPLE and then
// mdsm over MPI_COMM_WORLD; MPI_Finalize ends mdsm, then MPI. Every other MPI call reaches MPI
// untouched. MDSM_ calls reach MPI through the PMPI_ names, and so does mdsm itself, so nothing
// here is entered twice.
//
// Threads: any application thread may call these (MPI_THREAD_MULTIPLE); the only state is
// annotation_policy's, which says how it is protected.
#include <mdsm/mdsm.h>
#include <mdsm/mdsm_mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "annotation_policy.hpp"

#define MDSM_SAFE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using mdsm::safe::policy;
using mdsm::safe::policy_for;

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  }
  return "an unknown level";
}

// A start-up problem every rank sees alike: the lowest rank that sees it says so once, then every
// rank ends MPI and exits with status 1 (mpirun then exits non-zero).
[[noreturn]] void fail_start(bool failed_here, const std::string& message) {
  int rank = 0, size = 1;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  PMPI_Comm_size(MPI_COMM_WORLD, &size);
  int mine = failed_here ? rank : size, first = size;
  PMPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (rank == first) std::fprintf(stderr, "%s\n", message.c_str());
  std::fflush(stderr);
  PMPI_Finalize();
  std::exit(1);
}

int start(int* argc, char*** argv, int* provided) {
  std::string env_problem;
  const bool env_ok = mdsm::safe::load_default(&env_problem);
  int got = MPI_THREAD_SINGLE;
  int rc = PMPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &got);
  if (rc != MPI_SUCCESS) return rc;
  // Every rank takes part in the agreement, whatever it saw itself.
  int bad = (!env_ok || got < MPI_THREAD_MULTIPLE) ? 1 : 0, any_bad = 0;
  PMPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any_bad) {
    if (!env_ok) fail_start(true, env_problem);
    if (got < MPI_THREAD_MULTIPLE)
      fail_start(true, std::string("mdsm safe mode: MPI provides only ") + thread_level_name(got) +
                           "; mdsm needs MPI_THREAD_MULTIPLE (use an MPI library built with thread support)");
    fail_start(false, "");
  }
  if ((rc = mdsm::safe::create_keyval()) != MPI_SUCCESS) return rc;
  if (mdsm_init_comm(MPI_COMM_WORLD, nullptr) != MDSM_SUCCESS) {
    std::fprintf(stderr, "mdsm safe mode: mdsm could not start: %s\n", mdsm_last_error());
    PMPI_Abort(MPI_COMM_WORLD, 1);
  }
  // MPI_Query_thread says MPI_THREAD_MULTIPLE from now on; provided agrees with it (it is at
  // least what any program may ask for).
  if (provided != nullptr) *provided = got;
  return MPI_SUCCESS;
}

}  // namespace

// ---- start-up and shut-down --------------------------------------------------------------------

MDSM_SAFE_EXPORT int MPI_Init(int* argc, char*** argv) { return start(argc, argv, nullptr); }

MDSM_SAFE_EXPORT int MPI_Init_thread(int* argc, char*** argv, int /*required*/, int* provided) {
  return start(argc, argv, provided);
}

MDSM_SAFE_EXPORT int MPI_Finalize(void) {
  // A program that started mdsm itself may also have ended it.
  if (mdsm_initialized() && mdsm_finalize() != MDSM_SUCCESS)
    std::fprintf(stderr, "mdsm safe mode: MPI_Finalize: mdsm_finalize failed: %s\n", mdsm_last_error());
  mdsm::safe::free_keyval();
  return PMPI_Finalize();
}

// ---- per-communicator annotation ------------------------------------------------------------

MDSM_SAFE_EXPORT int MPI_Comm_set_info(MPI_Comm comm, MPI_Info info) {
  if (comm == MPI_COMM_NULL) return PMPI_Comm_set_info(comm, info);
  bool found = false;
  mdsm_annotation a = MDSM_RELEASE;
  int rc = mdsm::safe::annotation_from_info(info, "MPI_Comm_set_info", comm, &found, &a);
  if (rc != MPI_SUCCESS) {
    PMPI_Comm_call_errhandler(comm, rc);
    return rc;
  }
  rc = PMPI_Comm_set_info(comm, info);
  if (rc == MPI_SUCCESS && found) rc = mdsm::safe::set_annotation(comm, a);
  return rc;
}

// As MPI-4 says of hints: the new communicator's are those in info, not comm's (MPI_Comm_dup,
// which copies the attribute, keeps comm's annotation).
MDSM_SAFE_EXPORT int MPI_Comm_dup_with_info(MPI_Comm comm, MPI_Info info, MPI_Comm* newcomm) {
  if (comm == MPI_COMM_NULL) return PMPI_Comm_dup_with_info(comm, info, newcomm);
  bool found = false;
  mdsm_annotation a = MDSM_RELEASE;
  int rc = mdsm::safe::annotation_from_info(info, "MPI_Comm_dup_with_info", comm, &found, &a);
  if (rc != MPI_SUCCESS) {
    if (newcomm != nullptr) *newcomm = MPI_COMM_NULL;
    PMPI_Comm_call_errhandler(comm, rc);
    return rc;
  }
  rc = PMPI_Comm_dup_with_info(comm, info, newcomm);
  if (rc != MPI_SUCCESS) return rc;
  return found ? mdsm::safe::set_annotation(*newcomm, a) : mdsm::safe::clear_annotation(*newcomm);
}

// ---- point to point ------------------------------------------------------------------------

MDSM_SAFE_EXPORT int MPI_Send(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm) {
  const policy p = policy_for(comm);
  if (p.pass_through) return PMPI_Send(buf, count, datatype, dest, tag, comm);
  return MDSM_Send(buf, count, datatype, dest, tag, comm, p.annotation);
}

MDSM_SAFE_EXPORT int MPI_Ssend(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm) {
  const policy p = policy_for(comm);
  if (p.pass_through) return PMPI_Ssend(buf, count, datatype, dest, tag, comm);
  return MDSM_Ssend(buf, count, datatype, dest, tag, comm, p.annotation);
}

MDSM_SAFE_EXPORT int MPI_Isend(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                               MPI_Request* request) {
  const policy p = policy_for(comm);
  if (p.pass_through) return PMPI_Isend(buf, count, datatype, dest, tag, comm, request);
  return MDSM_Isend(buf, count, datatype, dest, tag, comm, p.annotation, request);
}

MDSM_SAFE_EXPORT int MPI_Recv(void* buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
                              MPI_Status* status) {
  if (policy_for(comm).pass_through) return PMPI_Recv(buf, count, datatype, source, tag, comm, status);
  return MDSM_Recv(buf, count, datatype, source, tag, comm, status);
}

MDSM_SAFE_EXPORT int MPI_Irecv(void* buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
                               MPI_Request* request) {
  if (policy_for(comm).pass_through) return PMPI_Irecv(buf, count, datatype, source, tag, comm, request);
  return MDSM_Irecv(buf, count, datatype, source, tag, comm, request);
}

MDSM_SAFE_EXPORT int MPI_Sendrecv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag,
                                  void* recvbuf, int recvcount, MPI_Datatype recvtype, int source, int recvtag,
                                  MPI_Comm comm, MPI_Status* status) {
  const policy p = policy_for(comm);
  if (p.pass_through)
    return PMPI_Sendrecv(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source, recvtag,
                         comm, status);
  return MDSM_Sendrecv(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source, recvtag,
                       comm, status, p.annotation);
}

MDSM_SAFE_EXPORT int MPI_Probe(int source, int tag, MPI_Comm comm, MPI_Status* status) {
  if (policy_for(comm).pass_through) return PMPI_Probe(source, tag, comm, status);
  return MDSM_Probe(source, tag, comm, status);
}

MDSM_SAFE_EXPORT int MPI_Iprobe(int source, int tag, MPI_Comm comm, int* flag, MPI_Status* status) {
  if (policy_for(comm).pass_through) return PMPI_Iprobe(source, tag, comm, flag, status);
  return MDSM_Iprobe(source, tag, comm, flag, status);
}

// ---- completion (MDSM_ forms take plain MPI requests too) -------------------------------------

MDSM_SAFE_EXPORT int MPI_Wait(MPI_Request* request, MPI_Status* status) { return MDSM_Wait(request, status); }

MDSM_SAFE_EXPORT int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[]) {
  return MDSM_Waitall(count, requests, statuses);
}

MDSM_SAFE_EXPORT int MPI_Waitany(int count, MPI_Request requests[], int* index, MPI_Status* status) {
  return MDSM_Waitany(count, requests, index, status);
}

MDSM_SAFE_EXPORT int MPI_Test(MPI_Request* request, int* flag, MPI_Status* status) {
  return MDSM_Test(request, flag, status);
}

MDSM_SAFE_EXPORT int MPI_Testall(int count, MPI_Request requests[], int* flag, MPI_Status statuses[]) {
  return MDSM_Testall(count, requests, flag, statuses);
}

// ---- collectives -------------------------------------------------------------------------------
// They take no annotation: each keeps its MDSM_ meaning on every intracommunicator, `none` ones
// too (only the MDSM_ forms make coherent buffers safe for MPI to read and write).

MDSM_SAFE_EXPORT int MPI_Barrier(MPI_Comm comm) {
  if (policy_for(comm).pass_through) return PMPI_Barrier(comm);
  return MDSM_Barrier(comm);
}

MDSM_SAFE_EXPORT int MPI_Bcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm) {
  if (policy_for(comm).pass_through) return PMPI_Bcast(buffer, count, datatype, root, comm);
  return MDSM_Bcast(buffer, count, datatype, root, comm);
}

MDSM_SAFE_EXPORT int MPI_Reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                                int root, MPI_Comm comm) {
  if (policy_for(comm).pass_through)
    return PMPI_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm);
  return MDSM_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm);
}

MDSM_SAFE_EXPORT int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                                   MPI_Comm comm) {
  if (policy_for(comm).pass_through) return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
  return MDSM_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
}

MDSM_SAFE_EXPORT int MPI_Gather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm) {
  if (policy_for(comm).pass_through)
    return PMPI_Gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
  return MDSM_Gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
}

MDSM_SAFE_EXPORT int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                   int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  if (policy_for(comm).pass_through)
    return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  return MDSM_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}
