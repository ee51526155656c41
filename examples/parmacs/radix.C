/* Parallel radix sort with pause flags, PARMACS style (after SPLASH's RADIX, small).
 *
 *   parmacs_radix [-nN] [-rR] [-mM] [-pP]   N keys (default 32768) below 2^M (default 20), R bits
 *                                           per pass (default 6), P processes (default 1)
 *
 * Each process owns a slice of the keys. A pass: every process counts its slice's digits; the
 * prefix over processes runs down a chain of pause flags (process p waits for p-1's flag, adds
 * p-1's counts to its own running offsets and sets its flag; the last one also computes where
 * each digit's keys start); then every process moves its keys to their places in the other
 * array. The main process checks the result against qsort of its private copy and prints
 *   result: n=32768 bits=20 radix=6 checksum=<sum of key * (index + 1), mod 2^64>
 *   check: matches qsort
 */
MAIN_ENV
#include <stdio.h>
#include <string.h>

#define MAXP 64
#define MAXRADIX 4096

struct global {
  BARDEC(pass)
  PAUSEDEC(ready[MAXP]) /* ready[p]: process p's running offsets are in partial[p] */
  long hist[MAXP][MAXRADIX];
  long partial[MAXP][MAXRADIX]; /* keys of digit d in the slices of processes 0 .. p-1 */
  long start[MAXRADIX];         /* where the keys of digit d begin */
};

static struct global* gl;
static unsigned long* keys[2]; /* shared: the keys, and the other array of each pass */
static long n = 32768, rbits = 6, mbits = 20, P = 1;

static void SlaveStart(void) {
  long id, pass, passes = (mbits + rbits - 1) / rbits, radix = 1L << rbits, d, i;
  long lo, hi, offset[MAXRADIX];
  GET_PID(id) /* processes are ranks 0 .. P-1 here */
  lo = n * id / P;
  hi = n * (id + 1) / P;
  for (pass = 0; pass < passes; ++pass) {
    unsigned long* from = keys[pass % 2];
    unsigned long* to = keys[(pass + 1) % 2];
    long shift = pass * rbits;
    for (d = 0; d < radix; ++d) gl->hist[id][d] = 0;
    for (i = lo; i < hi; ++i) gl->hist[id][(from[i] >> shift) & (radix - 1)] += 1;
    /* The chain: partial[id] = partial[id-1] + hist[id-1]. */
    if (id == 0) {
      for (d = 0; d < radix; ++d) gl->partial[0][d] = 0;
    } else {
      WAITPAUSE(gl->ready[id - 1])
      for (d = 0; d < radix; ++d) gl->partial[id][d] = gl->partial[id - 1][d] + gl->hist[id - 1][d];
    }
    if (id == P - 1) {
      long at = 0;
      for (d = 0; d < radix; ++d) {
        gl->start[d] = at;
        at += gl->partial[id][d] + gl->hist[id][d];
      }
    }
    SETPAUSE(gl->ready[id])
    WAITPAUSE(gl->ready[P - 1])
    for (d = 0; d < radix; ++d) offset[d] = gl->start[d] + gl->partial[id][d];
    for (i = lo; i < hi; ++i) to[offset[(from[i] >> shift) & (radix - 1)]++] = from[i];
    BARRIER(gl->pass, P)
    /* Every wait on the flags of this pass is over: clear them for the next one. */
    CLEARPAUSE(gl->ready[id])
    BARRIER(gl->pass, P)
  }
}

static void generate(unsigned long* k) {
  unsigned long long x = 2026;
  long i;
  for (i = 0; i < n; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    k[i] = (unsigned long)(x >> 33) & ((1UL << mbits) - 1);
  }
}

static int compare(const void* x, const void* y) {
  unsigned long a = *(const unsigned long*)x, b = *(const unsigned long*)y;
  return a < b ? -1 : a > b;
}

int main(int argc, char** argv) {
  unsigned long t0, t1; /* CLOCK: wall-clock microseconds around the parallel section */
  long i, passes;
  unsigned long long checksum = 0;
  unsigned long *sorted, *ref;
  MAIN_INITENV(, 8000000)
  for (i = 1; i < argc; ++i) {
    if (strncmp(argv[i], "-n", 2) == 0) n = atol(argv[i] + 2);
    else if (strncmp(argv[i], "-r", 2) == 0) rbits = atol(argv[i] + 2);
    else if (strncmp(argv[i], "-m", 2) == 0) mbits = atol(argv[i] + 2);
    else if (strncmp(argv[i], "-p", 2) == 0) P = atol(argv[i] + 2);
    else {
      fprintf(stderr, "usage: parmacs_radix [-nN] [-rR] [-mM] [-pP]\n");
      exit(2);
    }
  }
  if (n < 1 || P < 1 || P > MAXP || rbits < 1 || (1L << rbits) > MAXRADIX || mbits < 1 || mbits > 40) {
    fprintf(stderr, "parmacs_radix: need N >= 1, 1 <= P <= %d, 2^R <= %d, 1 <= M <= 40\n", MAXP, MAXRADIX);
    exit(2);
  }
  gl = (struct global*)G_MALLOC(sizeof(struct global));
  BARINIT(gl->pass, P)
  for (i = 0; i < P; ++i) PAUSEINIT(gl->ready[i])
  keys[0] = (unsigned long*)G_MALLOC(n * sizeof(unsigned long));
  keys[1] = (unsigned long*)G_MALLOC(n * sizeof(unsigned long));
  generate(keys[0]);

  CLOCK(t0)
  for (i = 1; i < P; ++i) CREATE(SlaveStart)
  SlaveStart();
  WAIT_FOR_END(P - 1)
  CLOCK(t1)

  passes = (mbits + rbits - 1) / rbits;
  sorted = keys[passes % 2];
  for (i = 0; i < n; ++i) checksum += (unsigned long long)sorted[i] * (unsigned long long)(i + 1);
  printf("parmacs_radix: %ld processes\n", P);
  printf("time: %.3f s (the parallel section)\n", (double)(t1 - t0) / 1e6);
  printf("result: n=%ld bits=%ld radix=%ld checksum=%llu\n", n, mbits, rbits, checksum);
  ref = (unsigned long*)malloc(n * sizeof(unsigned long));
  generate(ref);
  qsort(ref, (size_t)n, sizeof *ref, compare);
  if (memcmp(ref, sorted, n * sizeof(unsigned long)) == 0) {
    printf("check: matches qsort\n");
  } else {
    printf("check: DIFFERS from qsort\n");
    exit(1);
  }
  free(ref);
  MAIN_END
}
