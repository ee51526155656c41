#include "os/vm.hpp"

#include "common/check.hpp"
#include "os/topology.hpp"

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

namespace mdsm::os {

namespace {
int to_native(prot p) {
  switch (p) {
    case prot::none: return PROT_NONE;
    case prot::read: return PROT_READ;
    case prot::read_write: return PROT_READ | PROT_WRITE;
  }
  return PROT_NONE;
}
}  // namespace

std::size_t page_size() {
  static const std::size_t size = [] {
    std::size_t from_hwloc = topology::base_page_size();
    return from_hwloc != 0 ? from_hwloc : static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  }();
  return size;
}

std::uintptr_t address_space_end() { return std::uintptr_t{1} << 47; }

int create_backing(std::size_t len, const char* name) {
  int fd = ::memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) detail::fail(MDSM_ERR_OS, "memfd_create failed: ", std::strerror(errno));
  if (::ftruncate(fd, static_cast<off_t>(len)) != 0) {
    int e = errno;
    ::close(fd);
    detail::fail(MDSM_ERR_OS, "cannot size the region backing to ", len, " bytes: ", std::strerror(e));
  }
  return fd;
}

void close_backing(int fd) { ::close(fd); }

bool map_fixed_noreplace(void* addr, std::size_t len, int fd, prot p) {
  void* got = ::mmap(addr, len, to_native(p), MAP_SHARED | MAP_FIXED_NOREPLACE | MAP_NORESERVE, fd, 0);
  if (got == MAP_FAILED) {
    if (errno == EEXIST || errno == ENOMEM || errno == EINVAL) return false;
    detail::fail(MDSM_ERR_OS, "mmap at ", addr, " failed: ", std::strerror(errno));
  }
  if (got != addr) {  // kernels before 4.17 ignore the flag and treat addr as a hint
    ::munmap(got, len);
    return false;
  }
  return true;
}

bool map_private_fixed_noreplace(void* addr, std::size_t len) {
  void* got = ::mmap(addr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE | MAP_NORESERVE,
                     -1, 0);
  if (got == MAP_FAILED) {
    if (errno == EEXIST || errno == ENOMEM || errno == EINVAL) return false;
    detail::fail(MDSM_ERR_OS, "mmap at ", addr, " failed: ", std::strerror(errno));
  }
  if (got != addr) {
    ::munmap(got, len);
    return false;
  }
  return true;
}

void* map_anywhere(std::size_t len, int fd) {
  void* got = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (got == MAP_FAILED) detail::fail(MDSM_ERR_OS, "mmap of ", len, " bytes failed: ", std::strerror(errno));
  return got;
}

void map_shared_over(void* addr, std::size_t len, int fd, std::size_t offset, prot p) {
  void* got = ::mmap(addr, len, to_native(p), MAP_SHARED | MAP_FIXED | MAP_NORESERVE, fd, static_cast<off_t>(offset));
  if (got == MAP_FAILED) detail::fail(MDSM_ERR_OS, "mmap over ", addr, " (", len, " bytes) failed: ", std::strerror(errno));
}

void map_private_over(void* addr, std::size_t len) {
  void* got = ::mmap(addr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  if (got == MAP_FAILED) detail::fail(MDSM_ERR_OS, "mmap over ", addr, " (", len, " bytes) failed: ", std::strerror(errno));
}

bool is_mapped(const void* addr, std::size_t len) {
  // mincore fails with ENOMEM on any page of the range that is not mapped; a vector entry per
  // page, in slices so that a large range needs no large vector.
  const std::size_t page = page_size();
  unsigned char v[256];
  for (std::size_t off = 0; off < len; off += sizeof v * page) {
    const std::size_t n = std::min(len - off, sizeof v * page);
    if (::mincore(const_cast<std::byte*>(static_cast<const std::byte*>(addr) + off), n, v) != 0) return false;
  }
  return true;
}

void* propose_address(std::size_t len) {
  void* got = ::mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (got == MAP_FAILED) return nullptr;
  ::munmap(got, len);
  return got;
}

void unmap(void* addr, std::size_t len) { ::munmap(addr, len); }

void protect(void* addr, std::size_t len, prot p) {
  if (::mprotect(addr, len, to_native(p)) != 0) detail::die("mdsm: mprotect failed on the coherent region");
}

void discard(void* addr, std::size_t len) {
  if (::madvise(addr, len, MADV_REMOVE) != 0) {
    // Not fatal: the memory stays committed but its contents are never read again.
  }
}

void populate(void* addr, std::size_t len) {
#ifdef MADV_POPULATE_WRITE
  (void)::madvise(addr, len, MADV_POPULATE_WRITE);  // a failure leaves the pages to their faults
#else
  (void)addr;
  (void)len;
#endif
}

}  // namespace mdsm::os
