/* examples/parmacs/sor.C written for TreadMarks (mdsm/tmk.h): charge deposition under per-row
 * locks, then red-black SOR on bands of rows. The same computation, the same result line.
 *
 *   tmk_sor [-nN] [-mM] [-iI] [-pP]   an N x N interior grid (default 64), M particles (default
 *                                     20000), I iterations (default 40); P, if given, must be the
 *                                     number of processes (tools/mdsmrun -n P)
 *
 * The TreadMarks way: every process runs main; process 0 allocates the shared arrays with
 * Tmk_malloc and hands the pointers to the others with Tmk_distribute, then a barrier. Lock r
 * guards row r (rows 1 .. N <= 256), lock 1023 the largest change; barrier 0 separates the
 * phases. Process 0 checks the total charge against the generator and the grid against a
 * serial SOR of its own, and prints
 *   result: n=64 particles=20000 iterations=40 charge=<total> checksum=<grid sum> change=<...>
 *   check: matches the serial solution
 * exactly as parmacs_sor does for the same arguments (test/parmacs/check_programs.sh --same).
 */
#include <mdsm/tmk.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXN 256
#define CHANGE_LOCK 1023
#define PHASE 0

static long* charge;   /* (n + 2) x (n + 2), shared */
static double* u;      /* (n + 2) x (n + 2), zero on the boundary, shared */
static double* change; /* the largest |update| of the last sweep, over all processes, shared */
static long n = 64, m = 20000, iters = 40;
static const double omega = 1.5;

#define AT(g, i, j) (g)[(i) * (n + 2) + (j)]

/* Particle k: a cell (row, column) in 1 .. n and a charge 1 .. 4, from a hash of k. */
static void particle(long k, long* row, long* col, long* q) {
  unsigned long long x = (unsigned long long)k * 0x9E3779B97F4A7C15ull + 77;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  *row = 1 + (long)(x % (unsigned long long)n);
  *col = 1 + (long)((x >> 20) % (unsigned long long)(n - 1));
  *q = 1 + (long)((x >> 40) % 4);
}

/* One colour's sweep over rows lo .. hi-1; returns the largest |change|. */
static double sweep(double* g, const long* c, long lo, long hi, long colour) {
  double h2 = 1.0 / (double)((n + 1) * (n + 1)), big = 0.0;
  long i, j;
  for (i = lo; i < hi; ++i)
    for (j = 1 + (i + colour + 1) % 2; j <= n; j += 2) {
      double next = 0.25 * (AT(g, i - 1, j) + AT(g, i + 1, j) + AT(g, i, j - 1) + AT(g, i, j + 1) +
                            h2 * (double)AT(c, i, j));
      double delta = omega * (next - AT(g, i, j));
      AT(g, i, j) += delta;
      if (fabs(delta) > big) big = fabs(delta);
    }
  return big;
}

/* Process 0, after the parallel part: the totals, the result line and the serial check. */
static int report(long P) {
  long i, k, row, col, q, total = 0, expect = 0, cells = (n + 2) * (n + 2);
  double sum = 0.0, *ref;
  long* refc;
  unsigned long long bits;
  for (i = 0; i < cells; ++i) {
    total += charge[i];
    sum += u[i];
  }
  for (k = 0; k < m; ++k) {
    particle(k, &row, &col, &q);
    expect += q + 1;
  }
  memcpy(&bits, &sum, sizeof bits);
  printf("tmk_sor: %ld processes\n", P);
  printf("result: n=%ld particles=%ld iterations=%ld charge=%ld checksum=%.17g bits=%016llx change=%.17g\n", n, m,
         iters, total, sum, bits, *change);
  refc = (long*)calloc((size_t)cells, sizeof(long));
  ref = (double*)calloc((size_t)cells, sizeof(double));
  for (k = 0; k < m; ++k) {
    particle(k, &row, &col, &q);
    AT(refc, row, col) += q;
    AT(refc, row, col + 1) += 1;
  }
  for (i = 0; i < iters; ++i) {
    sweep(ref, refc, 1, n + 1, 0);
    sweep(ref, refc, 1, n + 1, 1);
  }
  const int ok = total == expect && memcmp(refc, charge, (size_t)cells * sizeof(long)) == 0 &&
                 memcmp(ref, u, (size_t)cells * sizeof(double)) == 0;
  if (ok) printf("check: matches the serial solution\n");
  else printf("check: DIFFERS from the serial solution (charge %ld, expected %ld)\n", total, expect);
  free(ref);
  free(refc);
  return ok;
}

int main(int argc, char** argv) {
  long i, k, row, col, q, it, lo, hi, P, want = 0, id, cells;
  double mine = 0.0;
  int ok = 1;
  Tmk_startup(argc, argv);
  P = (long)Tmk_nprocs;
  id = (long)Tmk_proc_id;
  for (i = 1; i < argc; ++i) {
    if (strncmp(argv[i], "-n", 2) == 0) n = atol(argv[i] + 2);
    else if (strncmp(argv[i], "-m", 2) == 0) m = atol(argv[i] + 2);
    else if (strncmp(argv[i], "-i", 2) == 0) iters = atol(argv[i] + 2);
    else if (strncmp(argv[i], "-p", 2) == 0) want = atol(argv[i] + 2);
    else {
      if (id == 0) fprintf(stderr, "usage: tmk_sor [-nN] [-mM] [-iI] [-pP]\n");
      Tmk_exit(2);
    }
  }
  if (n < 2 || n > MAXN || m < 0 || iters < 1 || P > n || (want != 0 && want != P)) {
    if (id == 0)
      fprintf(stderr, "tmk_sor: need 2 <= N <= %d, M >= 0, I >= 1, processes <= N, and -p equal to them\n", MAXN);
    Tmk_exit(2);
  }
  cells = (n + 2) * (n + 2);
  if (id == 0) {
    charge = (long*)Tmk_malloc((unsigned)(cells * sizeof(long)));
    u = (double*)Tmk_malloc((unsigned)(cells * sizeof(double)));
    change = (double*)Tmk_malloc(sizeof(double));
    memset(charge, 0, (size_t)cells * sizeof(long));
    memset(u, 0, (size_t)cells * sizeof(double));
    *change = 0.0;
    Tmk_distribute(&charge, sizeof charge);
    Tmk_distribute(&u, sizeof u);
    Tmk_distribute(&change, sizeof change);
  }
  Tmk_barrier(PHASE);

  for (k = id; k < m; k += P) {
    particle(k, &row, &col, &q);
    Tmk_lock_acquire((unsigned)row);
    AT(charge, row, col) += q;
    AT(charge, row, col + 1) += 1;
    Tmk_lock_release((unsigned)row);
  }
  Tmk_barrier(PHASE);
  lo = 1 + n * id / P;
  hi = 1 + n * (id + 1) / P;
  for (it = 0; it < iters; ++it) {
    double red = sweep(u, charge, lo, hi, 0);
    Tmk_barrier(PHASE);
    double black = sweep(u, charge, lo, hi, 1);
    Tmk_barrier(PHASE);
    mine = red > black ? red : black;
  }
  Tmk_lock_acquire(CHANGE_LOCK);
  if (mine > *change) *change = mine;
  Tmk_lock_release(CHANGE_LOCK);
  Tmk_barrier(PHASE);

  if (id == 0) ok = report(P);
  Tmk_exit(ok ? 0 : 1);
  return 0;
}
