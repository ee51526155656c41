/* A TreadMarks program (C, tmk.h only), run by test/meson.build at 1-4 processes:
 *   tmk_program            shared counters under locks, globals set by process 0 and distributed,
 *                          barriers; checks every value and exits non-zero if one is wrong
 *   tmk_program misuse-lock | misuse-barrier | misuse-distribute | misuse-before-startup
 *                          one misuse each; the job must end with a message naming the call
 *                          (check_tmk_misuse.sh)
 */
#include <mdsm/tmk.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Private globals, as TreadMarks programs keep them: set by process 0, then distributed. */
static int* counts;       /* points into shared memory */
static double settings[3];
static int rounds = 0;

static int failures = 0;
#define EXPECT(cond)                                                                          \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      fprintf(stderr, "process %u: %s:%d: expected %s\n", Tmk_proc_id, __FILE__, __LINE__, #cond); \
      ++failures;                                                                             \
    }                                                                                         \
  } while (0)

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "misuse-before-startup") == 0) Tmk_lock_acquire(0);
  Tmk_startup(argc, argv);
  if (strcmp(mode, "misuse-lock") == 0) Tmk_lock_acquire(TMK_NLOCKS);
  if (strcmp(mode, "misuse-barrier") == 0) Tmk_barrier(TMK_NBARRIERS);
  if (strcmp(mode, "misuse-distribute") == 0) {
    int on_stack = 1;
    Tmk_distribute(&on_stack, sizeof on_stack);
  }

  const unsigned n = Tmk_nprocs, me = Tmk_proc_id;
  if (me == 0) {
    counts = (int*)Tmk_malloc(sizeof(int) * (2 + n));
    for (unsigned i = 0; i < 2 + n; ++i) counts[i] = 0;
    settings[0] = 1.5;
    settings[1] = -2.25;
    settings[2] = 1e300;
    rounds = 200;
    Tmk_distribute(&counts, sizeof counts);
    Tmk_distribute(settings, sizeof settings);
    Tmk_distribute(&rounds, sizeof rounds);
  }
  Tmk_barrier(0);
  EXPECT(counts != NULL);
  EXPECT(settings[0] == 1.5 && settings[1] == -2.25 && settings[2] == 1e300);
  EXPECT(rounds == 200);

  /* Every process adds to a shared total and to its own slot, under lock 7, and to another
   * total under the last lock; the last barrier number exists too. */
  for (int r = 0; r < rounds; ++r) {
    Tmk_lock_acquire(7);
    counts[0] += 1;
    counts[1 + me] += 2;
    Tmk_lock_release(7);
  }
  Tmk_lock_acquire(TMK_NLOCKS - 1);
  counts[1 + n] += 1000;
  Tmk_lock_release(TMK_NLOCKS - 1);
  Tmk_barrier(TMK_NBARRIERS - 1);
  EXPECT(counts[0] == (int)n * rounds);
  EXPECT(counts[1 + n] == (int)n * 1000);
  for (unsigned i = 0; i < n; ++i) EXPECT(counts[1 + i] == 2 * rounds);

  /* Shared memory allocated by another process than 0, and freed. */
  int* mine = (int*)Tmk_malloc(4096);
  EXPECT(mine != NULL);
  Tmk_free(mine);
  EXPECT(Tmk_malloc(~0u) == NULL); /* no room: NULL, not an error */
  Tmk_barrier(1);

  if (me == 0) printf("tmk_program: %u processes, %s\n", n, failures == 0 ? "all values right" : "WRONG VALUES");
  Tmk_exit(failures == 0 ? 0 : 1);
  return 0;
}
