/* An MPI program written against plain MPI only (no mdsm header): point to point with wildcards,
 * probes, every wait/test form, derived datatypes, truncation under MPI_ERRORS_RETURN,
 * MPI_PROC_NULL, the collectives and an intercommunicator, each checked for exact values and statuses. It must pass
 * unchanged with and without safe mode (libmdsm_safe preloaded or linked; test/meson.build).
 *
 *   plain_mpi [--expect-safe]     2 or more ranks
 * --expect-safe: also check that safe mode is really underneath (MPI_THREAD_MULTIPLE, and the
 * mdsm runtime found by name and started), so the safe runs cannot pass by running plain MPI. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_rank, g_size;

#define CHECK(cond)                                                                          \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      fprintf(stderr, "rank %d: %s:%d: check failed: %s\n", g_rank, __FILE__, __LINE__, #cond); \
      fflush(stderr);                                                                        \
      MPI_Abort(MPI_COMM_WORLD, 2);                                                          \
    }                                                                                        \
  } while (0)
#define CHECK_OK(call) CHECK((call) == MPI_SUCCESS)

static int count_of(const MPI_Status* st, MPI_Datatype t) {
  int n = -7;
  CHECK_OK(MPI_Get_count(st, t, &n));
  return n;
}
static int elements_of(const MPI_Status* st, MPI_Datatype t) {
  int n = -7;
  CHECK_OK(MPI_Get_elements(st, t, &n));
  return n;
}
static int error_class(int code) {
  int c = -1;
  MPI_Error_class(code, &c);
  return c;
}

/* Every rank but 0 sends rank+1 ints with tag 10+rank; rank 0 takes them with both wildcards
 * (on a communicator of their own: later tests' messages must not match). */
static void wildcards(void) {
  MPI_Comm comm;
  CHECK_OK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
  if (g_rank == 0) {
    int seen[64] = {0};
    for (int k = 1; k < g_size; ++k) {
      int buf[16];
      MPI_Status st;
      memset(buf, 0xff, sizeof buf);
      CHECK_OK(MPI_Recv(buf, 16, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &st));
      const int src = st.MPI_SOURCE;
      CHECK(src >= 1 && src < g_size && !seen[src]);
      seen[src] = 1;
      CHECK(st.MPI_TAG == 10 + src);
      CHECK(count_of(&st, MPI_INT) == src + 1);
      CHECK(elements_of(&st, MPI_INT) == src + 1);
      for (int i = 0; i <= src; ++i) CHECK(buf[i] == 100 * src + i);
      CHECK(buf[src + 1] == -1); /* nothing written past the message */
    }
  } else {
    int buf[16];
    for (int i = 0; i <= g_rank; ++i) buf[i] = 100 * g_rank + i;
    CHECK_OK(MPI_Send(buf, g_rank + 1, MPI_INT, 0, 10 + g_rank, comm));
  }
  CHECK_OK(MPI_Comm_free(&comm));
}

/* Rank 1 sends 5 doubles (tag 7) then 3 chars (tag 8); rank 0 probes before receiving. */
static void probes(void) {
  if (g_rank == 1) {
    double d[5] = {0.5, 1.5, 2.5, 3.5, 4.5};
    char c[3] = {'a', 'b', 'c'};
    CHECK_OK(MPI_Send(d, 5, MPI_DOUBLE, 0, 7, MPI_COMM_WORLD));
    CHECK_OK(MPI_Send(c, 3, MPI_CHAR, 0, 8, MPI_COMM_WORLD));
  } else if (g_rank == 0) {
    MPI_Status st;
    int flag = 0;
    while (!flag) CHECK_OK(MPI_Iprobe(1, 7, MPI_COMM_WORLD, &flag, &st));
    CHECK(st.MPI_SOURCE == 1 && st.MPI_TAG == 7);
    CHECK(count_of(&st, MPI_DOUBLE) == 5);
    CHECK(count_of(&st, MPI_BYTE) == 5 * (int)sizeof(double));
    /* The probed message is still there; a wildcard probe sees the first one in order from 1. */
    CHECK_OK(MPI_Probe(1, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
    CHECK(st.MPI_SOURCE == 1 && st.MPI_TAG == 7 && count_of(&st, MPI_DOUBLE) == 5);
    double d[5] = {0};
    CHECK_OK(MPI_Recv(d, 5, MPI_DOUBLE, 1, 7, MPI_COMM_WORLD, &st));
    for (int i = 0; i < 5; ++i) CHECK(d[i] == i + 0.5);
    CHECK_OK(MPI_Probe(MPI_ANY_SOURCE, 8, MPI_COMM_WORLD, &st));
    CHECK(st.MPI_SOURCE == 1 && st.MPI_TAG == 8 && count_of(&st, MPI_CHAR) == 3);
    char c[4] = {0};
    CHECK_OK(MPI_Recv(c, 4, MPI_CHAR, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, &st));
    CHECK(memcmp(c, "abc", 4) == 0);
    /* Nobody sends tag 99. */
    CHECK_OK(MPI_Iprobe(MPI_ANY_SOURCE, 99, MPI_COMM_WORLD, &flag, &st));
    CHECK(flag == 0);
  }
}

/* A ring: every rank receives `rounds` messages from the left and sends to the right, completing
 * them with each wait and test form in turn. */
static void nonblocking(void) {
  const int right = (g_rank + 1) % g_size, left = (g_rank + g_size - 1) % g_size;
  for (int form = 0; form < 5; ++form) {
    enum { n = 3, len = 100 };
    static int out[n][len], in[n][len];
    MPI_Request req[2 * n];
    MPI_Status st[2 * n];
    for (int m = 0; m < n; ++m) {
      for (int i = 0; i < len; ++i) {
        out[m][i] = g_rank * 1000000 + form * 10000 + m * 1000 + i;
        in[m][i] = -1;
      }
      CHECK_OK(MPI_Irecv(in[m], len, MPI_INT, left, 20 + m, MPI_COMM_WORLD, &req[m]));
    }
    for (int m = 0; m < n; ++m)
      CHECK_OK(MPI_Isend(out[m], len - m, MPI_INT, right, 20 + m, MPI_COMM_WORLD, &req[n + m]));
    int done = 0;
    switch (form) {
      case 0: /* MPI_Wait, one by one */
        for (int k = 0; k < 2 * n; ++k) {
          CHECK_OK(MPI_Wait(&req[k], &st[k]));
          CHECK(req[k] == MPI_REQUEST_NULL);
        }
        break;
      case 1: /* MPI_Waitall */
        CHECK_OK(MPI_Waitall(2 * n, req, st));
        break;
      case 2: /* MPI_Waitany until all done; then once more: MPI_UNDEFINED */
        for (int k = 0; k < 2 * n; ++k) {
          int index = -1;
          MPI_Status s;
          CHECK_OK(MPI_Waitany(2 * n, req, &index, &s));
          CHECK(index >= 0 && index < 2 * n && req[index] == MPI_REQUEST_NULL);
          st[index] = s;
          ++done;
        }
        {
          int index = -1;
          CHECK_OK(MPI_Waitany(2 * n, req, &index, MPI_STATUS_IGNORE));
          CHECK(index == MPI_UNDEFINED);
        }
        break;
      case 3: /* MPI_Test, polling each */
        for (int k = 0; k < 2 * n; ++k) {
          int flag = 0;
          while (!flag) CHECK_OK(MPI_Test(&req[k], &flag, &st[k]));
          CHECK(req[k] == MPI_REQUEST_NULL);
        }
        break;
      case 4: { /* MPI_Testall, polling */
        int flag = 0;
        while (!flag) CHECK_OK(MPI_Testall(2 * n, req, &flag, st));
        for (int k = 0; k < 2 * n; ++k) CHECK(req[k] == MPI_REQUEST_NULL);
        break;
      }
    }
    (void)done;
    for (int m = 0; m < n; ++m) {
      CHECK(st[m].MPI_SOURCE == left && st[m].MPI_TAG == 20 + m);
      CHECK(count_of(&st[m], MPI_INT) == len - m);
      for (int i = 0; i < len - m; ++i) CHECK(in[m][i] == left * 1000000 + form * 10000 + m * 1000 + i);
      for (int i = len - m; i < len; ++i) CHECK(in[m][i] == -1);
    }
  }
  /* An empty array and a null request complete at once. */
  CHECK_OK(MPI_Waitall(0, NULL, MPI_STATUSES_IGNORE));
  MPI_Request null_req = MPI_REQUEST_NULL;
  int flag = 0;
  CHECK_OK(MPI_Test(&null_req, &flag, MPI_STATUS_IGNORE));
  CHECK(flag == 1);
}

struct item {
  int a;
  double b;
  char c[3];
};

/* Rank 0 sends derived datatypes to the last rank. */
static void datatypes(void) {
  const int peer = g_size - 1;
  MPI_Datatype vec, st_raw, st_type, three_ints;
  CHECK_OK(MPI_Type_vector(4, 2, 3, MPI_INT, &vec)); /* 8 ints out of a span of 11 */
  CHECK_OK(MPI_Type_commit(&vec));
  int blocklen[3] = {1, 1, 3};
  MPI_Aint disp[3] = {offsetof(struct item, a), offsetof(struct item, b), offsetof(struct item, c)};
  MPI_Datatype types[3] = {MPI_INT, MPI_DOUBLE, MPI_CHAR};
  CHECK_OK(MPI_Type_create_struct(3, blocklen, disp, types, &st_raw));
  CHECK_OK(MPI_Type_create_resized(st_raw, 0, sizeof(struct item), &st_type));
  CHECK_OK(MPI_Type_commit(&st_type));
  CHECK_OK(MPI_Type_contiguous(3, MPI_INT, &three_ints));
  CHECK_OK(MPI_Type_commit(&three_ints));
  if (g_rank == 0) {
    int span[11];
    for (int i = 0; i < 11; ++i) span[i] = 500 + i;
    CHECK_OK(MPI_Send(span, 1, vec, peer, 30, MPI_COMM_WORLD)); /* received as 8 ints */
    CHECK_OK(MPI_Send(span, 1, vec, peer, 31, MPI_COMM_WORLD)); /* received as a vector */
    struct item items[3];
    memset(items, 0, sizeof items);
    for (int i = 0; i < 3; ++i) {
      items[i].a = 40 + i;
      items[i].b = 0.25 * i;
      items[i].c[0] = (char)('x' + i);
      items[i].c[1] = 'y';
      items[i].c[2] = 'z';
    }
    CHECK_OK(MPI_Send(items, 3, st_type, peer, 32, MPI_COMM_WORLD));
    int four[4] = {1, 2, 3, 4};
    CHECK_OK(MPI_Send(four, 4, MPI_INT, peer, 33, MPI_COMM_WORLD)); /* 1 1/3 of three_ints */
  }
  if (g_rank == peer) {
    MPI_Status st;
    int flat[8];
    CHECK_OK(MPI_Recv(flat, 8, MPI_INT, 0, 30, MPI_COMM_WORLD, &st));
    const int want[8] = {500, 501, 503, 504, 506, 507, 509, 510};
    for (int i = 0; i < 8; ++i) CHECK(flat[i] == want[i]);
    CHECK(count_of(&st, MPI_INT) == 8);
    int span[11];
    for (int i = 0; i < 11; ++i) span[i] = -1;
    CHECK_OK(MPI_Recv(span, 1, vec, 0, 31, MPI_COMM_WORLD, &st));
    for (int i = 0; i < 11; ++i) CHECK(span[i] == (i % 3 == 2 ? -1 : 500 + i));
    CHECK(count_of(&st, vec) == 1);
    CHECK(elements_of(&st, vec) == 8);
    struct item items[4];
    memset(items, 0, sizeof items);
    CHECK_OK(MPI_Recv(items, 4, st_type, 0, 32, MPI_COMM_WORLD, &st));
    CHECK(count_of(&st, st_type) == 3);
    CHECK(elements_of(&st, st_type) == 15);
    for (int i = 0; i < 3; ++i)
      CHECK(items[i].a == 40 + i && items[i].b == 0.25 * i && items[i].c[0] == 'x' + i && items[i].c[2] == 'z');
    CHECK(items[3].a == 0);
    int got[6] = {0};
    CHECK_OK(MPI_Recv(got, 2, three_ints, 0, 33, MPI_COMM_WORLD, &st));
    CHECK(count_of(&st, three_ints) == MPI_UNDEFINED);
    CHECK(elements_of(&st, three_ints) == 4);
    CHECK(count_of(&st, MPI_INT) == 4);
    CHECK(got[3] == 4 && got[4] == 0);
  }
  MPI_Type_free(&vec);
  MPI_Type_free(&st_raw);
  MPI_Type_free(&st_type);
  MPI_Type_free(&three_ints);
}

/* Truncation is reported, not fatal, under MPI_ERRORS_RETURN: by MPI_Recv, MPI_Wait and MPI_Test. */
static void truncation(void) {
  MPI_Comm comm;
  CHECK_OK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
  CHECK_OK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
  if (g_rank == 0) {
    int ten[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    for (int k = 0; k < 3; ++k) CHECK_OK(MPI_Send(ten, 10, MPI_INT, 1, 40 + k, comm));
    int ok = 0;
    CHECK_OK(MPI_Recv(&ok, 1, MPI_INT, 1, 49, comm, MPI_STATUS_IGNORE)); /* the comm still works */
    CHECK(ok == 4242);
  } else if (g_rank == 1) {
    int five[5] = {0};
    MPI_Status st;
    int rc = MPI_Recv(five, 5, MPI_INT, 0, 40, comm, &st);
    CHECK(rc != MPI_SUCCESS && error_class(rc) == MPI_ERR_TRUNCATE);
    MPI_Request req;
    CHECK_OK(MPI_Irecv(five, 5, MPI_INT, 0, 41, comm, &req));
    rc = MPI_Wait(&req, &st);
    CHECK(rc != MPI_SUCCESS && error_class(rc) == MPI_ERR_TRUNCATE);
    /* MPI_Test reports it too. (Not MPI_Waitall: Open MPI 4.1.4 above MPI_THREAD_SINGLE never
     * completes a Waitall on a receive that matched an already-arrived message and truncated it,
     * without safe mode as with it; see docs/MPI.md.) */
    CHECK_OK(MPI_Irecv(five, 5, MPI_INT, 0, 42, comm, &req));
    int flag = 0;
    do rc = MPI_Test(&req, &flag, &st);
    while (rc == MPI_SUCCESS && !flag);
    CHECK(rc != MPI_SUCCESS && error_class(rc) == MPI_ERR_TRUNCATE);
    int ok = 4242;
    CHECK_OK(MPI_Send(&ok, 1, MPI_INT, 0, 49, comm));
  }
  /* An invalid rank is an error too. */
  int x = 0;
  int rc = MPI_Send(&x, 1, MPI_INT, g_size + 5, 0, comm);
  CHECK(error_class(rc) == MPI_ERR_RANK);
  CHECK_OK(MPI_Comm_free(&comm));
}

/* MPI_PROC_NULL: sends succeed at once, receives complete empty with source MPI_PROC_NULL. */
static void proc_null(void) {
  int buf[4] = {7, 7, 7, 7};
  MPI_Status st;
  CHECK_OK(MPI_Send(buf, 4, MPI_INT, MPI_PROC_NULL, 5, MPI_COMM_WORLD));
  CHECK_OK(MPI_Ssend(buf, 4, MPI_INT, MPI_PROC_NULL, 5, MPI_COMM_WORLD));
  CHECK_OK(MPI_Recv(buf, 4, MPI_INT, MPI_PROC_NULL, 5, MPI_COMM_WORLD, &st));
  CHECK(st.MPI_SOURCE == MPI_PROC_NULL && st.MPI_TAG == MPI_ANY_TAG);
  CHECK(count_of(&st, MPI_INT) == 0);
  CHECK(buf[0] == 7 && buf[3] == 7);
  MPI_Request req[2];
  CHECK_OK(MPI_Irecv(buf, 4, MPI_INT, MPI_PROC_NULL, 5, MPI_COMM_WORLD, &req[0]));
  CHECK_OK(MPI_Isend(buf, 4, MPI_INT, MPI_PROC_NULL, 5, MPI_COMM_WORLD, &req[1]));
  MPI_Status sts[2];
  CHECK_OK(MPI_Waitall(2, req, sts));
  CHECK(sts[0].MPI_SOURCE == MPI_PROC_NULL && count_of(&sts[0], MPI_INT) == 0);
  /* A non-periodic shift: the ends talk to MPI_PROC_NULL. */
  const int right = g_rank + 1 < g_size ? g_rank + 1 : MPI_PROC_NULL;
  const int left = g_rank > 0 ? g_rank - 1 : MPI_PROC_NULL;
  int out[3] = {g_rank, g_rank * 2, g_rank * 3}, in[3] = {-1, -1, -1};
  CHECK_OK(MPI_Sendrecv(out, 3, MPI_INT, right, 6, in, 3, MPI_INT, left, 6, MPI_COMM_WORLD, &st));
  if (left == MPI_PROC_NULL) {
    CHECK(st.MPI_SOURCE == MPI_PROC_NULL && in[0] == -1);
  } else {
    CHECK(st.MPI_SOURCE == left && st.MPI_TAG == 6 && count_of(&st, MPI_INT) == 3);
    CHECK(in[0] == left && in[1] == 2 * left && in[2] == 3 * left);
  }
}

/* A periodic shift with MPI_Sendrecv, and a synchronous send. */
static void sendrecv_and_ssend(void) {
  const int right = (g_rank + 1) % g_size, left = (g_rank + g_size - 1) % g_size;
  double out = g_rank + 0.125, in = -1;
  MPI_Status st;
  CHECK_OK(MPI_Sendrecv(&out, 1, MPI_DOUBLE, right, 3, &in, 1, MPI_DOUBLE, MPI_ANY_SOURCE, MPI_ANY_TAG,
                        MPI_COMM_WORLD, &st));
  CHECK(in == left + 0.125 && st.MPI_SOURCE == left && st.MPI_TAG == 3);
  if (g_rank == 0) {
    long v = 123456789L;
    CHECK_OK(MPI_Ssend(&v, 1, MPI_LONG, 1, 4, MPI_COMM_WORLD));
  } else if (g_rank == 1) {
    long v = 0;
    CHECK_OK(MPI_Recv(&v, 1, MPI_LONG, 0, 4, MPI_COMM_WORLD, &st));
    CHECK(v == 123456789L && count_of(&st, MPI_LONG) == 1);
  }
}

static void collectives(void) {
  CHECK_OK(MPI_Barrier(MPI_COMM_WORLD));
  const int root = g_size - 1;
  int data[100];
  for (int i = 0; i < 100; ++i) data[i] = g_rank == root ? 3 * i + 1 : -1;
  CHECK_OK(MPI_Bcast(data, 100, MPI_INT, root, MPI_COMM_WORLD));
  for (int i = 0; i < 100; ++i) CHECK(data[i] == 3 * i + 1);
  /* A derived type in a broadcast: every third int stays untouched. */
  MPI_Datatype vec;
  CHECK_OK(MPI_Type_vector(4, 2, 3, MPI_INT, &vec));
  CHECK_OK(MPI_Type_commit(&vec));
  int span[11];
  for (int i = 0; i < 11; ++i) span[i] = g_rank == 0 ? 900 + i : -1;
  CHECK_OK(MPI_Bcast(span, 1, vec, 0, MPI_COMM_WORLD));
  for (int i = 0; i < 11; ++i) CHECK(span[i] == (i % 3 == 2 ? (g_rank == 0 ? 900 + i : -1) : 900 + i));
  MPI_Type_free(&vec);

  const int n = g_size;
  int mine[2] = {g_rank + 1, 10 * (g_rank + 1)}, sum[2] = {-1, -1};
  CHECK_OK(MPI_Reduce(mine, sum, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD));
  if (g_rank == 0) CHECK(sum[0] == n * (n + 1) / 2 && sum[1] == 10 * n * (n + 1) / 2);
  else CHECK(sum[0] == -1);
  double dmine = 0.5 * g_rank, dmax = -1;
  CHECK_OK(MPI_Allreduce(&dmine, &dmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  CHECK(dmax == 0.5 * (n - 1));
  int inplace = g_rank;
  CHECK_OK(MPI_Allreduce(MPI_IN_PLACE, &inplace, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  CHECK(inplace == n * (n - 1) / 2);

  int gathered[2 * 64];
  for (int i = 0; i < 2 * n; ++i) gathered[i] = -1;
  CHECK_OK(MPI_Gather(mine, 2, MPI_INT, gathered, 2, MPI_INT, root, MPI_COMM_WORLD));
  for (int r = 0; r < n; ++r)
    CHECK(g_rank == root ? (gathered[2 * r] == r + 1 && gathered[2 * r + 1] == 10 * (r + 1)) : gathered[2 * r] == -1);
  for (int i = 0; i < 2 * n; ++i) gathered[i] = -1;
  CHECK_OK(MPI_Allgather(mine, 2, MPI_INT, gathered, 2, MPI_INT, MPI_COMM_WORLD));
  for (int r = 0; r < n; ++r) CHECK(gathered[2 * r] == r + 1 && gathered[2 * r + 1] == 10 * (r + 1));
  CHECK_OK(MPI_Barrier(MPI_COMM_WORLD));
}

/* An intercommunicator between the even and the odd ranks: point to point, a barrier and a
 * broadcast from the even group's first rank (safe mode passes all of it to MPI). */
static void intercommunicator(void) {
  const int color = g_rank % 2;
  MPI_Comm half, inter;
  CHECK_OK(MPI_Comm_split(MPI_COMM_WORLD, color, g_rank, &half));
  CHECK_OK(MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, color == 0 ? 1 : 0, 77, &inter));
  int flag = 0, local = -1, remote_size = -1;
  CHECK_OK(MPI_Comm_test_inter(inter, &flag));
  CHECK(flag == 1);
  CHECK_OK(MPI_Comm_rank(inter, &local));
  CHECK_OK(MPI_Comm_remote_size(inter, &remote_size));
  if (color == 0 && local < remote_size) {
    const int v = 1000 + g_rank;
    CHECK_OK(MPI_Send(&v, 1, MPI_INT, local, 5, inter));
  } else if (color == 1) {
    int v = -1;
    MPI_Status st;
    CHECK_OK(MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, inter, &st));
    CHECK(v == 1000 + 2 * local && st.MPI_SOURCE == local && st.MPI_TAG == 5);
  }
  CHECK_OK(MPI_Barrier(inter));
  int b = color == 0 && local == 0 ? 4321 : -1;
  const int root = color == 0 ? (local == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
  CHECK_OK(MPI_Bcast(&b, 1, MPI_INT, root, inter));
  CHECK(color == 1 ? b == 4321 : (local == 0 ? b == 4321 : b == -1));
  CHECK_OK(MPI_Comm_free(&inter));
  CHECK_OK(MPI_Comm_free(&half));
}

/* Safe mode is underneath: the thread level it asks for, and the mdsm runtime up. */
static void check_safe_mode(void) {
  int level = -1;
  MPI_Query_thread(&level);
  CHECK(level == MPI_THREAD_MULTIPLE);
  int (*initialized)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "mdsm_initialized");
  CHECK(initialized != NULL);
  CHECK(initialized() == 1);
}

int main(int argc, char** argv) {
  int provided = -1;
  /* MPI_Init_thread with a low level: safe mode must still report a level >= the one asked for. */
  CHECK_OK(MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided));
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  CHECK(provided >= MPI_THREAD_FUNNELED);
  CHECK(g_size >= 2 && g_size <= 64);
  if (argc > 1 && strcmp(argv[1], "--expect-safe") == 0) check_safe_mode();
  wildcards();
  probes();
  nonblocking();
  datatypes();
  truncation();
  proc_null();
  sendrecv_and_ssend();
  collectives();
  intercommunicator();
  CHECK_OK(MPI_Finalize());
  if (g_rank == 0) printf("plain MPI checks passed on %d ranks\n", g_size);
  return 0;
}
