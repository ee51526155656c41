/* mdsm — MPI message passing and a software distributed shared memory in one program.
 *
 * C API. Every function that can fail returns an mdsm_status; mdsm_strerror() describes a code
 * and mdsm_last_error() returns the full message of the calling thread's last failure (what
 * went wrong and what to do). The semantics are those of the C++ API in mdsm.hpp, which
 * documents the model and the handler contract in full. In short, a handler:
 *   - must not block and must not touch the coherent region;
 *   - must dispose of a MDSM_RELEASE / MDSM_RELEASE_NT message exactly once, with
 *     mdsm_accept, mdsm_forward or mdsm_store.
 */
#ifndef MDSM_H
#define MDSM_H

#include <mdsm/mdsm_status.h>
#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- start-up and shut-down ------------------------------------------------------------- */

typedef struct mdsm_options {
  size_t coherent_size;       /* bytes of the coherent region; 0: MDSM_COHERENT_SIZE or 1 GiB */
  size_t unit_pages;          /* coherence unit in OS pages; 0: MDSM_COHERENT_UNIT_PAGES or 1 */
  uintptr_t coherent_address; /* 0: the ranks agree on an address */
  int strict_address;         /* nonzero: fail instead of moving away from coherent_address */
  int progress_thread;        /* nonzero: run a progress thread (MDSM_PROGRESS_THREAD overrides) */
  double wait_deadline_s;     /* a wait for another rank longer than this ends the job (see
                                 mdsm::options); 0: MDSM_WAIT_DEADLINE_S or 600; < 0: none */
  size_t noncoherent_size;    /* bytes of the non-coherent region; 0: MDSM_NONCOHERENT_SIZE or 1 GiB */
} mdsm_options;

/* Fills in the defaults. */
void mdsm_options_init(mdsm_options* opts);
/* Initializes MPI (MPI_THREAD_MULTIPLE) if nobody has, then mdsm over MPI_COMM_WORLD.
 * opts may be NULL. Collective. */
mdsm_status mdsm_init(int* argc, char*** argv, const mdsm_options* opts);
/* Collective over comm; MPI must provide MPI_THREAD_MULTIPLE. opts may be NULL. */
mdsm_status mdsm_init_comm(MPI_Comm comm, const mdsm_options* opts);
/* Collective. Waits until no message is in flight, prints MDSM_STATS output, releases all. */
mdsm_status mdsm_finalize(void);
int mdsm_initialized(void);
mdsm_status mdsm_rank(int* rank);
mdsm_status mdsm_size(int* size);
/* The full message of this thread's last failed call ("" if none). */
const char* mdsm_last_error(void);

/* ---- annotated active messages ------------------------------------------------------------ */

typedef enum mdsm_annotation {
  MDSM_NONE = 0,       /* not synchronizing, nothing attached */
  MDSM_REQUEST = 1,    /* not synchronizing, carries the sender's vector time */
  MDSM_RELEASE = 2,    /* synchronizing: a release on send, an acquire on accept */
  MDSM_RELEASE_NT = 3  /* synchronizing, carries only the sender's own intervals */
} mdsm_annotation;

typedef uint32_t mdsm_handler_id;
typedef struct mdsm_message mdsm_message; /* valid only while its handler runs */
typedef struct mdsm_stored mdsm_stored;   /* a stored message; free with mdsm_stored_free */
typedef void (*mdsm_handler_fn)(mdsm_message* msg, void* context);

/* Collective: same handlers, same order, on every rank. */
mdsm_status mdsm_register_handler(const char* name, mdsm_handler_fn fn, void* context, mdsm_handler_id* id);
/* Asynchronous; the payload is copied before the call returns. From an application thread it may
   first wait for flow control, delivering messages meanwhile (see mdsm::unthrottled_sends). */
mdsm_status mdsm_send(int dest, mdsm_handler_id handler, const void* payload, size_t len, mdsm_annotation annotation);
/* Between begin and end (per thread, nesting), this thread's sends never wait for flow control:
   for sends made while holding a lock this rank's handlers take (see mdsm::unthrottled_sends).
   end without a matching begin: MDSM_ERR_INVALID_ARGUMENT. */
mdsm_status mdsm_unthrottled_begin(void);
mdsm_status mdsm_unthrottled_end(void);

int mdsm_message_source(const mdsm_message* msg);
int mdsm_message_origin(const mdsm_message* msg);
mdsm_annotation mdsm_message_annotation(const mdsm_message* msg);
const void* mdsm_message_payload(const mdsm_message* msg, size_t* len);
mdsm_status mdsm_accept(mdsm_message* msg);
mdsm_status mdsm_forward(mdsm_message* msg, int dest);
mdsm_status mdsm_store(mdsm_message* msg, mdsm_stored** stored);

/* From an application thread, returns once the acquire is complete. */
mdsm_status mdsm_stored_accept(mdsm_stored* stored);
mdsm_status mdsm_stored_forward(mdsm_stored* stored, int dest);
/* Disposes of a stored message without accepting or forwarding it, giving up the consistency it
 * carried (mdsm::stored_message::discard); the payload stays readable until mdsm_stored_free.
 * MDSM_ERR_ALREADY_DISPOSED if it was accepted, forwarded or discarded. */
mdsm_status mdsm_stored_discard(mdsm_stored* stored);
int mdsm_stored_origin(const mdsm_stored* stored);
mdsm_annotation mdsm_stored_annotation(const mdsm_stored* stored);
const void* mdsm_stored_payload(const mdsm_stored* stored, size_t* len);
/* Frees a stored message (reported if it was a RELEASE never accepted or forwarded). */
void mdsm_stored_free(mdsm_stored* stored);

/* Delivers pending messages on the calling thread. */
mdsm_status mdsm_poll(void);
/* Drives progress until done(context) returns nonzero. */
mdsm_status mdsm_wait_until(int (*done)(void* context), void* context);

/* User-level thread upcalls: a scheduler receives the waits of its threads instead of mdsm
 * polling through them (mdsm::set_upcalls in mdsm.hpp states the contract). All three functions
 * set, or all NULL to remove them. */
typedef struct mdsm_wait_token mdsm_wait_token;
typedef struct mdsm_upcalls {
  void* (*current)(void* context);
  void (*block)(mdsm_wait_token* token, void* waiter, void* context);
  void (*wake)(mdsm_wait_token* token, void* waiter, void* context);
  void* context;
} mdsm_upcalls;
mdsm_status mdsm_set_upcalls(const mdsm_upcalls* upcalls);

/* mdsm's fibers (mdsm/fibers.hpp, docs/FIBERS.md): user-level threads whose mdsm waits suspend
 * only the fiber. A handle is the address of the fiber's control block (in the non-coherent
 * region). stack_bytes 0: the default (MDSM_FIBER_STACK_KB). join frees the fiber; it returns
 * MDSM_ERR_TASK_FAILED if the fiber ended holding an mdsm mutex. */
typedef struct mdsm_fiber_block* mdsm_fiber;
mdsm_status mdsm_fiber_spawn(void (*fn)(void* arg), void* arg, size_t stack_bytes, mdsm_fiber* fiber);
mdsm_status mdsm_fiber_yield(void);
mdsm_status mdsm_fiber_join(mdsm_fiber fiber);
/* Runs the calling thread's fibers until all have ended (not from a fiber). */
mdsm_status mdsm_fibers_run(void);
int mdsm_in_fiber(void);

/* Remote spawn (mdsm::fibers::register_task / spawn_remote): a task registered collectively (same
 * names, same order on every rank) runs on a new fiber of the rank it is spawned on, started when
 * that rank's first scheduling thread enters its scheduler. The task gets its arguments and
 * returns 0 with its result in *result (from malloc, freed by mdsm; NULL for none) and
 * *result_len, or nonzero for a failure, which the spawner's mdsm_remote_result_get reports as
 * MDSM_ERR_TASK_FAILED. The spawn is a message annotated `annotation`: RELEASE (or RELEASE_NT)
 * when the task reads the caller's shared data; the result comes back in a RELEASE (NONE for a
 * NONE spawn), so the caller then sees the task's writes. */
typedef uint32_t mdsm_task;
typedef int (*mdsm_task_fn)(const void* args, size_t args_len, void** result, size_t* result_len, void* context);
mdsm_status mdsm_task_register(const char* name, mdsm_task_fn fn, void* context, mdsm_task* task);
typedef struct mdsm_remote_result mdsm_remote_result;
mdsm_status mdsm_spawn_remote(int rank, mdsm_task task, const void* args, size_t args_len, mdsm_annotation annotation,
                              mdsm_remote_result** result);
/* *ready = 1 once the result has arrived. */
mdsm_status mdsm_remote_result_ready(const mdsm_remote_result* result, int* ready);
/* Waits for the result (a fiber only suspends; outside one the thread runs its fibers), copies it
 * into buf (capacity cap) and sets *len to its size. MDSM_ERR_INVALID_ARGUMENT if it does not fit
 * (*len says how much it needs; call again with a larger buffer); MDSM_ERR_TASK_FAILED if the task
 * failed (mdsm_last_error has its message). Free the result with mdsm_remote_result_free; one
 * never taken gives its RELEASE up. */
mdsm_status mdsm_remote_result_get(mdsm_remote_result* result, void* buf, size_t cap, size_t* len);
void mdsm_remote_result_free(mdsm_remote_result* result);
int mdsm_in_handler(void);
/* Pauses / resumes this rank's progress thread; see mdsm::pause_progress_thread in mdsm.hpp. */
mdsm_status mdsm_pause_progress_thread(void);
mdsm_status mdsm_resume_progress_thread(void);

/* ---- the coherent region --------------------------------------------------------------------- */

mdsm_status mdsm_alloc(size_t bytes, void** ptr);            /* non-collective, unique address */
mdsm_status mdsm_alloc_collective(size_t bytes, void** ptr); /* collective, same address */
mdsm_status mdsm_free(void* ptr);
mdsm_status mdsm_free_collective(void* ptr);
int mdsm_is_coherent(const void* ptr);
/* Collective: [addr, addr + bytes), memory the program has at the same address on every rank
 * (its globals: one object with __attribute__((aligned(4096))), whose size is then rounded up
 * too), becomes coherent and holds rank 0's bytes; see mdsm::make_coherent in mdsm.hpp. */
mdsm_status mdsm_make_coherent(void* addr, size_t bytes);
mdsm_status mdsm_gc(void); /* collective */
/* Global barriers collect garbage once some rank holds more metadata than this (0: never);
 * MDSM_GC_THRESHOLD if set, else the larger of 64 MiB and the bytes allocated collectively
 * (it grows with mdsm_alloc_collective) until mdsm_set_gc_threshold fixes it. The threshold is
 * the calling rank's: each rank compares its own metadata with its own threshold. */
mdsm_status mdsm_gc_threshold(uint64_t* bytes);
mdsm_status mdsm_set_gc_threshold(uint64_t bytes);

/* ---- the non-coherent region (see mdsm.hpp for the semantics) --------------------------------
 * Mapped at one address on every rank; every rank has its own bytes there and mdsm keeps no
 * consistency. Any rank reads and writes another rank's copy with get/put and 64-bit atomics;
 * the operations one thread issues to one rank are applied there in order. Handlers may use the
 * _nb calls and mdsm_request_test; the blocking calls and mdsm_request_wait give
 * MDSM_ERR_HANDLER_CONTEXT there. Errors: MDSM_ERR_INVALID_RANK, MDSM_ERR_NOT_IN_REGION (remote
 * range outside the region), MDSM_ERR_INVALID_ARGUMENT (NULL buffer, misaligned atomic word),
 * MDSM_ERR_INVALID_HANDLE (a null, finished or unknown request). */

mdsm_status mdsm_nc_alloc(size_t bytes, void** ptr);            /* non-collective, unique address */
mdsm_status mdsm_nc_alloc_collective(size_t bytes, void** ptr); /* collective, same address */
mdsm_status mdsm_nc_free(void* ptr);
mdsm_status mdsm_nc_free_collective(void* ptr);
int mdsm_is_noncoherent(const void* ptr);

/* A non-blocking operation in flight; a zero id is the null request. */
typedef struct mdsm_request {
  uint64_t id;
} mdsm_request;

/* bytes from rank's copy of [src, src + bytes) to dst / from src to rank's copy of [dst, ...) */
mdsm_status mdsm_get(void* dst, int rank, const void* src, size_t bytes);
mdsm_status mdsm_put(int rank, void* dst, const void* src, size_t bytes);
mdsm_status mdsm_get_nb(void* dst, int rank, const void* src, size_t bytes, mdsm_request* req);
mdsm_status mdsm_put_nb(int rank, void* dst, const void* src, size_t bytes, mdsm_request* req);
/* *old (may be NULL) gets the word's value before the operation. */
mdsm_status mdsm_fetch_add(int rank, uint64_t* word, uint64_t value, uint64_t* old);
mdsm_status mdsm_compare_swap(int rank, uint64_t* word, uint64_t expected, uint64_t desired, uint64_t* old);
mdsm_status mdsm_fetch_add_nb(int rank, uint64_t* word, uint64_t value, mdsm_request* req);
mdsm_status mdsm_compare_swap_nb(int rank, uint64_t* word, uint64_t expected, uint64_t desired, mdsm_request* req);
/* Waits until complete; *value (may be NULL) gets an atomic's old value. The request is then
 * released and *req becomes the null request. Application threads only. */
mdsm_status mdsm_request_wait(mdsm_request* req, uint64_t* value);
/* *done = 1 once complete (then as mdsm_request_wait), else 0. Any context. */
mdsm_status mdsm_request_test(mdsm_request* req, int* done, uint64_t* value);
/* Releases a request without waiting; the operation still completes. *req becomes null. */
mdsm_status mdsm_request_free(mdsm_request* req);

/* ---- coordination (see mdsm.hpp for the semantics) ------------------------------------------
 * Create and destroy collectively (every rank, same order). manager < 0: the default manager. */

typedef struct mdsm_mutex mdsm_mutex;
mdsm_status mdsm_mutex_create(int manager, mdsm_mutex** mutex);
mdsm_status mdsm_mutex_lock(mdsm_mutex* mutex);
mdsm_status mdsm_mutex_trylock(mdsm_mutex* mutex, int* acquired);
mdsm_status mdsm_mutex_unlock(mdsm_mutex* mutex);
mdsm_status mdsm_mutex_destroy(mdsm_mutex* mutex);

typedef struct mdsm_semaphore mdsm_semaphore;
mdsm_status mdsm_semaphore_create(long initial, int manager, mdsm_semaphore** sem);
mdsm_status mdsm_semaphore_acquire(mdsm_semaphore* sem);
mdsm_status mdsm_semaphore_tryacquire(mdsm_semaphore* sem, int* acquired);
mdsm_status mdsm_semaphore_release(mdsm_semaphore* sem, long n);
mdsm_status mdsm_semaphore_destroy(mdsm_semaphore* sem);

typedef struct mdsm_cond mdsm_cond;
mdsm_status mdsm_cond_create(int manager, mdsm_cond** cond);
mdsm_status mdsm_cond_wait(mdsm_cond* cond, mdsm_mutex* mutex);
mdsm_status mdsm_cond_signal(mdsm_cond* cond);
mdsm_status mdsm_cond_broadcast(mdsm_cond* cond);
mdsm_status mdsm_cond_destroy(mdsm_cond* cond);

typedef struct mdsm_barrier mdsm_barrier;
/* participants == NULL: all ranks. */
mdsm_status mdsm_barrier_create(const int* participants, int count, mdsm_barrier** barrier);
mdsm_status mdsm_barrier_wait(mdsm_barrier* barrier);
mdsm_status mdsm_barrier_destroy(mdsm_barrier* barrier);

typedef struct mdsm_queue mdsm_queue;
/* order: MDSM_QUEUE_FIFO, MDSM_QUEUE_LIFO (a work stack) or MDSM_QUEUE_LIFO_LOCAL (the newest item
 * the popping rank pushed itself, else the newest of all); see mdsm::work_queue::order. */
enum { MDSM_QUEUE_FIFO = 0, MDSM_QUEUE_LIFO = 1, MDSM_QUEUE_LIFO_LOCAL = 2 };
mdsm_status mdsm_queue_create(int order, int manager, mdsm_queue** queue);
mdsm_status mdsm_queue_push(mdsm_queue* queue, const void* item, size_t len);
/* Copies the next item into buf (capacity cap) and sets *len; *got = 0 once terminated.
 * MDSM_ERR_INVALID_ARGUMENT if the item does not fit (it stays first in line for this rank). */
mdsm_status mdsm_queue_pop(mdsm_queue* queue, void* buf, size_t cap, size_t* len, int* got);
mdsm_status mdsm_queue_destroy(mdsm_queue* queue);

/* ---- coordination objects created by one rank: handles ---------------------------------------
 * The same primitives, created by ONE rank (no collective step, no message; the creating rank is
 * the manager) as a plain value: keep it in coherent memory (a lock inside a shared struct, one per
 * tree cell) or send it; every rank may use it. Any rank may destroy it once no rank uses it
 * (MDSM_ERR_BUSY while held or waited on; it then stays usable). A zero-filled handle is null;
 * a null handle, or one used after destroy, gives MDSM_ERR_INVALID_HANDLE. See mdsm::mutex_handle
 * and the others in mdsm.hpp. */

typedef struct mdsm_mutex_handle {
  uint64_t id;
} mdsm_mutex_handle;
mdsm_status mdsm_mutex_handle_create(mdsm_mutex_handle* mutex);
mdsm_status mdsm_mutex_handle_lock(mdsm_mutex_handle mutex);
mdsm_status mdsm_mutex_handle_trylock(mdsm_mutex_handle mutex, int* acquired);
mdsm_status mdsm_mutex_handle_unlock(mdsm_mutex_handle mutex);
mdsm_status mdsm_mutex_handle_destroy(mdsm_mutex_handle mutex);

typedef struct mdsm_semaphore_handle {
  uint64_t id;
} mdsm_semaphore_handle;
mdsm_status mdsm_semaphore_handle_create(long initial, mdsm_semaphore_handle* sem);
mdsm_status mdsm_semaphore_handle_acquire(mdsm_semaphore_handle sem);
mdsm_status mdsm_semaphore_handle_tryacquire(mdsm_semaphore_handle sem, int* acquired);
mdsm_status mdsm_semaphore_handle_release(mdsm_semaphore_handle sem, long n);
mdsm_status mdsm_semaphore_handle_destroy(mdsm_semaphore_handle sem);

typedef struct mdsm_cond_handle {
  uint64_t id;
} mdsm_cond_handle;
mdsm_status mdsm_cond_handle_create(mdsm_cond_handle* cond);
mdsm_status mdsm_cond_handle_wait(mdsm_cond_handle cond, mdsm_mutex_handle mutex);
mdsm_status mdsm_cond_handle_signal(mdsm_cond_handle cond);
mdsm_status mdsm_cond_handle_broadcast(mdsm_cond_handle cond);
mdsm_status mdsm_cond_handle_destroy(mdsm_cond_handle cond);

typedef struct mdsm_barrier_handle {
  uint64_t id;
} mdsm_barrier_handle;
/* Every `participants` arrivals (from any ranks) make one episode, as pthread_barrier_init. */
mdsm_status mdsm_barrier_handle_create(int participants, mdsm_barrier_handle* barrier);
mdsm_status mdsm_barrier_handle_wait(mdsm_barrier_handle barrier);
mdsm_status mdsm_barrier_handle_destroy(mdsm_barrier_handle barrier);

/* ---- statistics ----------------------------------------------------------------------------- */

size_t mdsm_stat_count(void);
const char* mdsm_stat_name(size_t index); /* NULL past the end */
mdsm_status mdsm_stat(const char* name, uint64_t* value);
mdsm_status mdsm_stats_reset(void);
/* Nonzero turns the time counters (the *_ns ones) on; see mdsm::set_statistics_timing. */
mdsm_status mdsm_set_stats_timing(int on);

#ifdef __cplusplus
}
#endif
#endif
