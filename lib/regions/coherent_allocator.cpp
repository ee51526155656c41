#include "regions/coherent_allocator.hpp"

#include "common/check.hpp"
#include "regions/collective_check.hpp"

#include <cstring>

namespace mdsm::regions {

namespace {

struct free_request {
  std::uint64_t ticket;
  std::uintptr_t addr;
};
struct free_reply {
  std::uint64_t ticket;
  std::int32_t status;
  char why[200];
};

std::uintptr_t addr_of(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

}  // namespace

coherent_allocator::coherent_allocator(coherence::engine& e, messages::endpoint& ep)
    : engine_(e),
      endpoint_(ep),
      region_(e.region()),
      collective_(addr_of(region_.app_unit(0)), std::size_t{region_.collective_units()} * region_.unit()),
      own_(addr_of(region_.app_unit(region_.arena_begin(e.rank()))), std::size_t{region_.arena_units()} * region_.unit()),
      unit_users_(region_.units(), 0) {
  free_request_ = ep.register_handler("mdsm.regions.free", [this](message& m) {
    const auto req = m.as<free_request>();
    std::string why;
    free_reply reply{req.ticket, free_own(req.addr, why), {}};
    std::strncpy(reply.why, why.c_str(), sizeof reply.why - 1);
    endpoint_.send(m.origin(), free_reply_, std::as_bytes(std::span(&reply, 1)), annotation::none);
  });
  free_reply_ = ep.register_handler("mdsm.regions.free_reply", [this](message& m) {
    const auto reply = m.as<free_reply>();
    std::shared_ptr<pending_free> p;
    {
      std::lock_guard lk(pending_mutex_);
      auto it = pending_.find(reply.ticket);
      if (it == pending_.end()) return;
      p = it->second;
      pending_.erase(it);
    }
    p->status = static_cast<mdsm_status>(reply.status);
    p->why = reply.why;
    p->done.store(true, std::memory_order_release);
  });
}

std::size_t coherent_allocator::alignment_for(std::size_t bytes) const { return bytes >= region_.unit() ? region_.unit() : 16; }

void coherent_allocator::account(std::uintptr_t addr, std::size_t bytes, bool allocated) {
  const std::uint32_t first = region_.unit_of(reinterpret_cast<void*>(addr));
  const std::uint32_t last = region_.unit_of(reinterpret_cast<void*>(addr + bytes - 1));
  // Tell the engine about runs of units whose use count crosses zero.
  std::uint32_t run_start = 0, run_len = 0;
  auto flush = [&] {
    if (run_len == 0) return;
    if (allocated) engine_.units_allocated(run_start, run_len);
    else engine_.units_freed(run_start, run_len);
    run_len = 0;
  };
  for (std::uint32_t u = first; u <= last; ++u) {
    bool crossed;
    if (allocated) crossed = unit_users_[u]++ == 0;
    else crossed = --unit_users_[u] == 0;
    if (crossed) {
      if (run_len == 0) run_start = u;
      ++run_len;
    } else {
      flush();
    }
  }
  flush();
}

void* coherent_allocator::alloc(std::size_t bytes) {
  if (bytes == 0) detail::fail(MDSM_ERR_INVALID_ARGUMENT, "alloc: size 0");
  std::lock_guard lk(mutex_);
  const std::uintptr_t addr =
      own_.allocate_or_fail(bytes, alignment_for(bytes), detail::cat("alloc(", bytes, "): rank ", engine_.rank(), "'s arena"),
                            "set a larger MDSM_COHERENT_SIZE (each rank's arena is half the region divided by the ranks)");
  account(addr, bytes, true);
  return reinterpret_cast<void*>(addr);
}

void* coherent_allocator::alloc_collective(std::size_t bytes) {
  check_same_everywhere(endpoint_.transport(), endpoint_.progress(), bytes, "alloc_collective");
  if (bytes == 0) detail::fail(MDSM_ERR_INVALID_ARGUMENT, "alloc_collective: size 0");
  std::lock_guard lk(mutex_);
  const std::uintptr_t addr = collective_.allocate_or_fail(
      bytes, alignment_for(bytes), detail::cat("alloc_collective(", bytes, "): the collective arena"),
      "set a larger MDSM_COHERENT_SIZE");
  const std::uint32_t first = region_.unit_of(reinterpret_cast<void*>(addr));
  // The units this allocation brings into use get blocks of it as homes (engine::home_of).
  struct homes_scope {
    coherence::engine& e;
    ~homes_scope() { e.collective_allocation(0, 0); }
  } homes{engine_};
  engine_.collective_allocation(first, region_.unit_of(reinterpret_cast<void*>(addr + bytes - 1)) - first + 1);
  account(addr, bytes, true);
  return reinterpret_cast<void*>(addr);
}

mdsm_status coherent_allocator::free_own(std::uintptr_t addr, std::string& why) {
  std::lock_guard lk(mutex_);
  auto size = own_.release(addr);
  if (!size) {
    why = detail::cat("free: ", reinterpret_cast<void*>(addr), " is not the start of a live allocation of rank ",
                      engine_.rank(), " (already freed, or a pointer into the middle of an object)");
    return MDSM_ERR_INVALID_ARGUMENT;
  }
  account(addr, *size, false);
  return MDSM_SUCCESS;
}

void coherent_allocator::free(void* p) {
  if (p == nullptr) return;
  if (!region_.contains(p)) detail::fail(MDSM_ERR_NOT_IN_REGION, "free: ", p, " is not in the coherent region");
  const int owner = region_.arena_owner(region_.unit_of(p));
  if (owner < 0)
    detail::fail(MDSM_ERR_INVALID_ARGUMENT, "free: ", p,
                 " was allocated collectively; every rank must call free_collective on it");
  std::string why;
  if (owner == engine_.rank()) {
    if (mdsm_status s = free_own(addr_of(p), why); s != MDSM_SUCCESS) detail::fail(s, why);
    return;
  }
  // Another rank's allocation: its owner frees it and says whether that was valid.
  auto pending = std::make_shared<pending_free>();
  std::uint64_t ticket;
  {
    std::lock_guard lk(pending_mutex_);
    ticket = next_ticket_++;
    pending_.emplace(ticket, pending);
  }
  const free_request req{ticket, addr_of(p)};
  endpoint_.send(owner, free_request_, std::as_bytes(std::span(&req, 1)), annotation::request);
  endpoint_.progress().wait_until([&] { return pending->done.load(std::memory_order_acquire); });
  if (pending->status != MDSM_SUCCESS) throw error(pending->status, "mdsm: " + pending->why);
}

std::uint64_t coherent_allocator::collective_bytes() {
  std::lock_guard lk(mutex_);
  return collective_.capacity() - collective_.free_bytes();
}

void coherent_allocator::free_collective(void* p) {
  check_same_everywhere(endpoint_.transport(), endpoint_.progress(), addr_of(p), "free_collective");
  if (p == nullptr) return;
  if (!region_.contains(p)) detail::fail(MDSM_ERR_NOT_IN_REGION, "free_collective: ", p, " is not in the coherent region");
  if (region_.arena_owner(region_.unit_of(p)) >= 0)
    detail::fail(MDSM_ERR_INVALID_ARGUMENT, "free_collective: ", p, " was not allocated collectively; use free");
  std::lock_guard lk(mutex_);
  auto size = collective_.release(addr_of(p));
  if (!size)
    detail::fail(MDSM_ERR_INVALID_ARGUMENT, "free_collective: ", p,
                 " is not the start of a live collective allocation (already freed?)");
  account(addr_of(p), *size, false);
}

}  // namespace mdsm::regions
