/* mdsm's MPI integration (mpi_ext/): MPI calls that carry an annotation, so an MPI message that
 * holds a pointer into the coherent region makes the data behind it visible.
 *
 * Each MDSM_ call mirrors its MPI call argument for argument; the sends take one more argument,
 * the annotation (mdsm_annotation, mdsm.h), and the receiving side learns it from the message:
 *   MDSM_RELEASE / MDSM_RELEASE_NT  sending is a release; receiving is an acquire that is
 *                                   complete before MDSM_Recv returns, or before the MDSM_Wait* /
 *                                   MDSM_Test* that completes the request reports it complete;
 *   MDSM_REQUEST                    carries the sender's vector time, no writes;
 *   MDSM_NONE                       carries nothing (costs what the plain MPI call costs).
 * MPI semantics are kept on any intracommunicator: datatypes (derived ones too) and counts,
 * MPI_Get_count / MPI_Get_elements on the returned status give the user's values, MPI_ANY_SOURCE,
 * MPI_ANY_TAG, MPI_PROC_NULL, non-overtaking order per (source, tag, communicator), truncation.
 * Messages sent with MDSM_ calls must be received with MDSM_ calls (and the other way round):
 * an MDSM message carries a 64-byte header in front of the user's data. (A MDSM_NONE message of
 * fewer than 64 bytes goes without one, so a plain MPI message that short and an MDSM receive, or
 * the other way round, exchange exactly the data; docs/MPI.md.)
 *
 * Buffers may lie in the coherent region on one side, both or neither. Every page a send buffer
 * spans is made valid before MPI reads it and every page a receive buffer spans is made writable
 * before MPI writes it, so MPI never faults and received bytes are ordinary writes of the
 * receiving rank. A buffer must lie wholly inside the region or wholly outside it.
 *
 * Requests returned by MDSM_Isend / MDSM_Irecv are completed by MDSM_Wait*, MDSM_Test* (at once,
 * by the calling thread) or by a plain MPI_Wait* / MPI_Test* (then mdsm's progress thread
 * finishes the request, which may take up to a few milliseconds longer). Plain MPI requests may
 * be mixed with MDSM requests in the arrays of MDSM_Waitall, MDSM_Waitany and MDSM_Testall.
 *
 * Errors are reported the MPI way: the communicator's error handler is invoked with an error
 * code whose MPI_Error_string names the problem (MPI_ERRORS_ARE_FATAL, the default, ends the job
 * with that message; under MPI_ERRORS_RETURN the code is returned), and mdsm_last_error() holds
 * the full message. mdsm must be initialized (mdsm_init) before any MDSM_ call.
 *
 * Collectives have a consistency meaning and keep MPI's results exactly:
 *   MDSM_Barrier   every participant is consistent with every participant's writes made before
 *                  the call;
 *   MDSM_Bcast     every receiver is consistent with the root's writes made before the call;
 *   MDSM_Reduce, MDSM_Allreduce, MDSM_Gather, MDSM_Allgather: consistent as after MDSM_Barrier.
 */
#ifndef MDSM_MPI_H
#define MDSM_MPI_H

#include <mdsm/mdsm.h>
#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- point to point ------------------------------------------------------------------------ */

int MDSM_Send(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
              mdsm_annotation annotation);
int MDSM_Ssend(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
               mdsm_annotation annotation);
int MDSM_Isend(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
               mdsm_annotation annotation, MPI_Request* request);
int MDSM_Recv(void* buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm, MPI_Status* status);
int MDSM_Irecv(void* buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm, MPI_Request* request);
int MDSM_Sendrecv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag, void* recvbuf,
                  int recvcount, MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm, MPI_Status* status,
                  mdsm_annotation annotation);
/* The status describes the user's data (MPI_Get_count gives what MDSM_Recv will receive). */
int MDSM_Probe(int source, int tag, MPI_Comm comm, MPI_Status* status);
int MDSM_Iprobe(int source, int tag, MPI_Comm comm, int* flag, MPI_Status* status);

/* Any request: MDSM requests are finished (data unpacked, acquire complete) before they are
 * reported complete; plain MPI requests are passed to MPI. */
int MDSM_Wait(MPI_Request* request, MPI_Status* status);
int MDSM_Waitall(int count, MPI_Request requests[], MPI_Status statuses[]);
int MDSM_Waitany(int count, MPI_Request requests[], int* index, MPI_Status* status);
int MDSM_Test(MPI_Request* request, int* flag, MPI_Status* status);
int MDSM_Testall(int count, MPI_Request requests[], int* flag, MPI_Status statuses[]);

/* ---- collectives (see above for what each guarantees) ------------------------------------- */

int MDSM_Barrier(MPI_Comm comm);
int MDSM_Bcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm);
int MDSM_Reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root,
                MPI_Comm comm);
int MDSM_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm);
int MDSM_Gather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                MPI_Datatype recvtype, int root, MPI_Comm comm);
int MDSM_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                   MPI_Datatype recvtype, MPI_Comm comm);

#ifdef __cplusplus
}
#endif
#endif
