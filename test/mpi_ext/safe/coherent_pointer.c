/* Pointers into the coherent region passed in plain MPI messages: correct under safe mode,
 * stale without it. The program uses mdsm only to allocate coherent memory, read statistics and
 * order its rounds (mdsm barriers, which are consistent in both modes); every pointer travels in
 * a plain MPI call.
 *
 *   coherent_pointer plain|safe fresh|stale     2 or more ranks
 *
 * plain: mdsm is not underneath MPI; the program starts mdsm itself. safe: libmdsm_safe started
 * it in MPI_Init. The second word is what a receiver must see after a plain MPI_Send on
 * MPI_COMM_WORLD: `fresh` (the default RELEASE) or `stale` (no safe mode, or
 * MDSM_SAFE_ANNOTATION=none). A stale read is deterministic here: each receiver read the array
 * before, so it holds a valid copy, and nothing told it of the new writes.
 *
 * Under safe mode the program also checks the info key mdsm_annotation (MPI_Comm_dup_with_info,
 * MPI_Comm_set_info, inheritance by MPI_Comm_dup), that collectives keep their consistency
 * whatever the annotation, and that an invalid info value is an MPI error (MPI_ERRORS_RETURN). */
#include <mdsm/mdsm.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { k_bytes = 1 << 20 }; /* 256 pages of 4 KiB */

static int g_rank, g_size;
static mdsm_barrier* g_barrier;
static unsigned char* g_array;

#define CHECK(cond)                                                                             \
  do {                                                                                          \
    if (!(cond)) {                                                                              \
      fprintf(stderr, "rank %d: %s:%d: check failed: %s\n", g_rank, __FILE__, __LINE__, #cond); \
      fflush(stderr);                                                                           \
      MPI_Abort(MPI_COMM_WORLD, 2);                                                             \
    }                                                                                           \
  } while (0)

static unsigned char pattern(size_t i, int generation) { return (unsigned char)(i * 7 + (size_t)generation * 31); }

static uint64_t stat_value(const char* name) {
  uint64_t v = 0;
  CHECK(mdsm_stat(name, &v) == MDSM_SUCCESS);
  return v;
}

static void mdsm_sync(void) { CHECK(mdsm_barrier_wait(g_barrier) == MDSM_SUCCESS); }

/* Every byte of the array is `generation`; else reports the first that is not and fails. */
static void expect_generation(int generation, const char* what) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < k_bytes; ++i)
    if (g_array[i] != pattern(i, generation)) {
      if (bad++ == 0) first = i;
    }
  if (bad != 0) {
    fprintf(stderr, "rank %d: %s: %zu of %d bytes are not of generation %d (byte %zu is %d, want %d)\n", g_rank,
            what, bad, k_bytes, generation, first, g_array[first], pattern(first, generation));
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
}

static void write_generation(int generation) {
  for (size_t i = 0; i < k_bytes; ++i) g_array[i] = pattern(i, generation);
}

/* One round: every receiver holds a valid copy of generation g-1; rank 0 writes generation g and
 * sends the pointer on comm with a plain MPI_Send (or, with `how` = "barrier" / "bcast", makes the
 * pointer travel by that collective); each receiver reads the whole array through the pointer.
 * Fresh: every byte is of generation g and the receiver learned rank 0's new interval in the call.
 * Stale: every byte is still of generation g-1 (deterministic: the copy is valid, and after the
 * barrier that made it so no message that could carry consistency reaches the receiver; its own
 * "done reading" message goes the other way) and rank 0 closed no interval. */
static int g_generation = 0;
static void round_on(MPI_Comm comm, const char* how, int fresh, const char* what) {
  const int g = ++g_generation;
  mdsm_sync(); /* everyone consistent with generation g-1 */
  unsigned char* p = NULL;
  if (g_rank == 0) {
    for (int r = 1; r < g_size; ++r) /* every copy read before it is overwritten */
      CHECK(MPI_Recv(NULL, 0, MPI_BYTE, r, 61, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS);
    const uint64_t intervals = stat_value("intervals_created");
    write_generation(g);
    p = g_array;
    if (strcmp(how, "send") == 0) {
      for (int r = 1; r < g_size; ++r) CHECK(MPI_Send(&p, sizeof p, MPI_BYTE, r, 60, comm) == MPI_SUCCESS);
    } else if (strcmp(how, "barrier") == 0) {
      CHECK(MPI_Barrier(comm) == MPI_SUCCESS);
    } else {
      CHECK(MPI_Bcast(&p, sizeof p, MPI_BYTE, 0, comm) == MPI_SUCCESS);
    }
    const uint64_t closed = stat_value("intervals_created") - intervals;
    /* A release closes the interval that holds the writes; no consistency, no interval. */
    if (fresh) CHECK(closed >= 1);
    else CHECK(closed == 0);
  } else {
    expect_generation(g - 1, "before the round"); /* a valid copy of g-1 */
    CHECK(MPI_Send(NULL, 0, MPI_BYTE, 0, 61, MPI_COMM_WORLD) == MPI_SUCCESS);
    const uint64_t learned = stat_value("intervals_received");
    MPI_Status st;
    if (strcmp(how, "send") == 0) {
      CHECK(MPI_Recv(&p, sizeof p, MPI_BYTE, 0, 60, comm, &st) == MPI_SUCCESS);
      int n = -1;
      MPI_Get_count(&st, MPI_BYTE, &n);
      CHECK(st.MPI_SOURCE == 0 && st.MPI_TAG == 60 && n == (int)sizeof p);
    } else if (strcmp(how, "barrier") == 0) {
      CHECK(MPI_Barrier(comm) == MPI_SUCCESS);
      p = g_array;
    } else {
      CHECK(MPI_Bcast(&p, sizeof p, MPI_BYTE, 0, comm) == MPI_SUCCESS);
    }
    const uint64_t got = stat_value("intervals_received") - learned;
    if (fresh) CHECK(got >= 1);
    else CHECK(got == 0);
    CHECK(p == g_array);
    expect_generation(fresh ? g : g - 1, what);
  }
  mdsm_sync();
  if (g_rank == 0) printf("round %d (%s): %s as expected\n", g, what, fresh ? "fresh" : "stale");
  fflush(stdout);
}

static MPI_Comm dup_with_annotation(MPI_Comm comm, const char* value) {
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "mdsm_annotation", value);
  MPI_Comm out;
  CHECK(MPI_Comm_dup_with_info(comm, info, &out) == MPI_SUCCESS);
  MPI_Info_free(&info);
  return out;
}

/* An invalid value is an MPI error naming the key, under MPI_ERRORS_RETURN; nothing changes. */
static void invalid_info(void) {
  MPI_Comm comm;
  CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm) == MPI_SUCCESS);
  CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN) == MPI_SUCCESS);
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "mdsm_annotation", "sometimes");
  MPI_Comm out = MPI_COMM_WORLD;
  int rc = MPI_Comm_dup_with_info(comm, info, &out);
  int cls = -1;
  MPI_Error_class(rc, &cls);
  CHECK(rc != MPI_SUCCESS && cls == MPI_ERR_INFO_VALUE && out == MPI_COMM_NULL);
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  CHECK(strstr(text, "mdsm_annotation") != NULL);
  rc = MPI_Comm_set_info(comm, info);
  MPI_Error_class(rc, &cls);
  CHECK(rc != MPI_SUCCESS && cls == MPI_ERR_INFO_VALUE);
  MPI_Info_free(&info);
  CHECK(MPI_Comm_free(&comm) == MPI_SUCCESS);
}

/* Under safe mode a truncation completed by MPI_Waitall / MPI_Waitany is reported on the request's
 * communicator (here MPI_ERRORS_RETURN), not on MPI_COMM_WORLD (fatal). (plain_mpi.c cannot check
 * these two: see docs/MPI.md on Open MPI's Waitall.) */
static void truncation_in_waits(void) {
  MPI_Comm comm;
  CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm) == MPI_SUCCESS);
  CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN) == MPI_SUCCESS);
  int ten[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  if (g_rank == 0) {
    for (int k = 0; k < 3; ++k) CHECK(MPI_Send(ten, 10, MPI_INT, 1, 70 + k, comm) == MPI_SUCCESS);
  } else if (g_rank == 1) {
    int five[5], big[20] = {0}, cls = -1;
    MPI_Request req[2];
    MPI_Status st[2];
    CHECK(MPI_Irecv(five, 5, MPI_INT, 0, 70, comm, &req[0]) == MPI_SUCCESS);
    CHECK(MPI_Irecv(big, 20, MPI_INT, 0, 71, comm, &req[1]) == MPI_SUCCESS);
    int rc = MPI_Waitall(2, req, st);
    CHECK(rc == MPI_ERR_IN_STATUS);
    MPI_Error_class(st[0].MPI_ERROR, &cls);
    CHECK(cls == MPI_ERR_TRUNCATE);
    CHECK(st[1].MPI_ERROR == MPI_SUCCESS && st[1].MPI_SOURCE == 0 && st[1].MPI_TAG == 71 && big[9] == 9);
    CHECK(MPI_Irecv(five, 5, MPI_INT, 0, 72, comm, &req[0]) == MPI_SUCCESS);
    int index = -1;
    rc = MPI_Waitany(1, req, &index, &st[0]);
    MPI_Error_class(rc, &cls);
    CHECK(rc != MPI_SUCCESS && cls == MPI_ERR_TRUNCATE && index == 0);
  }
  CHECK(MPI_Comm_free(&comm) == MPI_SUCCESS);
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: coherent_pointer plain|safe fresh|stale\n");
    return 64;
  }
  const int safe = strcmp(argv[1], "safe") == 0;
  const int world_fresh = strcmp(argv[2], "fresh") == 0;
  int provided = 0;
  CHECK(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) == MPI_SUCCESS);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  CHECK(provided == MPI_THREAD_MULTIPLE && g_size >= 2);
  /* Under safe mode the library started mdsm in MPI_Init_thread; otherwise the program does. */
  const int started_by_library = mdsm_initialized();
  CHECK(started_by_library == safe);
  if (!started_by_library) CHECK(mdsm_init_comm(MPI_COMM_WORLD, NULL) == MDSM_SUCCESS);
  CHECK(mdsm_barrier_create(NULL, 0, &g_barrier) == MDSM_SUCCESS);

  /* Rank 0 allocates (non-collectively: the address is unique in the job) and tells the others. */
  void* p = NULL;
  if (g_rank == 0) {
    CHECK(mdsm_alloc(k_bytes, &p) == MDSM_SUCCESS);
    g_array = p;
    write_generation(0);
  }
  CHECK(MPI_Bcast(&p, sizeof p, MPI_BYTE, 0, MPI_COMM_WORLD) == MPI_SUCCESS);
  g_array = p;
  CHECK(mdsm_is_coherent(g_array));

  round_on(MPI_COMM_WORLD, "send", world_fresh, "MPI_Send on MPI_COMM_WORLD");
  if (safe) {
    MPI_Comm none = dup_with_annotation(MPI_COMM_WORLD, "none");
    round_on(none, "send", 0, "MPI_Send on a communicator with mdsm_annotation=none");
    MPI_Comm none_dup;
    CHECK(MPI_Comm_dup(none, &none_dup) == MPI_SUCCESS);
    round_on(none_dup, "send", 0, "MPI_Send on an MPI_Comm_dup of it (inherits none)");
    /* Collectives keep their consistency whatever the annotation. */
    round_on(none, "barrier", 1, "MPI_Barrier on the none communicator");
    round_on(none, "bcast", 1, "MPI_Bcast on the none communicator");
    MPI_Comm nt = dup_with_annotation(MPI_COMM_WORLD, "release_nt");
    round_on(nt, "send", 1, "MPI_Send with mdsm_annotation=release_nt");
    MPI_Comm rel = dup_with_annotation(none, "release");
    round_on(rel, "send", 1, "MPI_Send with mdsm_annotation=release (overrides none)");
    MPI_Comm set;
    CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &set) == MPI_SUCCESS);
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "mdsm_annotation", "none");
    CHECK(MPI_Comm_set_info(set, info) == MPI_SUCCESS);
    round_on(set, "send", 0, "MPI_Send after MPI_Comm_set_info mdsm_annotation=none");
    MPI_Info_set(info, "mdsm_annotation", "release");
    CHECK(MPI_Comm_set_info(set, info) == MPI_SUCCESS);
    round_on(set, "send", 1, "MPI_Send after MPI_Comm_set_info mdsm_annotation=release");
    /* dup_with_info without the key: the job's default, as for any hint. */
    MPI_Info_delete(info, "mdsm_annotation");
    MPI_Info_set(info, "unrelated_key", "1");
    MPI_Comm plain_dup;
    CHECK(MPI_Comm_dup_with_info(none, info, &plain_dup) == MPI_SUCCESS);
    round_on(plain_dup, "send", world_fresh, "MPI_Send on MPI_Comm_dup_with_info without the key");
    MPI_Info_free(&info);
    invalid_info();
    truncation_in_waits();
    MPI_Comm* comms[] = {&none, &none_dup, &nt, &rel, &set, &plain_dup};
    for (size_t i = 0; i < sizeof comms / sizeof comms[0]; ++i) CHECK(MPI_Comm_free(comms[i]) == MPI_SUCCESS);
  }
  mdsm_sync();
  if (g_rank == 0) CHECK(mdsm_free(g_array) == MDSM_SUCCESS);
  CHECK(mdsm_barrier_destroy(g_barrier) == MDSM_SUCCESS);
  if (!started_by_library) CHECK(mdsm_finalize() == MDSM_SUCCESS);
  CHECK(MPI_Finalize() == MPI_SUCCESS);
  if (g_rank == 0) printf("coherent pointers: all rounds as expected on %d ranks\n", g_size);
  return 0;
}
