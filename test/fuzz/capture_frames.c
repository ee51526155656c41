/* Seed capture for the fuzz corpora (test/fuzz/README.md): a PMPI shim, LD_PRELOADed into the
 * ranks of a real job, that writes every frame mdsm sends -- an MPI_BYTE message starting with
 * the frame magic -- to $MDSM_CAPTURE_DIR/<pid>-<n>.frame, untouched. make_corpus.py sorts them
 * into the targets' corpora. Not part of the library or of any test run. */
#define _GNU_SOURCE
#include <mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void capture(const void* buf, int count, MPI_Datatype type) {
  static unsigned long n = 0;
  const char* dir = getenv("MDSM_CAPTURE_DIR");
  if (dir == NULL || type != MPI_BYTE || count < 24) return;
  uint16_t magic;
  memcpy(&magic, buf, sizeof magic);
  if (magic != 0x4D44) return;
  char path[4096];
  snprintf(path, sizeof path, "%s/%ld-%lu.frame", dir, (long)getpid(), __atomic_fetch_add(&n, 1, __ATOMIC_RELAXED));
  FILE* f = fopen(path, "wb");
  if (f == NULL) return;
  fwrite(buf, 1, (size_t)count, f);
  fclose(f);
}

int MPI_Send(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  capture(buf, count, type);
  return PMPI_Send(buf, count, type, dest, tag, comm);
}

int MPI_Isend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, MPI_Request* req) {
  capture(buf, count, type);
  return PMPI_Isend(buf, count, type, dest, tag, comm, req);
}
