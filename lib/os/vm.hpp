// The virtual-memory seam: the only place mdsm calls mmap, mprotect, madvise and memfd.
//
// A coherent region is one memfd (the backing) mapped twice: the *application view* at the
// address all ranks agreed on, whose per-page protections drive write detection and
// invalidation, and a *library view* that is always read-write, through which the library
// reads pages, applies diffs and makes twins without faulting (so the progress thread never
// takes a fault and never has to change a protection to look at a page).
#pragma once

#include <cstddef>
#include <cstdint>

namespace mdsm::os {

enum class prot : std::uint8_t { none, read, read_write };

// Base page size of this machine, from hwloc's memory page types (sysconf as a fallback).
std::size_t page_size();

// Highest address + 1 a user mapping may end at on this machine (x86-64: 2^47).
std::uintptr_t address_space_end();

// An anonymous shared-memory file of `len` bytes; nothing is committed until touched.
// Pre: len > 0 and a multiple of page_size(). Throws mdsm::error(MDSM_ERR_OS) on failure.
int create_backing(std::size_t len, const char* name);
void close_backing(int fd);

// Maps `len` bytes of `fd` at exactly `addr` with protection `p`, never replacing an existing
// mapping (MAP_FIXED_NOREPLACE). Returns false if anything is mapped in the range, or the kernel
// places the mapping elsewhere; throws on any other failure.
// Pre: addr and len are multiples of page_size().
bool map_fixed_noreplace(void* addr, std::size_t len, int fd, prot p);

// Maps `len` bytes of private anonymous memory, read-write and without reserving swap
// (MAP_NORESERVE: untouched pages cost nothing), at exactly `addr`, never replacing an existing
// mapping. Returns false as map_fixed_noreplace does. Pre: as map_fixed_noreplace.
bool map_private_fixed_noreplace(void* addr, std::size_t len);

// Maps `len` bytes of `fd` read-write wherever the kernel chooses. Throws on failure.
void* map_anywhere(std::size_t len, int fd);

// Replaces the program's own memory at [addr, addr + len) (its globals, say: make_coherent) by
// `len` bytes of `fd` from `offset`, with protection `p`; what was there is gone. Throws on
// failure. Pre: addr, len and offset are multiples of page_size().
void map_shared_over(void* addr, std::size_t len, int fd, std::size_t offset, prot p);

// Replaces [addr, addr + len) by private anonymous read-write memory (zeros) again, as the
// program's memory was before map_shared_over. Throws on failure. Pre: as map_shared_over.
void map_private_over(void* addr, std::size_t len);

// Whether every page of [addr, addr + len) is mapped (mincore). Pre: addr is page aligned.
bool is_mapped(const void* addr, std::size_t len);

// An address where the kernel would place a fresh `len`-byte mapping now (probe, then unmap).
void* propose_address(std::size_t len);

void unmap(void* addr, std::size_t len);

// Pre: addr and len are multiples of page_size() and lie in one mapping made here.
// Async-signal-safe (mprotect); aborts the process if the kernel refuses, since a
// protection we believe in but do not have would corrupt memory silently.
void protect(void* addr, std::size_t len, prot p);

// Frees the physical memory behind a range of a shared mapping; the next touch reads zeros.
void discard(void* addr, std::size_t len);

// Gives every page of a writable range its memory now, in one call, as writes would one fault
// each. Pages that have theirs are left alone. Best effort: a kernel without
// MADV_POPULATE_WRITE (before Linux 5.14) leaves it to the faults.
void populate(void* addr, std::size_t len);

}  // namespace mdsm::os
