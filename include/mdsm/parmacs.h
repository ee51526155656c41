/* mdsm — the run-time side of the PARMACS macros (include/mdsm/parmacs.m4).
 *
 * A PARMACS program (SPLASH style: the main process sets up shared memory and its globals, then
 * CREATEs P-1 processes that run a function, then WAIT_FOR_END) is written in m4 macros; running
 * `m4 parmacs.m4 prog.C > prog.c` turns them into calls of the functions below. Programs use the
 * macros, not these functions; the functions exist so the macros stay one line each and misuse
 * is reported with the macro's name and the program's file and line.
 *
 * The fork-join program becomes SPMD (docs/PORTING.md, "PARMACS programs"):
 *   - every rank of the mpirun job runs main(); MAIN_INITENV starts mdsm;
 *   - rank 0 is the main process and returns from MAIN_INITENV; every other rank stays inside
 *     it, waiting for a CREATE, and never runs the rest of main();
 *   - CREATE(f) on rank 0 picks the lowest idle rank k and sends it a RELEASE message holding a
 *     copy of rank 0's global variables (the program's writable data: what fork() would copy) and
 *     f named by its object and offset (load addresses differ per rank); rank k accepts it (it
 *     then sees rank 0's shared-memory writes), takes the globals, and runs f;
 *   - when f returns, rank k sends rank 0 a RELEASE "done" and waits for the next CREATE or for
 *     the end; WAIT_FOR_END(n) on rank 0 accepts n of those, so rank 0 sees the workers' writes;
 *   - MAIN_END (or exit(0), or returning from main) on rank 0 waits for workers still running,
 *     tells every rank to end, and finalizes; exit(0) in a CREATEd process is its return; exit
 *     with another status on any rank ends the whole job with that status (MPI_Abort);
 *   - the parked waits (for a CREATE, for the end, WAIT_FOR_END) nap after 2 ms and are exempt
 *     from the failure detector's deadline: they wait for a phase of the program.
 * Locks, barriers and pause flags are handles (docs/SYNC.md "Handles"): made by one rank, no
 * message, an 8-byte value that may live inside G_MALLOC'd memory and works on every rank.
 *
 * Misuse ends the job (MPI_Abort, exit status 1) after a message naming the macro, the process
 * and the place, since PARMACS macros return nothing.
 */
#ifndef MDSM_PARMACS_H
#define MDSM_PARMACS_H

#include <mdsm/mdsm.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A barrier: BARDEC(b) declares one. `count` is fixed by BARINIT(b, n) or by the first
 * BARRIER(b, n) (then the first arrival makes the handle, under `init`). */
typedef struct mdsm_parmacs_barrier {
  mdsm_barrier_handle handle;
  mdsm_mutex_handle init;
  long count;
} mdsm_parmacs_barrier;

/* A pause flag: PAUSEDEC(p) declares one; it lives in shared memory (G_MALLOC). */
typedef struct mdsm_parmacs_pause {
  mdsm_mutex_handle mutex;
  mdsm_cond_handle set;
  long flag;
} mdsm_parmacs_pause;

/* Where a macro was written: the macro with its arguments, the file and the line. */
#define MDSM_PARMACS_AT(text) text, __FILE__, __LINE__

/* MAIN_INITENV: collective; returns on rank 0 only. `shared_bytes` (0: none given) makes the
 * coherent region large enough for rank 0 to G_MALLOC that much. */
void mdsm_parmacs_init(size_t shared_bytes, const char* text, const char* file, int line);
/* MAIN_END: rank 0 only; ends the job with status 0 (as exit(0)). */
void mdsm_parmacs_end(const char* text, const char* file, int line);
/* CREATE(f): rank 0 only. */
void mdsm_parmacs_create(void (*fn)(void), const char* text, const char* file, int line);
/* WAIT_FOR_END(n): rank 0 only; n <= the processes created and not yet waited for. */
void mdsm_parmacs_wait_for_end(long n, const char* text, const char* file, int line);
/* GET_PID: 0 on the main process, the rank elsewhere. */
int mdsm_parmacs_pid(void);

/* G_MALLOC / G_FREE: shared memory from the calling rank's arena (any process). */
void* mdsm_parmacs_malloc(size_t bytes, const char* text, const char* file, int line);
void mdsm_parmacs_free(void* p, const char* text, const char* file, int line);

/* LOCKINIT / LOCK / UNLOCK, and the lock arrays (ALOCKINIT / ALOCK / AULOCK); `capacity` is the
 * declared length of the array (ALOCKDEC), which the index is checked against. */
void mdsm_parmacs_lock_init(mdsm_mutex_handle* lock, const char* text, const char* file, int line);
void mdsm_parmacs_lock(mdsm_mutex_handle lock, const char* text, const char* file, int line);
void mdsm_parmacs_unlock(mdsm_mutex_handle lock, const char* text, const char* file, int line);
void mdsm_parmacs_alock_init(mdsm_mutex_handle* locks, long n, size_t capacity, const char* text, const char* file,
                             int line);
void mdsm_parmacs_alock(mdsm_mutex_handle* locks, long i, size_t capacity, const char* text, const char* file,
                        int line);
void mdsm_parmacs_aulock(mdsm_mutex_handle* locks, long i, size_t capacity, const char* text, const char* file,
                         int line);

/* BARINIT (count 0: fixed by the first BARRIER) / BARRIER. */
void mdsm_parmacs_barrier_init(mdsm_parmacs_barrier* b, long count, const char* text, const char* file, int line);
void mdsm_parmacs_barrier_wait(mdsm_parmacs_barrier* b, long count, const char* text, const char* file, int line);

/* PAUSEINIT / SETPAUSE / CLEARPAUSE / WAITPAUSE. */
void mdsm_parmacs_pause_init(mdsm_parmacs_pause* p, const char* text, const char* file, int line);
void mdsm_parmacs_pause_set(mdsm_parmacs_pause* p, const char* text, const char* file, int line);
void mdsm_parmacs_pause_clear(mdsm_parmacs_pause* p, const char* text, const char* file, int line);
void mdsm_parmacs_pause_wait(mdsm_parmacs_pause* p, const char* text, const char* file, int line);

/* CLOCK: microseconds (wall clock), as the SPLASH macros. */
unsigned long mdsm_parmacs_clock(void);

#ifdef __cplusplus
}
#endif

#endif /* MDSM_PARMACS_H */
