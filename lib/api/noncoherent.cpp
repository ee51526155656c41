// The C++ API of the non-coherent region (include/mdsm/mdsm.hpp): checks of the calling context,
// then lib/regions' noncoherent_region (allocation) and one_sided (get, put, atomics).
#include "api/runtime.hpp"

#include "common/check.hpp"
#include "regions/collective_check.hpp"

#include <mdsm/mdsm.hpp>

namespace mdsm {

namespace {

regions::one_sided& ops() { return *detail::rt().one_sided; }

// A blocking call from a handler would wait there: refused before anything starts.
regions::one_sided& blocking_ops(const char* what) {
  detail::runtime& r = detail::rt();
  if (const char* h = net::current_handler())
    detail::fail(MDSM_ERR_HANDLER_CONTEXT, what, " waits for the target rank and cannot be called from message handler '",
                 h, "'; use ", what, "_nb (and test() the request)");
  return *r.one_sided;
}

}  // namespace

void* nc_alloc(std::size_t bytes) {
  detail::runtime& r = detail::rt();
  return r.noncoherent->alloc(r.transport->rank(), bytes);
}

void* nc_alloc_collective(std::size_t bytes) {
  detail::runtime& r = detail::rt_blocking("nc_alloc_collective");
  regions::check_same_everywhere(*r.transport, *r.progress, bytes, "nc_alloc_collective");
  return r.noncoherent->alloc_collective(bytes);
}

void nc_free(void* p) { detail::rt_blocking("nc_free").one_sided->free(p); }

void nc_free_collective(void* p) {
  detail::runtime& r = detail::rt_blocking("nc_free_collective");
  regions::check_same_everywhere(*r.transport, *r.progress, reinterpret_cast<std::uintptr_t>(p), "nc_free_collective");
  if (p == nullptr) return;
  if (!r.noncoherent->contains(p))
    detail::fail(MDSM_ERR_NOT_IN_REGION, "nc_free_collective: ", p, " is not in the non-coherent region");
  if (r.noncoherent->arena_owner(p) >= 0)
    detail::fail(MDSM_ERR_INVALID_ARGUMENT, "nc_free_collective: ", p, " was not allocated collectively; use nc_free");
  r.noncoherent->free_collective(p);
}

// ---- requests ----------------------------------------------------------------------------------

nc_request::nc_request() noexcept = default;
nc_request::nc_request(std::shared_ptr<detail::nc_operation> op) noexcept : op_(std::move(op)) {}
nc_request::nc_request(nc_request&&) noexcept = default;
nc_request& nc_request::operator=(nc_request&&) noexcept = default;
nc_request::~nc_request() = default;

namespace {
detail::nc_operation& checked(const std::shared_ptr<detail::nc_operation>& op, const char* what) {
  if (!op)
    detail::fail(MDSM_ERR_INVALID_HANDLE, "nc_request::", what,
                 ": a null request (default-constructed or moved from); get one from get_nb, put_nb, fetch_add_nb "
                 "or compare_swap_nb");
  return *op;
}
}  // namespace

void nc_request::wait() {
  detail::nc_operation& op = checked(op_, "wait");
  ops().wait(op);
}

bool nc_request::test() {
  detail::nc_operation& op = checked(op_, "test");
  return ops().test(op);
}

std::uint64_t nc_request::value() const {
  const detail::nc_operation& op = checked(op_, "value");
  if (op.remaining.load(std::memory_order_acquire) != 0)
    detail::fail(MDSM_ERR_BUSY, "nc_request::value: the ", op.what, " has not completed; wait() or test() first");
  return op.value;
}

// ---- operations --------------------------------------------------------------------------------

nc_request get_nb(void* dst, int rank, const void* src, std::size_t bytes) {
  return nc_request(ops().get(dst, rank, src, bytes));
}

nc_request put_nb(int rank, void* dst, const void* src, std::size_t bytes) {
  return nc_request(ops().put(rank, dst, src, bytes));
}

nc_request fetch_add_nb(int rank, std::uint64_t* word, std::uint64_t value) {
  return nc_request(ops().fetch_add(rank, word, value));
}

nc_request compare_swap_nb(int rank, std::uint64_t* word, std::uint64_t expected, std::uint64_t desired) {
  return nc_request(ops().compare_swap(rank, word, expected, desired));
}

void get(void* dst, int rank, const void* src, std::size_t bytes) {
  regions::one_sided& o = blocking_ops("get");
  auto op = o.get(dst, rank, src, bytes);
  o.wait(*op);
}

void put(int rank, void* dst, const void* src, std::size_t bytes) {
  regions::one_sided& o = blocking_ops("put");
  auto op = o.put(rank, dst, src, bytes);
  o.wait(*op);
}

std::uint64_t fetch_add(int rank, std::uint64_t* word, std::uint64_t value) {
  regions::one_sided& o = blocking_ops("fetch_add");
  auto op = o.fetch_add(rank, word, value);
  o.wait(*op);
  return op->value;
}

std::uint64_t compare_swap(int rank, std::uint64_t* word, std::uint64_t expected, std::uint64_t desired) {
  regions::one_sided& o = blocking_ops("compare_swap");
  auto op = o.compare_swap(rank, word, expected, desired);
  o.wait(*op);
  return op->value;
}

}  // namespace mdsm
