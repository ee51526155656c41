// The {header, user buffer} struct datatypes of messages in place (ext.hpp, header_and), and the
// per-thread cache that keeps making them off the message path.
#include "mpi_ext/ext.hpp"

#include <array>
#include <cstddef>

namespace mdsm::mpi_ext {

namespace {

MPI_Datatype make_header_and(const header* h, const void* buf, int count, MPI_Datatype type) {
  int lengths[2] = {k_header, count};
  MPI_Aint where[2];
  PMPI_Get_address(h, &where[0]);
  PMPI_Get_address(buf, &where[1]);
  MPI_Datatype types[2] = {MPI_BYTE, type};
  MPI_Datatype t;
  PMPI_Type_create_struct(2, lengths, where, types, &t);
  PMPI_Type_commit(&t);
  return t;
}

// The {header, buffer} types a thread made last for predefined datatypes (header_and).
struct header_type_cache {
  struct entry {
    const header* h = nullptr;
    const void* buf = nullptr;
    int count = 0;
    MPI_Datatype type = MPI_DATATYPE_NULL;
    MPI_Datatype made = MPI_DATATYPE_NULL;
  };
  std::array<entry, 8> entries{};
  std::size_t next = 0;  // the entry replaced next (round robin)
  ~header_type_cache() {
    int up = 0, down = 0;
    MPI_Initialized(&up);
    MPI_Finalized(&down);
    if (!up || down) return;  // MPI freed them
    for (entry& e : entries)
      if (e.made != MPI_DATATYPE_NULL) PMPI_Type_free(&e.made);
  }
};

}  // namespace

MPI_Datatype header_and(const header* h, const void* buf, int count, MPI_Datatype type, bool& owned) {
  owned = named_size(type) == 0;
  if (owned) return make_header_and(h, buf, count, type);
  thread_local header_type_cache cache;
  for (const auto& e : cache.entries)
    if (e.h == h && e.buf == buf && e.count == count && e.type == type) return e.made;
  auto& e = cache.entries[cache.next];
  cache.next = (cache.next + 1) % cache.entries.size();
  // Freeing a type a pending operation uses is allowed: MPI frees it once that completes.
  if (e.made != MPI_DATATYPE_NULL) PMPI_Type_free(&e.made);
  e = {h, buf, count, type, make_header_and(h, buf, count, type)};
  return e.made;
}

}  // namespace mdsm::mpi_ext
