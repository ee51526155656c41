#include "regions/coherent_allocator.hpp"

#include "common/check.hpp"
#include "regions/collective_check.hpp"

#include <algorithm>
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
// Pool claims (rank r asks rank 0; rank 0 answers r and tells the others, who acknowledge to r).
struct claim_request {
  std::uint64_t ticket;
  std::uint64_t need;
  std::uint64_t want;
};
struct claim_reply {
  std::uint64_t ticket;
  std::uint64_t addr;  // 0: no room
  std::uint64_t bytes;
};
struct claim_notice {
  std::uint64_t ticket;
  std::uint64_t addr;
  std::uint64_t bytes;
  std::int32_t owner;
  std::int32_t pad;
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
  if (e.rank() == 0) pool_ = arena(0, region_.pool_units() / region_.chunk_units());
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

  auto claim_of = [this](std::uint64_t ticket) {
    std::lock_guard lk(pending_mutex_);
    auto it = claims_.find(ticket);
    return it == claims_.end() ? nullptr : it->second;
  };
  // Rank 0: grant, tell the other ranks, answer the claimer.
  claim_request_ = ep.register_handler("mdsm.regions.claim", [this](message& m) {
    const auto req = m.as<claim_request>();
    const int owner = m.origin();
    const auto run = grant(req.need, req.want, owner);
    const claim_reply reply{req.ticket, run ? run->first : 0, run ? run->second : 0};
    if (run) announce(req.ticket, run->first, run->second, owner);
    endpoint_.send(owner, claim_reply_, std::as_bytes(std::span(&reply, 1)), annotation::none);
  });
  claim_reply_ = ep.register_handler("mdsm.regions.claim_reply", [claim_of](message& m) {
    const auto reply = m.as<claim_reply>();
    auto p = claim_of(reply.ticket);
    if (!p) return;
    p->addr = reply.addr;
    p->bytes = reply.bytes;
    p->granted.store(true, std::memory_order_release);
  });
  // Every other rank: record the run's owner, then acknowledge to the owner.
  claim_notice_ = ep.register_handler("mdsm.regions.claim_notice", [this](message& m) {
    const auto notice = m.as<claim_notice>();
    if (notice.owner < 0 || notice.owner >= engine_.size()) return;
    auto* first = reinterpret_cast<void*>(notice.addr);
    if (!region_.contains(first) || notice.bytes == 0) return;
    const std::uint32_t u = region_.unit_of(first);
    const std::uint64_t units = notice.bytes / region_.unit();
    if (u < region_.pool_begin() || u >= region_.main_units() || units == 0 || units > region_.main_units() - u) return;
    region_.set_chunk_owner(u, static_cast<std::uint32_t>(units), notice.owner);
    const std::uint64_t ticket = notice.ticket;
    endpoint_.send(notice.owner, claim_ack_, std::as_bytes(std::span(&ticket, 1)), annotation::none);
  });
  claim_ack_ = ep.register_handler("mdsm.regions.claim_ack", [claim_of](message& m) {
    if (auto p = claim_of(m.as<std::uint64_t>())) p->acks.fetch_add(1, std::memory_order_acq_rel);
  });
}

std::optional<std::pair<std::uintptr_t, std::size_t>> coherent_allocator::grant(std::size_t need, std::size_t want,
                                                                               int owner) {
  const std::size_t chunk = std::size_t{region_.chunk_units()} * region_.unit();
  std::optional<std::uintptr_t> first;
  std::size_t chunks = 0;
  {
    std::lock_guard lk(pool_mutex_);
    for (std::size_t bytes : {want, need}) {
      chunks = (bytes + chunk - 1) / chunk;
      if (chunks == 0) return std::nullopt;
      if ((first = pool_.allocate(chunks, 1))) break;
    }
  }
  if (!first) return std::nullopt;
  const std::uint32_t unit = region_.pool_begin() + static_cast<std::uint32_t>(*first) * region_.chunk_units();
  const auto units = static_cast<std::uint32_t>(chunks * region_.chunk_units());
  region_.set_chunk_owner(unit, units, owner);
  return std::pair{addr_of(region_.app_unit(unit)), std::size_t{units} * region_.unit()};
}

void coherent_allocator::announce(std::uint64_t ticket, std::uintptr_t at, std::size_t bytes, int owner) {
  const claim_notice notice{ticket, at, bytes, owner, 0};
  for (int q = 1; q < engine_.size(); ++q)
    if (q != notice.owner) endpoint_.send(q, claim_notice_, std::as_bytes(std::span(&notice, 1)), annotation::none);
}

std::pair<std::size_t, std::size_t> coherent_allocator::claim_bounds(std::size_t bytes, const std::size_t& claimed) {
  std::size_t before;
  {
    std::lock_guard lk(mutex_);
    before = claimed;
  }
  // At least the allocation with its alignment; if there is room, an eighth of what the arena
  // has claimed so far: a program that allocates in many small steps claims O(log) times, and
  // the last claim wastes at most an eighth of its size.
  const std::size_t need = bytes + alignment_for(bytes);
  return {need, std::max(need, before / 8)};
}

void coherent_allocator::adopt(arena& a, std::size_t& claimed, std::uintptr_t at, std::size_t bytes, int owner) {
  region_.set_chunk_owner(region_.unit_of(reinterpret_cast<void*>(at)), static_cast<std::uint32_t>(bytes / region_.unit()),
                          owner);
  std::lock_guard lk(mutex_);
  a.grow(at, bytes);
  claimed += bytes;
}

bool coherent_allocator::claim_own(std::size_t bytes) {
  const auto [need, want] = claim_bounds(bytes, own_claimed_);
  const int me = engine_.rank();
  auto pending = std::make_shared<pending_claim>();
  std::uint64_t ticket;
  {
    std::lock_guard lk(pending_mutex_);
    ticket = next_ticket_++;
    claims_.emplace(ticket, pending);
  }
  struct forget {
    coherent_allocator& a;
    std::uint64_t ticket;
    ~forget() {
      std::lock_guard lk(a.pending_mutex_);
      a.claims_.erase(ticket);
    }
  } forget_claim{*this, ticket};
  if (me == 0) {
    if (auto run = grant(need, want, me)) {
      pending->addr = run->first;
      pending->bytes = run->second;
      announce(ticket, run->first, run->second, me);
    }
  } else {
    const claim_request req{ticket, need, want};
    endpoint_.send(0, claim_request_, std::as_bytes(std::span(&req, 1)), annotation::request);
    endpoint_.progress().wait_until([&] { return pending->granted.load(std::memory_order_acquire); });
  }
  if (pending->addr == 0) return false;
  // Every rank but rank 0 and this one acknowledges the run once it has recorded it.
  const int acks = engine_.size() - (me == 0 ? 1 : 2);
  endpoint_.progress().wait_until([&] { return pending->acks.load(std::memory_order_acquire) >= acks; });
  adopt(own_, own_claimed_, pending->addr, pending->bytes, me);
  return true;
}

bool coherent_allocator::claim_collective(std::size_t bytes) {
  const auto [need, want] = claim_bounds(bytes, collective_claimed_);
  std::uint64_t run[2] = {0, 0};  // address, bytes
  if (engine_.rank() == 0)
    if (auto r = grant(need, want, coherence::region_map::k_collective)) {
      run[0] = r->first;
      run[1] = r->second;
    }
  values_of_rank0(endpoint_.transport(), endpoint_.progress(), run, "alloc_collective");
  if (run[0] == 0) return false;
  adopt(collective_, collective_claimed_, run[0], run[1], coherence::region_map::k_collective);
  return true;
}

void coherent_allocator::out_of_memory(const arena& a, std::size_t bytes, const std::string& call, const std::string& which) {
  detail::fail(MDSM_ERR_OUT_OF_MEMORY, call, "(", bytes, "): ", which, " has ", a.free_bytes(), " bytes free (largest block ",
               a.largest_free(), ") of ", a.capacity(), ", and the pool (",
               std::size_t{region_.pool_units()} * region_.unit(),
               " bytes, three quarters of the region, shared by the ranks) has no run that large left; set a larger "
               "MDSM_COHERENT_SIZE");
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
  // (Another thread of this rank may take the room a claim brought first: then claim again.
  // The pool is finite, so this ends.)
  for (;;) {
    {
      std::lock_guard lk(mutex_);
      if (auto addr = own_.allocate(bytes, alignment_for(bytes))) {
        account(*addr, bytes, true);
        return reinterpret_cast<void*>(*addr);
      }
    }
    if (!claim_own(bytes)) {
      std::lock_guard lk(mutex_);
      out_of_memory(own_, bytes, "alloc", detail::cat("rank ", engine_.rank(), "'s arena"));
    }
  }
}

void* coherent_allocator::alloc_collective(std::size_t bytes) {
  check_same_everywhere(endpoint_.transport(), endpoint_.progress(), bytes, "alloc_collective");
  if (bytes == 0) detail::fail(MDSM_ERR_INVALID_ARGUMENT, "alloc_collective: size 0");
  std::unique_lock lk(mutex_);
  auto at = collective_.allocate(bytes, alignment_for(bytes));
  if (!at) {
    // Every rank is here, with the same collective arena: all claim together.
    lk.unlock();
    const bool grew = claim_collective(bytes);
    lk.lock();
    if (grew) at = collective_.allocate(bytes, alignment_for(bytes));
    if (!at) out_of_memory(collective_, bytes, "alloc_collective", "the collective arena");
  }
  const std::uintptr_t addr = *at;
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

void coherent_allocator::make_coherent(void* addr, std::size_t bytes) {
  net::transport& t = endpoint_.transport();
  net::progress& p = endpoint_.progress();
  try {
    check_same_everywhere(t, p, addr_of(addr), "make_coherent (the range's address)");
  } catch (const error& e) {
    if (e.code() != MDSM_ERR_MISMATCH) throw;
    detail::fail(MDSM_ERR_MISMATCH, "make_coherent: ranks passed different addresses for ", addr,
                 " (a global of a position-independent executable lies at a different address in every process: ",
                 "link the program with -no-pie, or run it under mdsmrun --no-aslr)");
  }
  check_same_everywhere(t, p, bytes, "make_coherent (the range's size)");
  std::string why;
  const mdsm_status st = region_.check_register(addr, bytes, why);
  check_same_everywhere(t, p, static_cast<std::uint64_t>(st), "make_coherent (the outcome of the range's checks)");
  if (st != MDSM_SUCCESS) detail::fail(st, why);
  const bool home = engine_.rank() == 0;
  std::uint32_t first = 0;
  {
    std::lock_guard lk(mutex_);
    first = region_.register_range(addr, bytes, home);
  }
  // Rank 0's copy is valid (opened like a fresh allocation's); the others' units start without a
  // copy (region_map::arena_owner says rank 0's), so their first access fetches rank 0's bytes,
  // which are in place before any rank passes the agreement below.
  if (home) engine_.units_allocated(first, static_cast<std::uint32_t>(bytes / region_.unit()));
  check_same_everywhere(t, p, first, "make_coherent (rank 0's copy in place)");
}

void coherent_allocator::check_freeable(const void* p, const char* call) const {
  if (region_.registered(p))
    detail::fail(MDSM_ERR_INVALID_ARGUMENT, call, ": ", p,
                 " lies in a range registered with make_coherent; it is not an allocation (it stays coherent until "
                 "finalize)");
  if (!region_.contains(p)) detail::fail(MDSM_ERR_NOT_IN_REGION, call, ": ", p, " is not in the coherent region");
}

void coherent_allocator::free(void* p) {
  if (p == nullptr) return;
  check_freeable(p, "free");
  const int owner = region_.arena_owner(region_.unit_of(p));
  if (owner == coherence::region_map::k_collective)
    detail::fail(MDSM_ERR_INVALID_ARGUMENT, "free: ", p,
                 " was allocated collectively; every rank must call free_collective on it");
  if (owner < 0)
    detail::fail(MDSM_ERR_INVALID_ARGUMENT, "free: ", p, " is not the start of a live allocation (nothing is allocated there)");
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
  check_freeable(p, "free_collective");
  const int owner = region_.arena_owner(region_.unit_of(p));
  if (owner >= 0)
    detail::fail(MDSM_ERR_INVALID_ARGUMENT, "free_collective: ", p, " was not allocated collectively; use free");
  std::lock_guard lk(mutex_);
  auto size = collective_.release(addr_of(p));
  if (!size)
    detail::fail(MDSM_ERR_INVALID_ARGUMENT, "free_collective: ", p,
                 " is not the start of a live collective allocation (already freed?)");
  account(addr_of(p), *size, false);
}

}  // namespace mdsm::regions
