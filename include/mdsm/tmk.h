/* mdsm — the TreadMarks interface, for programs written for TreadMarks.
 *
 * A TreadMarks program runs under mpirun unchanged but for its include: every rank runs main(),
 * which calls Tmk_startup first; Tmk_proc_id and Tmk_nprocs say which process this is; shared
 * memory comes from Tmk_malloc (on any process; usually process 0, which hands the pointer to
 * the others with Tmk_distribute and a barrier); locks and barriers are named by small numbers
 * and exist from Tmk_startup on; Tmk_exit ends the process. Consistency is lazy release
 * consistency, as in TreadMarks: a process sees another's writes to shared memory after a lock
 * acquire or barrier that follows them.
 *
 * Differences from TreadMarks:
 *   - Processes are the ranks of MPI_COMM_WORLD, started by mpirun (tools/mdsmrun), not by
 *     Tmk_startup; Tmk_startup initializes MPI if the program has not.
 *   - Tmk_distribute names a private (non-shared) global or static variable of the program or of
 *     a shared library it loaded, as TreadMarks programs use it; with address-space layout
 *     randomization the variable's address differs between processes, so it is located by its
 *     offset within its object. Its receivers have the bytes when the call returns.
 *   - TreadMarks' calls return nothing, so misuse (a lock or barrier number out of range, a call
 *     before Tmk_startup, releasing a lock not held) prints what went wrong and ends the job
 *     (MPI_Abort, exit status 1) instead of returning an error. Tmk_malloc returns NULL when the
 *     shared region has no room (MDSM_COHERENT_SIZE makes it larger).
 *
 * The mdsm C API (mdsm.h) may be used alongside, after Tmk_startup.
 */
#ifndef MDSM_TMK_H
#define MDSM_TMK_H

#ifdef __cplusplus
extern "C" {
#endif

#define TMK_NLOCKS 1024   /* locks 0 .. TMK_NLOCKS - 1 */
#define TMK_NBARRIERS 64  /* barriers 0 .. TMK_NBARRIERS - 1, each over all processes */

/* This process's number (0 .. Tmk_nprocs - 1) and the number of processes; set by Tmk_startup. */
extern unsigned Tmk_proc_id;
extern unsigned Tmk_nprocs;

/* Every process calls it once, before any other Tmk_ call (collective). */
void Tmk_startup(int argc, char** argv);
/* Every process calls it at the end (collective); ends the process with `status`. */
void Tmk_exit(int status);

/* Shared memory: `size` bytes at an address that means the same on every process; NULL if the
 * shared region has no room. Tmk_free frees it (any process). */
void* Tmk_malloc(unsigned size);
void Tmk_free(void* ptr);

/* Copies `size` bytes of a private global variable at `ptr` on this process to the same variable
 * on every other process; returns once they all have them. */
void Tmk_distribute(void* ptr, unsigned size);

/* Barrier `id` over all processes: every process's shared writes before it are visible to every
 * process after it. */
void Tmk_barrier(unsigned id);

/* Lock `id`: acquiring it makes this process see the shared writes made by earlier holders
 * before their release. */
void Tmk_lock_acquire(unsigned id);
void Tmk_lock_release(unsigned id);

#ifdef __cplusplus
}
#endif

#endif /* MDSM_TMK_H */
