/* Blocked LU decomposition without pivoting, PARMACS style (SPLASH's LU, small).
 *
 *   parmacs_lu [-nN] [-bB] [-pP]      an N x N matrix (default 96) in B x B blocks (default 16),
 *                                     P processes (default 1); run with tools/mdsmrun -n P or more
 *
 * The main process makes a diagonally dominant matrix from a fixed generator in shared memory,
 * CREATEs P-1 processes and works as the first one. Blocks are dealt to processes cyclically;
 * step k factors the diagonal block, then the blocks of row and column k, then the interior, with
 * a barrier between the parts. Every element sees the same operations in the same order at any
 * P, so the result is bit for bit the same; the main process checks it against a plain unblocked
 * factorization of its own private copy and prints
 *   result: n=96 block=16 checksum=<sum of all elements> bits=<its bit pattern>
 *   check: matches the serial factorization
 */
MAIN_ENV
#include <stdio.h>
#include <string.h>

struct global {
  LOCKDEC(idlock)
  BARDEC(step)
  long next_id;
};

static struct global* gl;
static double* a; /* n x n, row major, in shared memory */
static long n = 96, bs = 16, P = 1;

#define A(i, j) a[(i) * n + (j)]

static long owner(long bi, long bj) { return (bi + bj * (n / bs)) % P; }

/* The diagonal block (k, k): unit lower L and upper U in place. */
static void factor_diagonal(long k) {
  long lo = k * bs, hi = lo + bs, kk, i, j;
  for (kk = lo; kk < hi; ++kk)
    for (i = kk + 1; i < hi; ++i) {
      A(i, kk) /= A(kk, kk);
      for (j = kk + 1; j < hi; ++j) A(i, j) -= A(i, kk) * A(kk, j);
    }
}

/* Block (k, bj) of U: solve with the unit lower part of the diagonal block. */
static void solve_row_block(long k, long bj) {
  long lo = k * bs, hi = lo + bs, kk, i, j;
  for (kk = lo; kk < hi; ++kk)
    for (i = kk + 1; i < hi; ++i)
      for (j = bj * bs; j < (bj + 1) * bs; ++j) A(i, j) -= A(i, kk) * A(kk, j);
}

/* Block (bi, k) of L: solve with the upper part of the diagonal block. */
static void solve_column_block(long k, long bi) {
  long lo = k * bs, hi = lo + bs, kk, i, j;
  for (i = bi * bs; i < (bi + 1) * bs; ++i)
    for (kk = lo; kk < hi; ++kk) {
      A(i, kk) /= A(kk, kk);
      for (j = kk + 1; j < hi; ++j) A(i, j) -= A(i, kk) * A(kk, j);
    }
}

/* Interior block (bi, bj) -= L(bi, k) U(k, bj). */
static void update_interior(long k, long bi, long bj) {
  long kk, i, j;
  for (i = bi * bs; i < (bi + 1) * bs; ++i)
    for (kk = k * bs; kk < (k + 1) * bs; ++kk)
      for (j = bj * bs; j < (bj + 1) * bs; ++j) A(i, j) -= A(i, kk) * A(kk, j);
}

static void SlaveStart(void) {
  long id, k, bi, bj, nb = n / bs;
  LOCK(gl->idlock)
  id = gl->next_id++;
  UNLOCK(gl->idlock)
  BARRIER(gl->step, P)
  for (k = 0; k < nb; ++k) {
    if (owner(k, k) == id) factor_diagonal(k);
    BARRIER(gl->step, P)
    for (bj = k + 1; bj < nb; ++bj)
      if (owner(k, bj) == id) solve_row_block(k, bj);
    for (bi = k + 1; bi < nb; ++bi)
      if (owner(bi, k) == id) solve_column_block(k, bi);
    BARRIER(gl->step, P)
    for (bi = k + 1; bi < nb; ++bi)
      for (bj = k + 1; bj < nb; ++bj)
        if (owner(bi, bj) == id) update_interior(k, bi, bj);
    BARRIER(gl->step, P)
  }
}

/* The matrix: entries in [-1, 1) from a 64-bit linear congruential generator, n on the diagonal. */
static void fill(double* m) {
  unsigned long long x = 12345;
  long i, j;
  for (i = 0; i < n; ++i)
    for (j = 0; j < n; ++j) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      m[i * n + j] = (double)(x >> 11) / 4503599627370496.0 - 1.0 + (i == j ? (double)n : 0.0);
    }
}

/* The reference: the textbook right-looking factorization of a private copy. */
static void serial_lu(double* m) {
  long i, j, k;
  for (k = 0; k < n; ++k)
    for (i = k + 1; i < n; ++i) {
      m[i * n + k] /= m[k * n + k];
      for (j = k + 1; j < n; ++j) m[i * n + j] -= m[i * n + k] * m[k * n + j];
    }
}

int main(int argc, char** argv) {
  unsigned long t0, t1; /* CLOCK: wall-clock microseconds around the parallel section */
  long i;
  double sum = 0.0, *ref;
  unsigned long long bits;
  MAIN_INITENV(, 4000000)
  for (i = 1; i < argc; ++i) {
    if (strncmp(argv[i], "-n", 2) == 0) n = atol(argv[i] + 2);
    else if (strncmp(argv[i], "-b", 2) == 0) bs = atol(argv[i] + 2);
    else if (strncmp(argv[i], "-p", 2) == 0) P = atol(argv[i] + 2);
    else {
      fprintf(stderr, "usage: parmacs_lu [-nN] [-bB] [-pP]\n");
      exit(2);
    }
  }
  if (n < 1 || bs < 1 || n % bs != 0 || P < 1) {
    fprintf(stderr, "parmacs_lu: N must be a positive multiple of B, and P positive\n");
    exit(2);
  }
  gl = (struct global*)G_MALLOC(sizeof(struct global));
  gl->next_id = 0;
  LOCKINIT(gl->idlock)
  BARINIT(gl->step, P)
  a = (double*)G_MALLOC(n * n * sizeof(double));
  fill(a);

  CLOCK(t0)
  for (i = 1; i < P; ++i) CREATE(SlaveStart)
  SlaveStart();
  WAIT_FOR_END(P - 1)
  CLOCK(t1)

  for (i = 0; i < n * n; ++i) sum += a[i];
  memcpy(&bits, &sum, sizeof bits);
  printf("parmacs_lu: %ld processes\n", P);
  printf("time: %.3f s (the parallel section)\n", (double)(t1 - t0) / 1e6);
  printf("result: n=%ld block=%ld checksum=%.17g bits=%016llx\n", n, bs, sum, bits);
  ref = (double*)malloc(n * n * sizeof(double));
  fill(ref);
  serial_lu(ref);
  if (memcmp(ref, a, n * n * sizeof(double)) == 0) {
    printf("check: matches the serial factorization\n");
  } else {
    printf("check: DIFFERS from the serial factorization\n");
    exit(1);
  }
  free(ref);
  MAIN_END
}
