/* The PARMACS macros themselves (include/mdsm/parmacs.m4), run by test/parmacs/check_parmacs.sh:
 *   parmacs_basics P            P processes (the job needs P ranks or more): globals set by the
 *                               main process reach the CREATEd ones, locks, lock arrays, barriers
 *                               (counted at init and at the first use), pause flags, two
 *                               fork-join phases; prints "parmacs_basics: P processes, all values
 *                               right" or exits non-zero
 *   parmacs_basics P MODE       one misuse each (misuse_in_main() and the modes in Work); the
 *                               job must end with a message naming the macro; or "exit-early"
 *                               (exit(3) before any CREATE), "worker-exit" (the second
 *                               phase's processes end with exit(0)) and "return-from-main" (no
 *                               MAIN_END), which must end as the program says
 */
MAIN_ENV
#include <stdio.h>
#include <string.h>

#define SLOTS 8

struct shared {
  LOCKDEC(idlock)
  LOCKDEC(sumlock)
  ALOCKDEC(slots, SLOTS)
  BARDEC(start)
  BARDEC(counted_late)
  PAUSEDEC(go)
  long next_id;
  long sum;
  long slot_sum[SLOTS];
  long wrong;
  long phase2[16];
};

/* Private globals, set by the main process before CREATE. */
static struct shared* gl;
static long P = 1;
static double params[3];
/* Relocated words (initialized with addresses in the program; not static, so the compiler keeps
 * them): CREATE moves them to this rank's program, also after the main process changed them. */
const char* label = "unset"; /* the main process sets it to "basics" */
static char mode[32];
static long rounds;
static long twice(long x) { return 2 * x; }
long (*hook)(long) = twice;
long* p_of_p = &P;
static LOCKDEC(private_lock) /* a lock handle in a private global, made before CREATE */
static BARDEC(private_bar)
static PAUSEDEC(private_pause)

static void check(int ok, const char* what, long pid) {
  if (!ok) {
    fprintf(stderr, "parmacs_basics: process %ld: wrong: %s\n", pid, what);
    LOCK(gl->sumlock)
    gl->wrong += 1;
    UNLOCK(gl->sumlock)
  }
}

static void Work(void) {
  long id, pid, r;
  LOCK(gl->idlock)
  id = gl->next_id++;
  UNLOCK(gl->idlock)
  GET_PID(pid)
  check(P >= 1 && rounds == 50, "P and rounds from the main process", pid);
  check(params[0] == 0.5 && params[1] == -3.25 && params[2] == 1e200, "params from the main process", pid);
  check(strcmp(label, "basics") == 0, "a statically initialized pointer", pid);
  check(hook(21) == 42 && p_of_p == &P && *p_of_p == P, "a function pointer and a pointer to a global", pid);
  check(fileno(stderr) == 2, "this rank's own stderr (a copy relocation)", pid);

  if (strcmp(mode, "create-in-worker") == 0 && pid != 0) CREATE(Work)
  if (strcmp(mode, "main-end-in-worker") == 0 && pid != 0) MAIN_END
  if (strcmp(mode, "wait-in-worker") == 0 && pid != 0) WAIT_FOR_END(1)
  if (strcmp(mode, "barrier-count") == 0 && pid != 0) BARRIER(gl->start, P + 1)
  if (strcmp(mode, "alock-index") == 0) ALOCK(gl->slots, SLOTS)
  if (strcmp(mode, "unlock-not-held") == 0 && pid != 0) UNLOCK(gl->sumlock)

  BARRIER(gl->start, P)
  for (r = 0; r < rounds; ++r) {
    LOCK(gl->sumlock)
    gl->sum += 1;
    UNLOCK(gl->sumlock)
    ALOCK(gl->slots, (id + r) % SLOTS)
    gl->slot_sum[(id + r) % SLOTS] += r;
    AULOCK(gl->slots, (id + r) % SLOTS)
    LOCK(private_lock)
    UNLOCK(private_lock)
  }
  BARRIER(gl->counted_late, P)
  BARRIER(private_bar, P)
  check(gl->sum == P * rounds, "the sum under the lock after the barriers", pid);
  /* The pause flag: process 0 of the phase waits for the last one. */
  if (id == P - 1) SETPAUSE(gl->go)
  WAITPAUSE(gl->go)
  BARRIER(gl->start, P)
  if (id == 0) CLEARPAUSE(gl->go)
}

static void Phase2(void) {
  long pid;
  GET_PID(pid)
  /* Written with no synchronization but the end of the process: WAIT_FOR_END makes it visible. */
  gl->phase2[pid] = 1000 + pid + rounds;
  /* A process may end with exit() as a forked child did: as if it returned. */
  if (strcmp(mode, "worker-exit") == 0 && pid != 0) exit(0);
}

static void misuse_in_main(void) {
  if (strcmp(mode, "too-many-creates") == 0) {
    long i;
    for (i = 0; i < P; ++i) CREATE(Phase2)
  }
  if (strcmp(mode, "wait-too-many") == 0) {
    CREATE(Phase2)
    WAIT_FOR_END(2)
  }
  if (strcmp(mode, "lock-uninit") == 0) {
    LOCKDEC(never)
    memset(&never, 0, sizeof never);
    LOCK(never)
  }
  if (strcmp(mode, "pause-private") == 0) PAUSEINIT(private_pause)
  if (strcmp(mode, "barinit-private-lazy") == 0) BARINIT(private_bar)
  if (strcmp(mode, "alockinit-too-many") == 0) ALOCKINIT(gl->slots, SLOTS + 1)
  if (strcmp(mode, "init-twice") == 0) MAIN_INITENV()
  if (strcmp(mode, "g-malloc-no-room") == 0) {
    char* big = (char*)G_MALLOC((size_t)1 << 40);
    big[0] = 1;
  }
}

int main(int argc, char** argv) {
  long i;
  if (argc > 2 && strcmp(argv[2], "before-init") == 0) {
    LOCKDEC(early)
    memset(&early, 0, sizeof early);
    LOCK(early)
  }
  MAIN_INITENV(, 1000000)
  if (argc > 1) P = atol(argv[1]);
  if (argc > 2) strncpy(mode, argv[2], sizeof mode - 1);
  if (P < 1 || P > 16) {
    fprintf(stderr, "usage: parmacs_basics P [MODE]   (1 <= P <= 16)\n");
    exit(2);
  }
  if (strcmp(mode, "exit-early") == 0) {
    /* exit() in the main process before any CREATE (a usage error) ends every rank. */
    printf("parmacs_basics: exit before any CREATE\n");
    fflush(stdout);
    exit(3);
  }
  gl = (struct shared*)G_MALLOC(sizeof(struct shared));
  memset(gl, 0, sizeof *gl);
  LOCKINIT(gl->idlock)
  LOCKINIT(gl->sumlock)
  ALOCKINIT(gl->slots, SLOTS)
  BARINIT(gl->start, P)
  BARINIT(gl->counted_late)
  PAUSEINIT(gl->go)
  LOCKINIT(private_lock)
  BARINIT(private_bar, P)
  label = "basics";
  params[0] = 0.5;
  params[1] = -3.25;
  params[2] = 1e200;
  rounds = 50;
  misuse_in_main();

  for (i = 1; i < P; ++i) CREATE(Work)
  Work();
  WAIT_FOR_END(P - 1)

  /* A second fork-join phase on the same ranks. */
  rounds = 7;
  for (i = 1; i < P; ++i) CREATE(Phase2)
  Phase2();
  WAIT_FOR_END(P - 1)

  {
    long expect = 0, got = 0, r;
    for (r = 0; r < 50; ++r) expect += r;
    for (i = 0; i < SLOTS; ++i) got += gl->slot_sum[i];
    check(got == P * expect, "the lock-array sums", 0);
    for (i = 0; i < P; ++i) check(gl->phase2[i] == 1000 + i + 7, "the second phase writes after the wait for its end", 0);
  }
  if (gl->wrong == 0) printf("parmacs_basics: %ld processes, all values right\n", P);
  else printf("parmacs_basics: %ld processes, %ld WRONG VALUES\n", P, gl->wrong);
  fflush(stdout);
  if (gl->wrong != 0) exit(1);
  if (strcmp(mode, "return-from-main") == 0) return 0; /* no MAIN_END: the end runs at exit */
  MAIN_END
}
