// The C API of the coordination primitives: opaque handles owning the C++ objects.
#include "api/c_guard.hpp"
#include "sync/services.hpp"

#include <bit>
#include <cstring>
#include <vector>

struct mdsm_mutex {
  mdsm::mutex m;
  explicit mdsm_mutex(int manager) : m(manager) {}
};
struct mdsm_semaphore {
  mdsm::semaphore s;
  mdsm_semaphore(long initial, int manager) : s(initial, manager) {}
};
struct mdsm_cond {
  mdsm::condition_variable c;
  explicit mdsm_cond(int manager) : c(manager) {}
};
struct mdsm_barrier {
  mdsm::barrier b;
  mdsm_barrier() = default;
  explicit mdsm_barrier(std::span<const int> p) : b(p) {}
};
struct mdsm_queue {
  mdsm::work_queue q;
  mdsm_queue(mdsm::work_queue::order o, int manager) : q(o, manager) {}
};

using mdsm::capi::guarded;
using mdsm::capi::null_arg;

// A C handle is the C++ handle's bytes (one id).
static_assert(sizeof(mdsm_mutex_handle) == sizeof(mdsm::mutex_handle));
static_assert(sizeof(mdsm_semaphore_handle) == sizeof(mdsm::semaphore_handle));
static_assert(sizeof(mdsm_cond_handle) == sizeof(mdsm::condition_handle));
static_assert(sizeof(mdsm_barrier_handle) == sizeof(mdsm::barrier_handle));
namespace {
mdsm::mutex_handle cpp(mdsm_mutex_handle h) { return std::bit_cast<mdsm::mutex_handle>(h); }
mdsm::semaphore_handle cpp(mdsm_semaphore_handle h) { return std::bit_cast<mdsm::semaphore_handle>(h); }
mdsm::condition_handle cpp(mdsm_cond_handle h) { return std::bit_cast<mdsm::condition_handle>(h); }
mdsm::barrier_handle cpp(mdsm_barrier_handle h) { return std::bit_cast<mdsm::barrier_handle>(h); }
}  // namespace

extern "C" {

mdsm_status mdsm_mutex_create(int manager, mdsm_mutex** mutex) {
  if (mutex == nullptr) return null_arg("mutex");
  return guarded([&] { *mutex = new mdsm_mutex(manager); });
}
mdsm_status mdsm_mutex_lock(mdsm_mutex* mutex) {
  if (mutex == nullptr) return null_arg("mutex");
  return guarded([&] { mutex->m.lock(); });
}
mdsm_status mdsm_mutex_trylock(mdsm_mutex* mutex, int* acquired) {
  if (mutex == nullptr) return null_arg("mutex");
  if (acquired == nullptr) return null_arg("acquired");
  return guarded([&] { *acquired = mutex->m.try_lock() ? 1 : 0; });
}
mdsm_status mdsm_mutex_unlock(mdsm_mutex* mutex) {
  if (mutex == nullptr) return null_arg("mutex");
  return guarded([&] { mutex->m.unlock(); });
}
mdsm_status mdsm_mutex_destroy(mdsm_mutex* mutex) {
  if (mutex == nullptr) return null_arg("mutex");
  return guarded([&] { delete mutex; });
}

mdsm_status mdsm_semaphore_create(long initial, int manager, mdsm_semaphore** sem) {
  if (sem == nullptr) return null_arg("sem");
  return guarded([&] { *sem = new mdsm_semaphore(initial, manager); });
}
mdsm_status mdsm_semaphore_acquire(mdsm_semaphore* sem) {
  if (sem == nullptr) return null_arg("sem");
  return guarded([&] { sem->s.acquire(); });
}
mdsm_status mdsm_semaphore_tryacquire(mdsm_semaphore* sem, int* acquired) {
  if (sem == nullptr) return null_arg("sem");
  if (acquired == nullptr) return null_arg("acquired");
  return guarded([&] { *acquired = sem->s.try_acquire() ? 1 : 0; });
}
mdsm_status mdsm_semaphore_release(mdsm_semaphore* sem, long n) {
  if (sem == nullptr) return null_arg("sem");
  return guarded([&] { sem->s.release(n); });
}
mdsm_status mdsm_semaphore_destroy(mdsm_semaphore* sem) {
  if (sem == nullptr) return null_arg("sem");
  return guarded([&] { delete sem; });
}

mdsm_status mdsm_cond_create(int manager, mdsm_cond** cond) {
  if (cond == nullptr) return null_arg("cond");
  return guarded([&] { *cond = new mdsm_cond(manager); });
}
mdsm_status mdsm_cond_wait(mdsm_cond* cond, mdsm_mutex* mutex) {
  if (cond == nullptr) return null_arg("cond");
  if (mutex == nullptr) return null_arg("mutex");
  return guarded([&] { cond->c.wait(mutex->m); });
}
mdsm_status mdsm_cond_signal(mdsm_cond* cond) {
  if (cond == nullptr) return null_arg("cond");
  return guarded([&] { cond->c.notify_one(); });
}
mdsm_status mdsm_cond_broadcast(mdsm_cond* cond) {
  if (cond == nullptr) return null_arg("cond");
  return guarded([&] { cond->c.notify_all(); });
}
mdsm_status mdsm_cond_destroy(mdsm_cond* cond) {
  if (cond == nullptr) return null_arg("cond");
  return guarded([&] { delete cond; });
}

mdsm_status mdsm_barrier_create(const int* participants, int count, mdsm_barrier** barrier) {
  if (barrier == nullptr) return null_arg("barrier");
  if (participants == nullptr && count != 0) return null_arg("participants (with a nonzero count)");
  if (count < 0) return guarded([] { throw mdsm::error(MDSM_ERR_INVALID_ARGUMENT, "mdsm: barrier count is negative"); });
  return guarded([&] {
    *barrier = participants == nullptr
                   ? new mdsm_barrier()
                   : new mdsm_barrier(std::span<const int>(participants, static_cast<std::size_t>(count)));
  });
}
mdsm_status mdsm_barrier_wait(mdsm_barrier* barrier) {
  if (barrier == nullptr) return null_arg("barrier");
  return guarded([&] { barrier->b.arrive_and_wait(); });
}
mdsm_status mdsm_barrier_destroy(mdsm_barrier* barrier) {
  if (barrier == nullptr) return null_arg("barrier");
  return guarded([&] { delete barrier; });
}

mdsm_status mdsm_queue_create(int order, int manager, mdsm_queue** queue) {
  if (queue == nullptr) return null_arg("queue");
  if (order < MDSM_QUEUE_FIFO || order > MDSM_QUEUE_LIFO_LOCAL)
    return guarded([&] {
      throw mdsm::error(MDSM_ERR_INVALID_ARGUMENT, "mdsm_queue_create: order " + std::to_string(order) +
                                                       " is not MDSM_QUEUE_FIFO, MDSM_QUEUE_LIFO or MDSM_QUEUE_LIFO_LOCAL");
    });
  return guarded([&] { *queue = new mdsm_queue(static_cast<mdsm::work_queue::order>(order), manager); });
}
mdsm_status mdsm_queue_push(mdsm_queue* queue, const void* item, size_t len) {
  if (queue == nullptr) return null_arg("queue");
  if (item == nullptr && len != 0) return null_arg("item (with a nonzero length)");
  return guarded([&] { queue->q.push(std::span<const std::byte>(static_cast<const std::byte*>(item), len)); });
}
mdsm_status mdsm_queue_pop(mdsm_queue* queue, void* buf, size_t cap, size_t* len, int* got) {
  if (queue == nullptr) return null_arg("queue");
  if (len == nullptr) return null_arg("len");
  if (got == nullptr) return null_arg("got");
  if (buf == nullptr && cap != 0) return null_arg("buf (with a nonzero capacity)");
  return guarded([&] {
    auto item = queue->q.pop();
    *got = item ? 1 : 0;
    *len = item ? item->size() : 0;
    if (!item) return;
    if (item->size() > cap) {
      const std::size_t n = item->size();
      mdsm::sync::queue_keep(queue->q.id(), std::move(*item));
      throw mdsm::error(MDSM_ERR_INVALID_ARGUMENT,
                        "mdsm: mdsm_queue_pop: the item has " + std::to_string(n) + " bytes, the buffer " +
                            std::to_string(cap) + "; it stays first in line for this rank (see *len)");
    }
    if (!item->empty()) std::memcpy(buf, item->data(), item->size());
  });
}
mdsm_status mdsm_queue_destroy(mdsm_queue* queue) {
  if (queue == nullptr) return null_arg("queue");
  return guarded([&] { delete queue; });
}

mdsm_status mdsm_mutex_handle_create(mdsm_mutex_handle* mutex) {
  if (mutex == nullptr) return null_arg("mutex");
  return guarded([&] { *mutex = std::bit_cast<mdsm_mutex_handle>(mdsm::mutex_handle::create()); });
}
mdsm_status mdsm_mutex_handle_lock(mdsm_mutex_handle mutex) {
  return guarded([&] { cpp(mutex).lock(); });
}
mdsm_status mdsm_mutex_handle_trylock(mdsm_mutex_handle mutex, int* acquired) {
  if (acquired == nullptr) return null_arg("acquired");
  return guarded([&] { *acquired = cpp(mutex).try_lock() ? 1 : 0; });
}
mdsm_status mdsm_mutex_handle_unlock(mdsm_mutex_handle mutex) {
  return guarded([&] { cpp(mutex).unlock(); });
}
mdsm_status mdsm_mutex_handle_destroy(mdsm_mutex_handle mutex) {
  return guarded([&] { cpp(mutex).destroy(); });
}

mdsm_status mdsm_semaphore_handle_create(long initial, mdsm_semaphore_handle* sem) {
  if (sem == nullptr) return null_arg("sem");
  return guarded([&] { *sem = std::bit_cast<mdsm_semaphore_handle>(mdsm::semaphore_handle::create(initial)); });
}
mdsm_status mdsm_semaphore_handle_acquire(mdsm_semaphore_handle sem) {
  return guarded([&] { cpp(sem).acquire(); });
}
mdsm_status mdsm_semaphore_handle_tryacquire(mdsm_semaphore_handle sem, int* acquired) {
  if (acquired == nullptr) return null_arg("acquired");
  return guarded([&] { *acquired = cpp(sem).try_acquire() ? 1 : 0; });
}
mdsm_status mdsm_semaphore_handle_release(mdsm_semaphore_handle sem, long n) {
  return guarded([&] { cpp(sem).release(n); });
}
mdsm_status mdsm_semaphore_handle_destroy(mdsm_semaphore_handle sem) {
  return guarded([&] { cpp(sem).destroy(); });
}

mdsm_status mdsm_cond_handle_create(mdsm_cond_handle* cond) {
  if (cond == nullptr) return null_arg("cond");
  return guarded([&] { *cond = std::bit_cast<mdsm_cond_handle>(mdsm::condition_handle::create()); });
}
mdsm_status mdsm_cond_handle_wait(mdsm_cond_handle cond, mdsm_mutex_handle mutex) {
  return guarded([&] { cpp(cond).wait(cpp(mutex)); });
}
mdsm_status mdsm_cond_handle_signal(mdsm_cond_handle cond) {
  return guarded([&] { cpp(cond).notify_one(); });
}
mdsm_status mdsm_cond_handle_broadcast(mdsm_cond_handle cond) {
  return guarded([&] { cpp(cond).notify_all(); });
}
mdsm_status mdsm_cond_handle_destroy(mdsm_cond_handle cond) {
  return guarded([&] { cpp(cond).destroy(); });
}

mdsm_status mdsm_barrier_handle_create(int participants, mdsm_barrier_handle* barrier) {
  if (barrier == nullptr) return null_arg("barrier");
  return guarded([&] { *barrier = std::bit_cast<mdsm_barrier_handle>(mdsm::barrier_handle::create(participants)); });
}
mdsm_status mdsm_barrier_handle_wait(mdsm_barrier_handle barrier) {
  return guarded([&] { cpp(barrier).arrive_and_wait(); });
}
mdsm_status mdsm_barrier_handle_destroy(mdsm_barrier_handle barrier) {
  return guarded([&] { cpp(barrier).destroy(); });
}

}  // extern "C"
