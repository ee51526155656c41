// The TreadMarks interface (include/mdsm/tmk.h) over the C++ API: locks and barriers are mdsm
// objects created collectively at Tmk_startup, shared memory is mdsm::alloc, and Tmk_distribute is
// an active message that writes the variable on each receiver and answers once it has.
//
// Tmk_distribute and address-space layout randomization: TreadMarks ran non-PIE programs, so a
// global had one address in every process. Here each process may load the program and its
// libraries elsewhere, so the sender names the variable by its object (the dl_iterate_phdr name,
// "" for the program itself) and its offset from that object's load address, and the receiver
// adds its own load address of the same object. Every rank runs the same program (mpirun), so
// the objects and offsets agree; the receiver still checks that the bytes fall inside a loaded
// segment of that object before writing them.
#include <mdsm/mdsm.hpp>
#include <mdsm/tmk.h>

#include <link.h>
#include <mpi.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

unsigned Tmk_proc_id = 0;
unsigned Tmk_nprocs = 0;

namespace {

struct tmk_runtime {
  std::vector<std::unique_ptr<mdsm::mutex>> locks;
  std::vector<std::unique_ptr<mdsm::barrier>> barriers;
  mdsm::handler_id distribute = 0, answer = 0;
  std::mutex distributing;  // one Tmk_distribute of this process at a time
  std::atomic<unsigned> answers{0}, refusals{0};
  std::mutex refusal_mu;
  std::string refusal;  // the first receiving rank's reason (guarded by refusal_mu)
};
tmk_runtime* g_tmk = nullptr;

// TreadMarks calls return nothing: say what went wrong and end the job (every rank, so none waits
// for this one forever).
[[noreturn]] void tmk_fail(const char* call, const std::string& why) {
  std::fprintf(stderr, "mdsm (TreadMarks interface): process %u: %s: %s\n", Tmk_proc_id, call, why.c_str());
  std::fflush(stderr);
  int up = 0;
  MPI_Initialized(&up);
  if (up) MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);
}

tmk_runtime& tmk(const char* call) {
  if (g_tmk == nullptr) tmk_fail(call, "called before Tmk_startup (or after Tmk_exit)");
  return *g_tmk;
}

// Lock or barrier `id` of `objects`; a number out of range ends the job, naming the limit.
template <class T>
T& numbered(std::vector<std::unique_ptr<T>>& objects, unsigned id, const char* call, const char* what,
            const char* limit) {
  if (id >= objects.size())
    tmk_fail(call, std::string(what) + " " + std::to_string(id) + " does not exist (" + limit + " is " +
                       std::to_string(objects.size()) + ")");
  return *objects[id];
}

template <class F>
void guarded(const char* call, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    tmk_fail(call, e.what());
  }
}

// Where a variable lives: its object's name and its offset from the object's load address.
struct location {
  std::string object;
  std::uint64_t offset = 0;
  bool found = false;
};

location locate(const void* p, std::size_t size) {
  struct search {
    std::uintptr_t from, to;
    location out;
  } s{reinterpret_cast<std::uintptr_t>(p), reinterpret_cast<std::uintptr_t>(p) + size, {}};
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* ctx) -> int {
        auto& s = *static_cast<search*>(ctx);
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD || (ph.p_flags & PF_W) == 0) continue;
          const std::uintptr_t lo = info->dlpi_addr + ph.p_vaddr, hi = lo + ph.p_memsz;
          if (s.from >= lo && s.to <= hi) {
            s.out = location{info->dlpi_name != nullptr ? info->dlpi_name : "", s.from - info->dlpi_addr, true};
            return 1;
          }
        }
        return 0;
      },
      &s);
  return s.out;
}

// The address of a variable named by `object` and `offset`, or nullptr if no writable segment of
// that object holds all `size` bytes.
void* resolve(const std::string& object, std::uint64_t offset, std::size_t size) {
  struct search {
    const std::string& object;
    std::uint64_t offset;
    std::size_t size;
    void* out;
  } s{object, offset, size, nullptr};
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* ctx) -> int {
        auto& s = *static_cast<search*>(ctx);
        if (s.object != (info->dlpi_name != nullptr ? info->dlpi_name : "")) return 0;
        const std::uintptr_t from = info->dlpi_addr + s.offset, to = from + s.size;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD || (ph.p_flags & PF_W) == 0) continue;
          const std::uintptr_t lo = info->dlpi_addr + ph.p_vaddr, hi = lo + ph.p_memsz;
          if (from >= lo && to <= hi && to >= from) {
            s.out = reinterpret_cast<void*>(from);
            return 1;
          }
        }
        return 1;  // the object, but not a segment holding the bytes
      },
      &s);
  return s.out;
}

// Tmk_distribute's message: this header, the object's name, then the bytes.
struct distribute_header {
  std::uint64_t offset;
  std::uint32_t size;
  std::uint32_t name_len;
};

void on_distribute(mdsm::message& m) {
  const auto p = m.payload();
  distribute_header h{};
  std::string why;
  if (p.size() < sizeof h) {
    why = "a malformed Tmk_distribute message";
  } else {
    std::memcpy(&h, p.data(), sizeof h);
    if (p.size() != sizeof h + std::size_t{h.name_len} + h.size) {
      why = "a malformed Tmk_distribute message";
    } else {
      const std::string object(reinterpret_cast<const char*>(p.data() + sizeof h), h.name_len);
      void* at = resolve(object, h.offset, h.size);
      if (at == nullptr) {
        why = "the variable is not in a writable segment of '" + (object.empty() ? std::string("the program") : object) +
              "' here (do all processes run the same program?)";
      } else {
        std::memcpy(at, p.data() + sizeof h + h.name_len, h.size);
      }
    }
  }
  // The answer: empty when the bytes are in place, else the reason.
  mdsm::send(m.origin(), g_tmk->answer, std::as_bytes(std::span(why.data(), why.size())), mdsm::annotation::none);
}

void on_answer(mdsm::message& m) {
  if (!m.payload().empty()) {
    std::lock_guard lk(g_tmk->refusal_mu);
    if (g_tmk->refusal.empty())
      g_tmk->refusal.assign(reinterpret_cast<const char*>(m.payload().data()), m.payload().size());
    g_tmk->refusals.fetch_add(1, std::memory_order_relaxed);
  }
  g_tmk->answers.fetch_add(1, std::memory_order_release);
}

}  // namespace

extern "C" {

void Tmk_startup(int argc, char** argv) {
  if (g_tmk != nullptr) tmk_fail("Tmk_startup", "called twice");
  guarded("Tmk_startup", [&] {
    mdsm::init(&argc, &argv);
    Tmk_proc_id = static_cast<unsigned>(mdsm::rank());
    Tmk_nprocs = static_cast<unsigned>(mdsm::size());
    auto t = std::make_unique<tmk_runtime>();
    g_tmk = t.get();  // the handlers below find it from now on
    t->distribute = mdsm::register_handler("mdsm.tmk.distribute", on_distribute);
    t->answer = mdsm::register_handler("mdsm.tmk.answer", on_answer);
    t->locks.reserve(TMK_NLOCKS);
    for (int i = 0; i < TMK_NLOCKS; ++i) t->locks.push_back(std::make_unique<mdsm::mutex>());
    t->barriers.reserve(TMK_NBARRIERS);
    for (int i = 0; i < TMK_NBARRIERS; ++i) t->barriers.push_back(std::make_unique<mdsm::barrier>());
    t.release();
  });
}

void Tmk_exit(int status) {
  tmk_runtime& t = tmk("Tmk_exit");
  guarded("Tmk_exit", [&] {
    // Every process's last writes reach the others' finalize; then the objects go (collective).
    t.barriers[0]->arrive_and_wait();
    t.locks.clear();
    t.barriers.clear();
    delete g_tmk;
    g_tmk = nullptr;
    mdsm::finalize();
  });
  std::exit(status);
}

void* Tmk_malloc(unsigned size) {
  tmk("Tmk_malloc");
  if (size == 0) return nullptr;
  try {
    return mdsm::alloc(size);
  } catch (const mdsm::error& e) {
    if (e.code() == MDSM_ERR_OUT_OF_MEMORY) return nullptr;
    tmk_fail("Tmk_malloc", e.what());
  }
}

void Tmk_free(void* ptr) {
  tmk("Tmk_free");
  guarded("Tmk_free", [&] { mdsm::free(ptr); });
}

void Tmk_distribute(void* ptr, unsigned size) {
  tmk_runtime& t = tmk("Tmk_distribute");
  if (size == 0) return;
  if (ptr == nullptr) tmk_fail("Tmk_distribute", "a null pointer");
  if (mdsm::is_coherent(ptr))
    tmk_fail("Tmk_distribute", "the address is in shared memory, which every process sees already; distribute the "
                               "private variable that holds a pointer to it");
  const location where = locate(ptr, size);
  if (!where.found)
    tmk_fail("Tmk_distribute", "the address is not inside a global or static variable of the program or of a "
                               "library it loaded (a stack or heap variable has no counterpart on other processes)");
  std::lock_guard one(t.distributing);
  guarded("Tmk_distribute", [&] {
    const distribute_header h{where.offset, size, static_cast<std::uint32_t>(where.object.size())};
    std::vector<std::byte> payload(sizeof h + where.object.size() + size);
    std::memcpy(payload.data(), &h, sizeof h);
    std::memcpy(payload.data() + sizeof h, where.object.data(), where.object.size());
    std::memcpy(payload.data() + sizeof h + where.object.size(), ptr, size);
    t.answers.store(0, std::memory_order_relaxed);
    t.refusals.store(0, std::memory_order_relaxed);
    const unsigned others = Tmk_nprocs - 1;
    for (unsigned r = 0; r < Tmk_nprocs; ++r)
      if (r != Tmk_proc_id) mdsm::send(static_cast<int>(r), t.distribute, payload, mdsm::annotation::none);
    mdsm::wait_until([&] { return t.answers.load(std::memory_order_acquire) == others; });
  });
  if (t.refusals.load(std::memory_order_relaxed) != 0) {
    std::lock_guard lk(t.refusal_mu);
    tmk_fail("Tmk_distribute", "a receiving process could not take it: " + t.refusal);
  }
}

void Tmk_barrier(unsigned id) {
  mdsm::barrier& b = numbered(tmk("Tmk_barrier").barriers, id, "Tmk_barrier", "barrier", "TMK_NBARRIERS");
  guarded("Tmk_barrier", [&] { b.arrive_and_wait(); });
}

void Tmk_lock_acquire(unsigned id) {
  mdsm::mutex& m = numbered(tmk("Tmk_lock_acquire").locks, id, "Tmk_lock_acquire", "lock", "TMK_NLOCKS");
  guarded("Tmk_lock_acquire", [&] { m.lock(); });
}

void Tmk_lock_release(unsigned id) {
  mdsm::mutex& m = numbered(tmk("Tmk_lock_release").locks, id, "Tmk_lock_release", "lock", "TMK_NLOCKS");
  guarded("Tmk_lock_release", [&] { m.unlock(); });
}

}  // extern "C"
