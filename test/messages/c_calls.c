/* C API calls made from C with any int where the API takes an enum, as a C program may (C enums
 * are ints). test_misuse.cpp uses them: a C++ caller cannot hold such a value in an mdsm_annotation
 * or mdsm_status without undefined behaviour of its own (UBSan: "load of value 258, which is not
 * a valid value for type 'mdsm_annotation'"). */
#include <mdsm/mdsm.h>

mdsm_status c_send_with_annotation(int dest, mdsm_handler_id handler, const void* payload, size_t len, int annotation) {
  return mdsm_send(dest, handler, payload, len, (mdsm_annotation)annotation);
}

const char* c_strerror(int status) { return mdsm_strerror((mdsm_status)status); }

/* MDSM_Send with any int as its annotation (mpi_ext misuse). */
#include <mdsm/mdsm_mpi.h>
int c_mdsm_send_with_annotation(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                                int annotation) {
  return MDSM_Send(buf, count, type, dest, tag, comm, (mdsm_annotation)annotation);
}
