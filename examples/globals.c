/* globals.c: shared globals, as a threaded C program keeps them, made coherent in place with
 * mdsm_make_coherent (docs/PORTING.md). Rank 0 (the "main thread") sets the parameters up; every
 * rank then fills its part of the result and adds to a counter under a lock; rank 0 prints the
 * total. Built with -no-pie (examples/meson.build), so each global lies at the same address in
 * every rank, on any host, without mdsmrun --no-aslr.
 *
 *   mdsmrun -n 4 ./globals_c
 */
#include <mdsm/mdsm.h>

#include <stdio.h>
#include <stdlib.h>

enum { k_cells = 2048 };

/* Every shared global in one page-aligned object: its size is rounded up to whole pages, so
 * nothing private shares its pages. */
static struct {
  int cells;        /* set by rank 0 before the registration */
  double scale;     /* likewise */
  double result[k_cells];
  long done;        /* ranks that finished, under `lock` */
  mdsm_mutex_handle lock;
} __attribute__((aligned(4096))) shared;

static int ranks_done = 0; /* private: every rank has its own */

static void check(mdsm_status s, const char* what) {
  if (s != MDSM_SUCCESS) {
    fprintf(stderr, "%s: %s (%s)\n", what, mdsm_strerror(s), mdsm_last_error());
    exit(1);
  }
}

int main(int argc, char** argv) {
  check(mdsm_init(&argc, &argv, NULL), "mdsm_init");
  int me = 0, n = 0;
  check(mdsm_rank(&me), "mdsm_rank");
  check(mdsm_size(&n), "mdsm_size");
  if (me == 0) { /* the main thread's set-up */
    shared.cells = k_cells;
    shared.scale = 0.25;
    check(mdsm_mutex_handle_create(&shared.lock), "mdsm_mutex_handle_create");
  }
  check(mdsm_make_coherent(&shared, sizeof shared), "mdsm_make_coherent");
  mdsm_barrier* all = NULL; /* every rank (NULL participants): created collectively */
  check(mdsm_barrier_create(NULL, 0, &all), "mdsm_barrier_create");

  /* The workers: rank r fills cells r, r + n, ... and counts itself in. */
  for (int i = me; i < shared.cells; i += n) shared.result[i] = shared.scale * i;
  check(mdsm_mutex_handle_lock(shared.lock), "mdsm_mutex_handle_lock");
  ++shared.done;
  check(mdsm_mutex_handle_unlock(shared.lock), "mdsm_mutex_handle_unlock");
  check(mdsm_barrier_wait(all), "mdsm_barrier_wait");

  double sum = 0;
  for (int i = 0; i < shared.cells; ++i) sum += shared.result[i];
  const double want = 0.25 * (double)k_cells * (k_cells - 1) / 2;
  ranks_done = (int)shared.done;
  if (sum != want || ranks_done != n) {
    fprintf(stderr, "rank %d: sum %.1f (want %.1f), %d ranks done (want %d)\n", me, sum, want, ranks_done, n);
    return 1;
  }
  if (me == 0) printf("globals: %d ranks filled %d cells, sum %.1f\n", n, shared.cells, sum);
  check(mdsm_barrier_wait(all), "mdsm_barrier_wait"); /* nobody uses the lock any more */
  if (me == 0) check(mdsm_mutex_handle_destroy(shared.lock), "mdsm_mutex_handle_destroy");
  check(mdsm_barrier_destroy(all), "mdsm_barrier_destroy");
  check(mdsm_finalize(), "mdsm_finalize");
  return 0;
}
