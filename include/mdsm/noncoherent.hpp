// The non-coherent region of mdsm's C++ API (included by <mdsm/mdsm.hpp>, which declares
// mdsm::options and the rest): allocation in it and one-sided get/put and 64-bit atomics between
// ranks' copies. docs/NONCOHERENT.md describes the protocol and costs.
#pragma once

#include <mdsm/error.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace mdsm {

// ---- the non-coherent region -----------------------------------------------------------------
//
// A second shared region, mapped at one address on every rank next to the coherent region. Every
// rank has its own bytes behind it and mdsm keeps no consistency between them: an address names
// the same object on every rank (allocate with nc_alloc, send the pointer), and rank r's copy of
// it is read and written one-sidedly with get/put and 64-bit atomics -- rank r's application takes
// no part: on r's host the calling thread maps r's copy and copies or runs the atomic itself,
// elsewhere r's progress engine serves the request. For runtime libraries: counters, flags, queues,
// buffers a producer fills in a consumer's memory. Size: options::noncoherent_size or
// MDSM_NONCOHERENT_SIZE (default 1 GiB of address space; untouched pages cost no memory).
//
// Completion. A blocking call returns once the operation is complete at the target (a put's
// bytes are in the target's copy, a get's are in dst, an atomic has run). A non-blocking call
// returns an nc_request at once. put_nb copies a source of less than 64 KiB (or one in coherent
// memory) before it returns; a larger one is read until the request completes (it travels as one
// MPI message straight from there): leave it unchanged until then.
// Ordering: the operations one thread issues to one rank are applied there in issue order (a get
// after a put sees it); operations of different threads or to different ranks are not ordered.
// A remote range need not be allocated, only inside the region.
//
// Atomics: fetch_add and compare_swap on an 8-byte aligned 64-bit word are hardware atomics on
// the word's rank's copy (run by the caller on that rank's host, by that rank's progress engine
// elsewhere), so all of them on one word -- from every rank, that rank included -- are atomic with
// respect to each other. Plain loads and stores of the word, and get/put covering it,
// are not: to read such a word use fetch_add(rank, p, 0) (or std::atomic_ref on this rank's copy).
//
// Local buffers (dst of get, src of put) may be private, non-coherent (this rank's copy) or
// coherent memory. A get into coherent memory lands in a buffer and is copied there by the
// application thread that completes it (wait() or test()): handlers never write coherent memory.
//
// Handlers may use this region (never the coherent one): the non-blocking calls and
// nc_request::test() work there; the blocking calls and wait() throw MDSM_ERR_HANDLER_CONTEXT
// (a handler must not wait), and so does a local buffer in the coherent region.
// Errors: MDSM_ERR_INVALID_RANK; MDSM_ERR_NOT_IN_REGION (a remote range not inside the region);
// MDSM_ERR_INVALID_ARGUMENT (a null local buffer, a misaligned atomic word);
// MDSM_ERR_INVALID_HANDLE (a null or moved-from nc_request).

// Allocates `bytes` of non-coherent memory from this rank's arena: the address is unique in the
// job. 16-byte aligned (page aligned from a page up). MDSM_ERR_OUT_OF_MEMORY when the arena is full.
void* nc_alloc(std::size_t bytes);
// Collective: every rank calls it with the same size and gets the same address (each rank has its
// own bytes there: a per-rank counter, a mailbox every rank can reach at one address).
void* nc_alloc_collective(std::size_t bytes);
// Frees memory from nc_alloc; any rank may (another rank's allocation costs a round trip to it).
void nc_free(void* p);
void nc_free_collective(void* p);  // collective counterpart of nc_alloc_collective
bool is_noncoherent(const void* p) noexcept;

namespace detail {
struct nc_operation;
}

// A non-blocking get, put or atomic. Move-only. Destroying one that has not completed detaches it:
// the operation still completes (a get into coherent memory is then not copied). One thread at a
// time may use a request.
class nc_request {
 public:
  nc_request() noexcept;
  nc_request(nc_request&&) noexcept;
  nc_request& operator=(nc_request&&) noexcept;
  ~nc_request();
  nc_request(const nc_request&) = delete;
  nc_request& operator=(const nc_request&) = delete;

  // Waits until the operation is complete at its target. Application threads only.
  void wait();
  // True once complete (from an application thread it delivers pending messages first). Any
  // context, handlers included.
  bool test();
  // An atomic's old value, once complete (0 for get and put). MDSM_ERR_BUSY before.
  std::uint64_t value() const;
  explicit operator bool() const noexcept { return op_ != nullptr; }

 private:
  explicit nc_request(std::shared_ptr<detail::nc_operation> op) noexcept;
  friend nc_request get_nb(void*, int, const void*, std::size_t);
  friend nc_request put_nb(int, void*, const void*, std::size_t);
  friend nc_request fetch_add_nb(int, std::uint64_t*, std::uint64_t);
  friend nc_request compare_swap_nb(int, std::uint64_t*, std::uint64_t, std::uint64_t);
  std::shared_ptr<detail::nc_operation> op_;
};

// Copies `bytes` from rank `rank`'s copy of [src, src + bytes) (in the non-coherent region) to dst.
void get(void* dst, int rank, const void* src, std::size_t bytes);
// Copies `bytes` from src to rank `rank`'s copy of [dst, dst + bytes) (in the non-coherent region).
void put(int rank, void* dst, const void* src, std::size_t bytes);
nc_request get_nb(void* dst, int rank, const void* src, std::size_t bytes);
nc_request put_nb(int rank, void* dst, const void* src, std::size_t bytes);
// Adds `value` to rank `rank`'s copy of *word; returns the value before (wrapping modulo 2^64).
std::uint64_t fetch_add(int rank, std::uint64_t* word, std::uint64_t value);
// If rank `rank`'s copy of *word equals `expected`, makes it `desired`; returns the value before
// (equal to `expected` exactly when the swap happened).
std::uint64_t compare_swap(int rank, std::uint64_t* word, std::uint64_t expected, std::uint64_t desired);
nc_request fetch_add_nb(int rank, std::uint64_t* word, std::uint64_t value);
nc_request compare_swap_nb(int rank, std::uint64_t* word, std::uint64_t expected, std::uint64_t desired);

}  // namespace mdsm
