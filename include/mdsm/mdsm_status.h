/* mdsm status codes, shared by the C API (mdsm.h) and the C++ API (mdsm.hpp, where
 * mdsm::error carries one of them).  Values are stable: append, never renumber. */
#ifndef MDSM_STATUS_H
#define MDSM_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mdsm_status {
  MDSM_SUCCESS = 0,
  MDSM_ERR_NOT_INITIALIZED = 1,     /* a call before mdsm_init or after mdsm_finalize */
  MDSM_ERR_ALREADY_INITIALIZED = 2, /* mdsm_init called twice */
  MDSM_ERR_INVALID_ARGUMENT = 3,    /* a null pointer, zero size, bad option value */
  MDSM_ERR_INVALID_RANK = 4,        /* a rank outside [0, size) */
  MDSM_ERR_INVALID_ANNOTATION = 5,  /* not one of NONE, REQUEST, RELEASE, RELEASE_NT */
  MDSM_ERR_UNKNOWN_HANDLER = 6,     /* a handler id that was never registered */
  MDSM_ERR_HANDLER_MISMATCH = 7,    /* ranks registered different handlers under one id */
  MDSM_ERR_ALREADY_DISPOSED = 8,    /* accept/forward/store of a message already disposed */
  MDSM_ERR_NOT_DISPOSED = 9,        /* a handler returned without disposing of a RELEASE */
  MDSM_ERR_HANDLER_CONTEXT = 10,    /* a handler blocked or touched coherent memory */
  MDSM_ERR_OUT_OF_MEMORY = 11,      /* the region (or the process) has no room left */
  MDSM_ERR_NOT_IN_REGION = 12,      /* a pointer that mdsm did not allocate */
  MDSM_ERR_REGION_MAP = 13,         /* the shared region could not be mapped on every rank */
  MDSM_ERR_THREAD_LEVEL = 14,       /* MPI does not provide MPI_THREAD_MULTIPLE */
  MDSM_ERR_MPI = 15,                /* an MPI call failed */
  MDSM_ERR_MALFORMED = 16,          /* a message failed validation */
  MDSM_ERR_NOT_HELD = 17,           /* unlock / wait of a lock this rank does not hold */
  MDSM_ERR_BUSY = 18,               /* destroy of an object still held or waited on */
  MDSM_ERR_MISMATCH = 19,           /* ranks disagree on a collective call's arguments */
  MDSM_ERR_INTERNAL = 20,           /* an mdsm bug: please report it */
  MDSM_ERR_OS = 21,                 /* an operating-system call failed */
  MDSM_ERR_INVALID_HANDLE = 22,     /* a null handle, or one whose object was destroyed */
  MDSM_ERR_TASK_FAILED = 23         /* a fiber or remote task ended with an exception */
} mdsm_status;

/* A short, static description of a status code (never NULL). */
const char* mdsm_strerror(mdsm_status status);

#ifdef __cplusplus
}
#endif
#endif
