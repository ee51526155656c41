// The run-time side of the PARMACS macros (include/mdsm/parmacs.h, include/mdsm/parmacs.m4).
//
// Processes. Rank 0 is the main process. Every other rank, inside MAIN_INITENV, waits for one of
// two messages from rank 0:
//   create  RELEASE   {code_location of the function, a program_image snapshot of rank 0's
//                     globals}; the handler stores it, the rank's application thread accepts it
//                     (it then sees rank 0's shared writes), writes the globals, runs the function
//                     and answers with
//   done    RELEASE   to rank 0, whose handler stores it; WAIT_FOR_END accepts it (so rank 0 sees
//                     the process's writes) and the rank is idle again (a later CREATE may reuse it);
//   end     NONE      sent by rank 0 once its main ends (MAIN_END, exit, return from main): the
//                     rank finalizes mdsm and exits with status 0.
// Rank 0's end also runs from an on_exit handler, so a return from main or exit(0) without
// MAIN_END ends the job cleanly too, and a CREATEd process that calls exit(0) reports done and
// waits for the end; exit with another status ends the job with it (MPI_Abort).
//
// Threads: the handlers (progress thread or a waiting application thread) touch only the inbox
// (creates, dones, end_seen) under `inbox_mu`; everything else belongs to the application thread
// that calls the macros (after exit(): to the thread at_exit starts, while the exiting one waits).
#include "api/program_image.hpp"

#include <mdsm/mdsm.hpp>
#include <mdsm/parmacs.h>

#include <dlfcn.h>
#include <mpi.h>
#include <sys/time.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

enum class state { none, main_running, worker_idle, worker_running, ended };

struct create_header {
  std::uint64_t offset;  // of the function in its object
  std::uint32_t name_len;
  std::uint32_t pad;
};

struct runtime {
  int rank = 0, size = 1;
  state st = state::none;
  bool owns_mpi = false;
  mdsm::api::program_image image;
  mdsm::handler_id create_h = 0, done_h = 0, end_h = 0;
  std::vector<bool> busy;  // rank 0: ranks running a CREATEd process not yet waited for
  long outstanding = 0;    // rank 0: how many

  std::mutex inbox_mu;  // guards the three below (handlers and the application thread)
  std::deque<mdsm::stored_message> creates, dones;
  bool end_seen = false;
};
runtime* g_pm = nullptr;
bool g_aborting = false;

std::string where(const char* text, const char* file, int line) {
  std::string s = text != nullptr ? text : "";
  if (file != nullptr) s += std::string(" at ") + file + ":" + std::to_string(line);
  return s;
}

// PARMACS macros return nothing: say what went wrong, where, and end the whole job.
[[noreturn]] void fail(const std::string& what, const std::string& why) {
  const int pid = g_pm != nullptr ? g_pm->rank : -1;
  if (pid >= 0)
    std::fprintf(stderr, "mdsm (PARMACS macros): process %d: %s: %s\n", pid, what.c_str(), why.c_str());
  else
    std::fprintf(stderr, "mdsm (PARMACS macros): %s: %s\n", what.c_str(), why.c_str());
  std::fflush(stderr);
  g_aborting = true;
  int up = 0, down = 0;
  MPI_Initialized(&up);
  MPI_Finalized(&down);
  if (up && !down) MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

runtime& rt(const std::string& what) {
  if (g_pm == nullptr || g_pm->st == state::none) fail(what, "called before MAIN_INITENV");
  if (g_pm->st == state::ended) fail(what, "called after MAIN_END");
  return *g_pm;
}

template <class F>
void guarded(const std::string& what, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    fail(what, e.what());
  }
}

void on_create(mdsm::message& m) {
  mdsm::stored_message s = m.store();
  std::lock_guard lk(g_pm->inbox_mu);
  g_pm->creates.push_back(std::move(s));
}

void on_done(mdsm::message& m) {
  mdsm::stored_message s = m.store();
  std::lock_guard lk(g_pm->inbox_mu);
  g_pm->dones.push_back(std::move(s));
}

void on_end(mdsm::message&) {
  std::lock_guard lk(g_pm->inbox_mu);
  g_pm->end_seen = true;
}

// Waits of a whole phase of the program -- a rank parked until rank 0 CREATEs on it or ends, rank 0
// in WAIT_FOR_END behind the longest process -- are not waits for an answer that is due. They wait
// as any other for 2 ms (a CREATE right after the last one is taken at once), then nap and poll
// (naps growing to 1 ms): a rank parked for the whole program neither spins a core nor meets the
// failure detector's deadline (MDSM_WAIT_DEADLINE_S), which only wait_until applies. Messages are
// delivered meanwhile by the progress thread, or by the poll when there is none. The waits inside
// the processes (locks, barriers, pages) keep the deadline.
template <class Pred>
void wait_phase(Pred&& done) {
  const auto spin_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2);
  mdsm::wait_until([&] { return done() || std::chrono::steady_clock::now() >= spin_until; });
  auto nap = std::chrono::microseconds(50);
  while (!done()) {
    std::this_thread::sleep_for(nap);
    mdsm::poll();
    nap = std::min(nap * 2, std::chrono::microseconds(1000));
  }
}

bool has_done(runtime& r) {
  std::lock_guard lk(r.inbox_mu);
  return !r.dones.empty();
}

bool has_create_or_end(runtime& r) {
  std::lock_guard lk(r.inbox_mu);
  return !r.creates.empty() || r.end_seen;
}

// A CREATEd process has returned (or called exit): rank 0 hears of it.
void report_done(runtime& r) {
  mdsm::send(0, r.done_h, {}, mdsm::annotation::release);
  r.st = state::worker_idle;
}

// The end of mdsm on this rank (collective), then of MPI if MAIN_INITENV started it. MPI is ended
// apart because the standard wants MPI_Finalize on the thread that initialized MPI.
void finish_mdsm(runtime& r) {
  r.st = state::ended;
  mdsm::finalize();
}

void finish_mpi(runtime& r) {
  if (!r.owns_mpi) return;
  int down = 0;
  MPI_Finalized(&down);
  if (!down) MPI_Finalize();
}

void finish(runtime& r) {
  finish_mdsm(r);
  finish_mpi(r);
}

// Rank 0's end: the processes still running finish, every rank is told to end, all finalize.
void end_main(runtime& r, const std::string& what) {
  guarded(what, [&] {
    while (r.outstanding > 0) {
      wait_phase([&] { return has_done(r); });
      mdsm::stored_message s;
      {
        std::lock_guard lk(r.inbox_mu);
        s = std::move(r.dones.front());
        r.dones.pop_front();
      }
      s.accept();
      r.busy[static_cast<std::size_t>(s.origin())] = false;
      --r.outstanding;
    }
    for (int k = 1; k < r.size; ++k) mdsm::send(k, r.end_h, {}, mdsm::annotation::none);
    finish_mdsm(r);
  });
}

// A worker's life inside MAIN_INITENV: run what rank 0 CREATEs until it says to end.
[[noreturn]] void worker_loop(runtime& r) {
  const std::string what = "running a CREATEd process";
  guarded(what, [&] {
    for (;;) {
      r.st = state::worker_idle;
      wait_phase([&] { return has_create_or_end(r); });
      mdsm::stored_message s;
      {
        std::lock_guard lk(r.inbox_mu);
        if (r.creates.empty()) break;  // the end
        s = std::move(r.creates.front());
        r.creates.pop_front();
      }
      s.accept();  // now rank 0's shared writes before its CREATE are visible here
      const auto p = s.payload();
      create_header h{};
      if (p.size() < sizeof h) fail(what, "a malformed CREATE message");
      std::memcpy(&h, p.data(), sizeof h);
      if (p.size() < sizeof h + h.name_len) fail(what, "a malformed CREATE message");
      const mdsm::api::code_location loc{
          std::string(reinterpret_cast<const char*>(p.data() + sizeof h), h.name_len), h.offset};
      r.image.apply(p.subspan(sizeof h + h.name_len));
      void* code = mdsm::api::resolve_code(loc);
      if (code == nullptr)
        fail(what, "the CREATEd function is not in '" + (loc.object.empty() ? std::string("the program") : loc.object) +
                       "' here (do all ranks run the same program?)");
      r.st = state::worker_running;
      reinterpret_cast<void (*)(void)>(code)();
      report_done(r);
    }
    finish(r);
  });
  std::exit(0);
}

// exit() (or a return from main) on a rank whose program is still running. exit() has already
// destroyed the calling thread's thread_local objects, mdsm's among them, before it runs this, so
// the mdsm part of the end runs on a fresh thread. A nonzero status ends the job at once with that
// status (MPI_Abort): the other processes may be waiting for this one.
void at_exit(int status, void*) {
  if (g_pm == nullptr || g_aborting) return;
  runtime& r = *g_pm;
  if (r.st != state::main_running && r.st != state::worker_running) return;
  const bool main_process = r.st == state::main_running;
  if (status != 0) {
    std::fprintf(stderr, "mdsm (PARMACS macros): process %d: exit(%d) %s; ending every process\n", r.rank, status,
                 main_process ? "in the main process" : "in a CREATEd process");
    std::fflush(stderr);
    g_aborting = true;
    MPI_Abort(MPI_COMM_WORLD, status);
    std::_Exit(status);
  }
  std::thread([&] {
    if (main_process) {
      end_main(r, "the main process's end (exit or return from main)");
      return;
    }
    // A CREATEd process called exit(0): as if its function had returned; then wait for the end.
    const std::string what = "exit() in a CREATEd process";
    guarded(what, [&] {
      report_done(r);
      wait_phase([&] { return has_create_or_end(r); });
      {
        std::lock_guard lk(r.inbox_mu);
        if (!r.creates.empty())
          fail(what, "rank 0 CREATEd another process on this rank, but its previous process called exit(); return "
                     "from the function instead");
      }
      finish_mdsm(r);
    });
  }).join();
  finish_mpi(r);
}

// The region size for MAIN_INITENV(, bytes): rank 0 must be able to allocate `bytes`. Its
// allocations grow into the pool, three quarters of the region (region_map.hpp), whatever the
// number of ranks.
std::size_t region_for(std::size_t bytes) {
  constexpr std::size_t k_default = std::size_t{1} << 30, k_slack = std::size_t{16} << 20;
  if (bytes == 0) return 0;
  const std::size_t need = (bytes + bytes / 8 + k_slack) / 3 * 4;
  const std::size_t mib = std::size_t{1} << 20;
  return std::max(k_default, (need + mib - 1) / mib * mib);
}

mdsm::mutex_handle cpp(mdsm_mutex_handle h) { return std::bit_cast<mdsm::mutex_handle>(h); }
mdsm::barrier_handle cpp(mdsm_barrier_handle h) { return std::bit_cast<mdsm::barrier_handle>(h); }
mdsm::condition_handle cpp(mdsm_cond_handle h) { return std::bit_cast<mdsm::condition_handle>(h); }

void lock_checked(mdsm_mutex_handle l, const std::string& what, const char* name) {
  if (l.id == 0)
    fail(what, std::string("the ") + name +
                   " was never initialized (or this process cannot see its initialization: it was made after this "
                   "process was CREATEd, with no synchronization in between)");
  guarded(what, [&] { cpp(l).lock(); });
}

void unlock_checked(mdsm_mutex_handle l, const std::string& what, const char* name) {
  if (l.id == 0) fail(what, std::string("the ") + name + " was never initialized");
  guarded(what, [&] { cpp(l).unlock(); });
}

void check_index(long i, std::size_t capacity, const std::string& what) {
  if (i < 0 || static_cast<std::size_t>(i) >= capacity)
    fail(what, "lock " + std::to_string(i) + " is outside the array (ALOCKDEC declared " + std::to_string(capacity) +
                   ")");
}

}  // namespace

namespace {
// Outside extern "C": it returns a C++ type.
mdsm::mutex_handle pause_mutex(const mdsm_parmacs_pause* p, const std::string& what) {
  if (p->mutex.id == 0) fail(what, "the pause flag was never initialized (PAUSEINIT)");
  return cpp(p->mutex);
}
}  // namespace

extern "C" {

void mdsm_parmacs_init(size_t shared_bytes, const char* text, const char* file, int line) {
  const std::string what = where(text, file, line);
  if (g_pm != nullptr) fail(what, "MAIN_INITENV ran twice");
  static int in_library = 0;  // a variable of libmdsm: inside the program means static linking
  if (mdsm::api::in_main_executable(&in_library))
    fail(what, "mdsm is linked statically into the program; the PARMACS macros copy the main process's globals "
               "to the processes it CREATEs and need mdsm, MPI and the C library as shared libraries");
  // Likewise a sanitizer runtime linked into the program (clang's default for -fsanitize): its
  // state is among the globals CREATE copies from rank 0, and the copy breaks it.
  for (const char* init : {"__asan_init", "__tsan_init", "__msan_init", "__hwasan_init"})
    if (const void* p = dlsym(RTLD_DEFAULT, init); p != nullptr && mdsm::api::in_main_executable(p))
      fail(what, std::string("a sanitizer runtime (") + init +
                     ") is linked into the program; the PARMACS macros copy the main process's globals to the "
                     "processes it CREATEs, which would overwrite the runtime's own state. Build without the "
                     "sanitizer, or with one whose runtime is a shared library (gcc's -fsanitize, or clang's "
                     "-shared-libsan)");
  auto* r = new runtime;
  g_pm = r;
  guarded(what, [&] {
    int up = 0;
    MPI_Initialized(&up);
    if (!up) {
      int provided = 0;
      if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
        fail(what, "MPI_Init_thread failed");
      r->owns_mpi = true;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &r->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &r->size);
    r->image = mdsm::api::program_image::of_this_process();
    mdsm::options opts;
    opts.coherent_size = region_for(shared_bytes);
    mdsm::init(MPI_COMM_WORLD, opts);
    r->create_h = mdsm::register_handler("mdsm.parmacs.create", on_create);
    r->done_h = mdsm::register_handler("mdsm.parmacs.done", on_done);
    r->end_h = mdsm::register_handler("mdsm.parmacs.end", on_end);
    r->busy.assign(static_cast<std::size_t>(r->size), false);
  });
  on_exit(at_exit, nullptr);  // glibc: the handler learns the exit status
  if (r->rank != 0) worker_loop(*r);
  r->st = state::main_running;
}

void mdsm_parmacs_end(const char* text, const char* file, int line) {
  const std::string what = where(text, file, line);
  runtime& r = rt(what);
  if (r.st != state::main_running)
    fail(what, "MAIN_END in a CREATEd process; only the main process (rank 0) ends the program (a CREATEd "
               "process ends by returning from its function)");
  end_main(r, what);
  finish_mpi(r);
  std::exit(0);
}

void mdsm_parmacs_create(void (*fn)(void), const char* text, const char* file, int line) {
  const std::string what = where(text, file, line);
  runtime& r = rt(what);
  if (r.st != state::main_running)
    fail(what, "CREATE in a CREATEd process; only the main process (rank 0) creates processes");
  if (fn == nullptr) fail(what, "a null function");
  int k = 1;
  while (k < r.size && r.busy[static_cast<std::size_t>(k)]) ++k;
  if (k >= r.size)
    fail(what, "no rank left to run it: the job has " + std::to_string(r.size) + " rank" + (r.size == 1 ? "" : "s") +
                   " and " + std::to_string(r.outstanding) +
                   " CREATEd process(es) are running (not yet waited for with WAIT_FOR_END); every process is a "
                   "rank here: start the job with tools/mdsmrun -n " +
                   std::to_string(r.outstanding + 2) + " or more");
  const auto loc = mdsm::api::locate_code(reinterpret_cast<const void*>(fn));
  if (!loc) fail(what, "the function is not in the code of the program or of a library it loaded");
  guarded(what, [&] {
    const std::vector<std::byte> globals = r.image.snapshot();
    const create_header h{loc->offset, static_cast<std::uint32_t>(loc->object.size()), 0};
    std::vector<std::byte> payload(sizeof h + loc->object.size() + globals.size());
    std::memcpy(payload.data(), &h, sizeof h);
    std::memcpy(payload.data() + sizeof h, loc->object.data(), loc->object.size());
    std::memcpy(payload.data() + sizeof h + loc->object.size(), globals.data(), globals.size());
    mdsm::send(k, r.create_h, payload, mdsm::annotation::release);
  });
  r.busy[static_cast<std::size_t>(k)] = true;
  ++r.outstanding;
}

void mdsm_parmacs_wait_for_end(long n, const char* text, const char* file, int line) {
  const std::string what = where(text, file, line);
  runtime& r = rt(what);
  if (r.st != state::main_running) fail(what, "WAIT_FOR_END in a CREATEd process; only the main process waits");
  if (n < 0) fail(what, "a negative count");
  if (n > r.outstanding)
    fail(what, "waits for " + std::to_string(n) + " processes, but " + std::to_string(r.outstanding) +
                   " CREATEd process(es) are running; it would wait forever");
  guarded(what, [&] {
    for (long got = 0; got < n; ++got) {
      wait_phase([&] { return has_done(r); });
      mdsm::stored_message s;
      {
        std::lock_guard lk(r.inbox_mu);
        s = std::move(r.dones.front());
        r.dones.pop_front();
      }
      s.accept();  // the process's writes are visible here now
      r.busy[static_cast<std::size_t>(s.origin())] = false;
      --r.outstanding;
    }
  });
}

int mdsm_parmacs_pid(void) { return g_pm != nullptr ? g_pm->rank : 0; }

void* mdsm_parmacs_malloc(size_t bytes, const char* text, const char* file, int line) {
  const std::string what = where(text, file, line);
  rt(what);
  try {
    return mdsm::alloc(bytes == 0 ? 1 : bytes);
  } catch (const mdsm::error& e) {
    if (e.code() == MDSM_ERR_OUT_OF_MEMORY)
      fail(what, "no room for " + std::to_string(bytes) +
                     " bytes in this process's part of the shared region; give MAIN_INITENV the program's shared "
                     "memory size as its second argument, or set MDSM_COHERENT_SIZE larger (" +
                     e.what() + ")");
    fail(what, e.what());
  }
}

void mdsm_parmacs_free(void* p, const char* text, const char* file, int line) {
  const std::string what = where(text, file, line);
  rt(what);
  if (p == nullptr) return;
  guarded(what, [&] { mdsm::free(p); });
}

void mdsm_parmacs_lock_init(mdsm_mutex_handle* lock, const char* text, const char* file, int line) {
  const std::string what = where(text, file, line);
  rt(what);
  guarded(what, [&] { *lock = std::bit_cast<mdsm_mutex_handle>(mdsm::mutex_handle::create()); });
}

void mdsm_parmacs_lock(mdsm_mutex_handle lock, const char* text, const char* file, int line) {
  const std::string what = where(text, file, line);
  rt(what);
  lock_checked(lock, what, "lock");
}

void mdsm_parmacs_unlock(mdsm_mutex_handle lock, const char* text, const char* file, int line) {
  const std::string what = where(text, file, line);
  rt(what);
  unlock_checked(lock, what, "lock");
}

void mdsm_parmacs_alock_init(mdsm_mutex_handle* locks, long n, size_t capacity, const char* text, const char* file,
                             int line) {
  const std::string what = where(text, file, line);
  rt(what);
  if (n < 0 || static_cast<std::size_t>(n) > capacity)
    fail(what, "initializes " + std::to_string(n) + " locks, but ALOCKDEC declared " + std::to_string(capacity));
  guarded(what, [&] {
    for (long i = 0; i < n; ++i) locks[i] = std::bit_cast<mdsm_mutex_handle>(mdsm::mutex_handle::create());
  });
}

void mdsm_parmacs_alock(mdsm_mutex_handle* locks, long i, size_t capacity, const char* text, const char* file,
                        int line) {
  const std::string what = where(text, file, line);
  rt(what);
  check_index(i, capacity, what);
  lock_checked(locks[i], what, "lock (ALOCKINIT)");
}

void mdsm_parmacs_aulock(mdsm_mutex_handle* locks, long i, size_t capacity, const char* text, const char* file,
                         int line) {
  const std::string what = where(text, file, line);
  rt(what);
  check_index(i, capacity, what);
  unlock_checked(locks[i], what, "lock (ALOCKINIT)");
}

void mdsm_parmacs_barrier_init(mdsm_parmacs_barrier* b, long count, const char* text, const char* file, int line) {
  const std::string what = where(text, file, line);
  rt(what);
  if (count < 0) fail(what, "a negative count");
  if (count == 0 && !mdsm::is_coherent(b))
    fail(what, "a barrier without a count gets it from its first BARRIER, which every process must see: put it in "
               "G_MALLOC'd memory, or give the count: BARINIT(name, count)");
  guarded(what, [&] {
    b->init = std::bit_cast<mdsm_mutex_handle>(mdsm::mutex_handle::create());
    b->count = count;
    b->handle = count > 0 ? std::bit_cast<mdsm_barrier_handle>(mdsm::barrier_handle::create(static_cast<int>(count)))
                          : mdsm_barrier_handle{0};
  });
}

void mdsm_parmacs_barrier_wait(mdsm_parmacs_barrier* b, long count, const char* text, const char* file, int line) {
  const std::string what = where(text, file, line);
  rt(what);
  if (count <= 0) fail(what, "a count below 1");
  if (b->handle.id == 0) {
    // The count comes from the first BARRIER: the first process to get here makes the barrier.
    if (b->init.id == 0) fail(what, "the barrier was never initialized (BARINIT)");
    guarded(what, [&] {
      const mdsm::mutex_handle init = cpp(b->init);
      std::lock_guard lk(init);
      if (b->handle.id == 0) {
        b->handle = std::bit_cast<mdsm_barrier_handle>(mdsm::barrier_handle::create(static_cast<int>(count)));
        b->count = count;
      }
    });
  }
  if (b->count != count)
    fail(what, "a barrier for " + std::to_string(b->count) + " processes (its BARINIT or first BARRIER) used with " +
                   std::to_string(count));
  guarded(what, [&] { cpp(b->handle).arrive_and_wait(); });
}

void mdsm_parmacs_pause_init(mdsm_parmacs_pause* p, const char* text, const char* file, int line) {
  const std::string what = where(text, file, line);
  rt(what);
  if (!mdsm::is_coherent(p))
    fail(what, "a pause flag must be in shared memory (inside G_MALLOC'd memory) so that every process sees it");
  guarded(what, [&] {
    p->mutex = std::bit_cast<mdsm_mutex_handle>(mdsm::mutex_handle::create());
    p->set = std::bit_cast<mdsm_cond_handle>(mdsm::condition_handle::create());
    p->flag = 0;
  });
}

void mdsm_parmacs_pause_set(mdsm_parmacs_pause* p, const char* text, const char* file, int line) {
  const std::string what = where(text, file, line);
  rt(what);
  const mdsm::mutex_handle m = pause_mutex(p, what);
  guarded(what, [&] {
    std::lock_guard lk(m);
    p->flag = 1;
    cpp(p->set).notify_all();
  });
}

void mdsm_parmacs_pause_clear(mdsm_parmacs_pause* p, const char* text, const char* file, int line) {
  const std::string what = where(text, file, line);
  rt(what);
  const mdsm::mutex_handle m = pause_mutex(p, what);
  guarded(what, [&] {
    std::lock_guard lk(m);
    p->flag = 0;
  });
}

void mdsm_parmacs_pause_wait(mdsm_parmacs_pause* p, const char* text, const char* file, int line) {
  const std::string what = where(text, file, line);
  rt(what);
  const mdsm::mutex_handle m = pause_mutex(p, what);
  guarded(what, [&] {
    std::lock_guard lk(m);
    while (p->flag == 0) cpp(p->set).wait(m);
  });
}

unsigned long mdsm_parmacs_clock(void) {
  timeval t{};
  gettimeofday(&t, nullptr);
  return static_cast<unsigned long>(t.tv_sec) * 1000000ul + static_cast<unsigned long>(t.tv_usec);
}

}  // extern "C"
