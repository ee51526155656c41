divert(-1)
# mdsm — the PARMACS macros (SPLASH style) for mdsm.
#
#   m4 -s -I <includedir>/mdsm parmacs.m4 prog.C > prog.c
#   cc prog.c $(pkg-config --cflags --libs mdsm)
#   tools/mdsmrun -n P ./prog ...
#
# The program is the ranks of an mpirun job (SPMD): every rank runs main(); MAIN_INITENV returns
# on rank 0 only (the main process); the other ranks wait inside it and run what CREATE hands
# them, with a copy of rank 0's globals taken at the CREATE (what fork() would copy). The run-time
# side and its rules are in mdsm/parmacs.h; the walk-through is docs/PORTING.md ("PARMACS
# programs"). Misuse ends the job with a message naming the macro and the place.
#
#   MAIN_ENV, EXTERN_ENV      the declarations (at file scope, before the first macro use)
#   MAIN_INITENV(,bytes)      start; `bytes` (optional): the shared memory the main process will
#                             G_MALLOC, so the shared region is made large enough for it
#   MAIN_END                  rank 0: wait for running processes, end every rank, exit(0)
#   CREATE(fn)                rank 0: the next idle rank runs fn() (void fn(void))
#   WAIT_FOR_END(n)           rank 0: wait until n CREATEd processes have returned
#   GET_PID(var)              var = this process's number (0: the main process; else its rank)
#   G_MALLOC(bytes), G_FREE(p)  shared memory (any process)
#   LOCKDEC(l), LOCKINIT(l), LOCK(l), UNLOCK(l)
#   ALOCKDEC(a,n), ALOCKINIT(a,n), ALOCK(a,i), AULOCK(a,i)        arrays of locks
#   BARDEC(b), BARINIT(b[,n]), BARRIER(b,n)   n processes per episode (BARINIT's n, or the first
#                                             BARRIER's; then the barrier must be in G_MALLOC'd memory)
#   PAUSEDEC(p), PAUSEINIT(p), SETPAUSE(p), CLEARPAUSE(p), WAITPAUSE(p)
#                             a flag in G_MALLOC'd memory: WAITPAUSE waits until it is set
#   CLOCK(var)                var = wall-clock microseconds (unsigned long)
#   AUG_ON, AUG_OFF           nothing (SPLASH's instrumentation switches)
#
# Every macro that declares ends in `;' (LOCKDEC(l) inside a struct needs none after it); every
# macro that is a statement ends in `;' too. m4 reads the whole source: a macro name written
# with parentheses in a comment or a string is expanded there too (one without parentheses is
# left alone, except MAIN_ENV, EXTERN_ENV, MAIN_END, AUG_ON and AUG_OFF, which take none).

define(MAIN_ENV, `#include <mdsm/parmacs.h>
#include <stdlib.h>
')
define(EXTERN_ENV, `#include <mdsm/parmacs.h>
#include <stdlib.h>
')
define(MAIN_INITENV, `ifelse($#, 0, ``MAIN_INITENV'', `mdsm_parmacs_init(ifelse(`$2', `', 0, (size_t)($2)), MDSM_PARMACS_AT("`MAIN_INITENV'($1,$2)"));')')
define(MAIN_END, `mdsm_parmacs_end(MDSM_PARMACS_AT("`MAIN_END'"));')
define(CREATE, `ifelse($#, 0, ``CREATE'', `mdsm_parmacs_create((void (*)(void))($1), MDSM_PARMACS_AT("`CREATE'($1)"));')')
define(WAIT_FOR_END, `ifelse($#, 0, ``WAIT_FOR_END'', `mdsm_parmacs_wait_for_end((long)($1), MDSM_PARMACS_AT("`WAIT_FOR_END'($1)"));')')
define(GET_PID, `ifelse($#, 0, ``GET_PID'', `{ ($1) = mdsm_parmacs_pid(); }')')
define(CLOCK, `ifelse($#, 0, ``CLOCK'', `{ ($1) = mdsm_parmacs_clock(); }')')
define(AUG_ON, `')
define(AUG_OFF, `')

define(G_MALLOC, `ifelse($#, 0, ``G_MALLOC'', `mdsm_parmacs_malloc((size_t)($1), MDSM_PARMACS_AT("`G_MALLOC'($1)"))')')
define(G_FREE, `ifelse($#, 0, ``G_FREE'', `mdsm_parmacs_free(($1), MDSM_PARMACS_AT("`G_FREE'($1)"));')')

define(LOCKDEC, `ifelse($#, 0, ``LOCKDEC'', `mdsm_mutex_handle $1;')')
define(LOCKINIT, `ifelse($#, 0, ``LOCKINIT'', `mdsm_parmacs_lock_init(&($1), MDSM_PARMACS_AT("`LOCKINIT'($1)"));')')
define(LOCK, `ifelse($#, 0, ``LOCK'', `mdsm_parmacs_lock(($1), MDSM_PARMACS_AT("`LOCK'($1)"));')')
define(UNLOCK, `ifelse($#, 0, ``UNLOCK'', `mdsm_parmacs_unlock(($1), MDSM_PARMACS_AT("`UNLOCK'($1)"));')')

define(ALOCKDEC, `ifelse($#, 0, ``ALOCKDEC'', `mdsm_mutex_handle $1[$2];')')
define(ALOCKINIT, `ifelse($#, 0, ``ALOCKINIT'', `mdsm_parmacs_alock_init(($1), (long)($2), sizeof($1) / sizeof(($1)[0]), MDSM_PARMACS_AT("`ALOCKINIT'($1,$2)"));')')
define(ALOCK, `ifelse($#, 0, ``ALOCK'', `mdsm_parmacs_alock(($1), (long)($2), sizeof($1) / sizeof(($1)[0]), MDSM_PARMACS_AT("`ALOCK'($1,$2)"));')')
define(AULOCK, `ifelse($#, 0, ``AULOCK'', `mdsm_parmacs_aulock(($1), (long)($2), sizeof($1) / sizeof(($1)[0]), MDSM_PARMACS_AT("`AULOCK'($1,$2)"));')')

define(BARDEC, `ifelse($#, 0, ``BARDEC'', `mdsm_parmacs_barrier $1;')')
define(BARINIT, `ifelse($#, 0, ``BARINIT'', `mdsm_parmacs_barrier_init(&($1), ifelse(`$2', `', 0, (long)($2)), MDSM_PARMACS_AT("`BARINIT'($1`'ifelse(`$2', `', `', `,$2'))"));')')
define(BARRIER, `ifelse($#, 0, ``BARRIER'', `mdsm_parmacs_barrier_wait(&($1), (long)($2), MDSM_PARMACS_AT("`BARRIER'($1,$2)"));')')

define(PAUSEDEC, `ifelse($#, 0, ``PAUSEDEC'', `mdsm_parmacs_pause $1;')')
define(PAUSEINIT, `ifelse($#, 0, ``PAUSEINIT'', `mdsm_parmacs_pause_init(&($1), MDSM_PARMACS_AT("`PAUSEINIT'($1)"));')')
define(SETPAUSE, `ifelse($#, 0, ``SETPAUSE'', `mdsm_parmacs_pause_set(&($1), MDSM_PARMACS_AT("`SETPAUSE'($1)"));')')
define(CLEARPAUSE, `ifelse($#, 0, ``CLEARPAUSE'', `mdsm_parmacs_pause_clear(&($1), MDSM_PARMACS_AT("`CLEARPAUSE'($1)"));')')
define(WAITPAUSE, `ifelse($#, 0, ``WAITPAUSE'', `mdsm_parmacs_pause_wait(&($1), MDSM_PARMACS_AT("`WAITPAUSE'($1)"));')')
divert(0)dnl
