// The program's global variables as fork() would hand them to a child, across ranks whose
// load addresses differ (address-space layout randomization). Used by the PARMACS macros
// (parmacs.cpp): CREATE sends the main process's globals to the rank that runs the new process.
//
// What is copied: the writable data of the main executable (its writable PT_LOAD segments minus
// the part made read-only after relocation, PT_GNU_RELRO) -- .data and .bss, the program's
// globals and statics. What is not:
//   - copy-relocated variables (R_*_COPY: stdout, stderr, optind, environ ... that the program
//     refers to but a shared library defines; also mdsm's own globals): each rank keeps its own;
//   - the three reserved words of a lazily bound .got.plt (ld.so's own pointers);
//   - words that hold a load-time address (a dynamic relocation: `char* name = "x";`,
//     `&some_global`, a function pointer, a lazily bound PLT slot): if rank 0's value points into
//     rank 0's image it is moved by the difference of the load addresses; if it points into the
//     coherent region it is kept (the same on every rank); otherwise (a library or heap address)
//     the receiving rank keeps its own value.
// Every other word is copied as it is: a pointer into coherent memory means the same everywhere,
// a pointer to rank 0's private heap or stack means nothing on another rank (as documented).
//
// Needs a dynamically linked program (mdsm, MPI and the C library as shared libraries): with
// static linking their state would be part of the image. Threads: application thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace mdsm::api {

class program_image {
 public:
  // The layout of this process's main executable. Throws mdsm::error (MDSM_ERR_INVALID_ARGUMENT)
  // if the program is linked statically or its dynamic relocations cannot be read.
  static program_image of_this_process();

  // The current contents, to be applied on another rank running the same program.
  std::vector<std::byte> snapshot() const;
  // Writes another rank's snapshot into this process's globals. Throws mdsm::error
  // (MDSM_ERR_MISMATCH) if it was taken from a different layout (another program).
  void apply(std::span<const std::byte> snapshot) const;

  // Bytes a snapshot carries (the copied ranges).
  std::size_t bytes() const noexcept;

 private:
  struct range {
    std::uint64_t from, to;  // offsets from base_
  };
  std::uintptr_t base_ = 0;           // load address (0 for a non-PIE executable)
  std::uint64_t lo_ = 0, hi_ = 0;     // extent of all PT_LOAD segments, as offsets
  std::vector<range> copied_;         // sorted, disjoint
  std::vector<range> kept_;           // copy relocations, PLT reserved words: never copied
  std::vector<std::uint64_t> relocated_;  // offsets of address words inside copied_, sorted
};

// A code address named by its object ("" for the program) and its offset from the object's load
// address, as Tmk_distribute names a variable; and back, on another rank.
struct code_location {
  std::string object;
  std::uint64_t offset = 0;
};
std::optional<code_location> locate_code(const void* p);
// nullptr if no executable segment of that object holds the offset.
void* resolve_code(const code_location& where);

// True if `p` lies in a loaded segment of the main executable (a library's variable that does
// means the library was linked statically).
bool in_main_executable(const void* p);

}  // namespace mdsm::api
