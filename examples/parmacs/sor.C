/* Charge deposition under per-row locks, then red-black SOR, PARMACS style.
 *
 *   parmacs_sor [-nN] [-mM] [-iI] [-pP]   an N x N interior grid (default 64), M particles
 *                                         (default 20000), I iterations (default 40), P processes
 *
 * Phase 1: the particles are dealt to processes by index, so any process may deposit onto any
 * row: each deposit (an integer charge onto a cell and its right neighbour) happens under that
 * row's lock from a lock array (ALOCK). Phase 2: the charge is the right-hand side of a Poisson
 * problem, solved by red-black SOR on bands of rows, a barrier after each colour; the largest
 * change of the last sweep is combined under a lock. Integer deposits and red-black order make
 * the result the same at any P; the main process checks the total charge against the generator
 * and the grid against a serial SOR of its own, and prints
 *   result: n=64 particles=20000 iterations=40 charge=<total> checksum=<grid sum> change=<...>
 *   check: matches the serial solution
 */
MAIN_ENV
#include <math.h>
#include <stdio.h>
#include <string.h>

#define MAXN 256

struct global {
  LOCKDEC(idlock)
  LOCKDEC(changelock)
  ALOCKDEC(rowlock, MAXN + 2)
  BARDEC(phase)
  long next_id;
  double change; /* the largest |update| of the last sweep, over all processes */
};

static struct global* gl;
static long* charge; /* (n + 2) x (n + 2) */
static double* u;    /* (n + 2) x (n + 2), zero on the boundary */
static long n = 64, m = 20000, iters = 40, P = 1;
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

static void SlaveStart(void) {
  long id, k, row, col, q, it, lo, hi;
  double mine = 0.0;
  LOCK(gl->idlock)
  id = gl->next_id++;
  UNLOCK(gl->idlock)
  for (k = id; k < m; k += P) {
    particle(k, &row, &col, &q);
    ALOCK(gl->rowlock, row)
    AT(charge, row, col) += q;
    AT(charge, row, col + 1) += 1;
    AULOCK(gl->rowlock, row)
  }
  BARRIER(gl->phase, P)
  lo = 1 + n * id / P;
  hi = 1 + n * (id + 1) / P;
  for (it = 0; it < iters; ++it) {
    double red = sweep(u, charge, lo, hi, 0);
    BARRIER(gl->phase, P)
    double black = sweep(u, charge, lo, hi, 1);
    BARRIER(gl->phase, P)
    mine = red > black ? red : black;
  }
  LOCK(gl->changelock)
  if (mine > gl->change) gl->change = mine;
  UNLOCK(gl->changelock)
}

int main(int argc, char** argv) {
  unsigned long t0, t1; /* CLOCK: wall-clock microseconds around the parallel section */
  long i, k, row, col, q, total = 0, expect = 0, cells = 0;
  double sum = 0.0, *ref;
  long* refc;
  unsigned long long bits;
  MAIN_INITENV(, 2000000)
  for (i = 1; i < argc; ++i) {
    if (strncmp(argv[i], "-n", 2) == 0) n = atol(argv[i] + 2);
    else if (strncmp(argv[i], "-m", 2) == 0) m = atol(argv[i] + 2);
    else if (strncmp(argv[i], "-i", 2) == 0) iters = atol(argv[i] + 2);
    else if (strncmp(argv[i], "-p", 2) == 0) P = atol(argv[i] + 2);
    else {
      fprintf(stderr, "usage: parmacs_sor [-nN] [-mM] [-iI] [-pP]\n");
      exit(2);
    }
  }
  if (n < 2 || n > MAXN || m < 0 || iters < 1 || P < 1 || P > n) {
    fprintf(stderr, "parmacs_sor: need 2 <= N <= %d, M >= 0, I >= 1, 1 <= P <= N\n", MAXN);
    exit(2);
  }
  cells = (n + 2) * (n + 2);
  gl = (struct global*)G_MALLOC(sizeof(struct global));
  gl->next_id = 0;
  gl->change = 0.0;
  LOCKINIT(gl->idlock)
  LOCKINIT(gl->changelock)
  ALOCKINIT(gl->rowlock, n + 2)
  BARINIT(gl->phase, P)
  charge = (long*)G_MALLOC(cells * sizeof(long));
  u = (double*)G_MALLOC(cells * sizeof(double));
  memset(charge, 0, cells * sizeof(long));
  memset(u, 0, cells * sizeof(double));

  CLOCK(t0)
  for (i = 1; i < P; ++i) CREATE(SlaveStart)
  SlaveStart();
  WAIT_FOR_END(P - 1)
  CLOCK(t1)

  for (i = 0; i < cells; ++i) {
    total += charge[i];
    sum += u[i];
  }
  for (k = 0; k < m; ++k) {
    particle(k, &row, &col, &q);
    expect += q + 1;
  }
  memcpy(&bits, &sum, sizeof bits);
  printf("parmacs_sor: %ld processes\n", P);
  printf("time: %.3f s (the parallel section)\n", (double)(t1 - t0) / 1e6);
  printf("result: n=%ld particles=%ld iterations=%ld charge=%ld checksum=%.17g bits=%016llx change=%.17g\n", n, m,
         iters, total, sum, bits, gl->change);

  /* The reference: the same deposits and sweeps, serially, on private arrays. */
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
  if (total == expect && memcmp(refc, charge, cells * sizeof(long)) == 0 &&
      memcmp(ref, u, cells * sizeof(double)) == 0) {
    printf("check: matches the serial solution\n");
  } else {
    printf("check: DIFFERS from the serial solution (charge %ld, expected %ld)\n", total, expect);
    exit(1);
  }
  free(ref);
  free(refc);
  MAIN_END
}
