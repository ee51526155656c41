#include "os/topology.hpp"

#include "common/check.hpp"

#include <hwloc.h>
#include <mutex>

namespace mdsm::os::topology {

namespace {

// Loaded once; hwloc topology queries are read-only afterwards and safe from any thread.
hwloc_topology_t topo() {
  static hwloc_topology_t t = [] {
    hwloc_topology_t loaded = nullptr;
    if (hwloc_topology_init(&loaded) != 0 || hwloc_topology_load(loaded) != 0) return hwloc_topology_t{nullptr};
    return loaded;
  }();
  return t;
}

}  // namespace

std::size_t base_page_size() {
  hwloc_topology_t t = topo();
  if (t == nullptr) return 0;
  std::size_t best = 0;
  hwloc_obj_t node = nullptr;
  while ((node = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_NUMANODE, node)) != nullptr) {
    for (unsigned i = 0; i < node->attr->numanode.page_types_len; ++i) {
      std::size_t sz = node->attr->numanode.page_types[i].size;
      if (sz != 0 && (best == 0 || sz < best)) best = sz;
    }
  }
  return best;
}

unsigned usable_pus() {
  hwloc_topology_t t = topo();
  if (t == nullptr) return 1;
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  unsigned n = 0;
  if (hwloc_get_cpubind(t, set, HWLOC_CPUBIND_PROCESS) == 0) n = static_cast<unsigned>(hwloc_bitmap_weight(set));
  hwloc_bitmap_free(set);
  if (n == 0) n = static_cast<unsigned>(hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU));
  return n == 0 ? 1 : n;
}

std::string pin_to_spare_pu(int local_rank, int local_size, bool* dedicated) {
  *dedicated = false;
  hwloc_topology_t t = topo();
  if (t == nullptr) return "not pinned: hwloc topology unavailable";
  int pus = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU);
  hwloc_bitmap_t bound = hwloc_bitmap_alloc();
  std::string result;
  // If the launcher bound this rank to a core with several hardware threads, the spare is the
  // last PU of our own binding (an SMT sibling of the application thread).
  if (hwloc_get_cpubind(t, bound, HWLOC_CPUBIND_PROCESS) == 0 && hwloc_bitmap_weight(bound) > 1 &&
      hwloc_bitmap_weight(bound) < pus) {
    int last = hwloc_bitmap_last(bound);
    hwloc_bitmap_only(bound, static_cast<unsigned>(last));
    if (hwloc_set_cpubind(t, bound, HWLOC_CPUBIND_THREAD) == 0) result = detail::cat("pu ", last, " (sibling)");
  } else if (pus > local_size) {
    // Unbound ranks: PUs [0, local_size) are left to the application threads; the progress
    // threads share the rest.
    int spare = local_size + (local_rank % (pus - local_size));
    hwloc_obj_t pu = hwloc_get_obj_by_type(t, HWLOC_OBJ_PU, static_cast<unsigned>(spare));
    if (pu != nullptr && hwloc_set_cpubind(t, pu->cpuset, HWLOC_CPUBIND_THREAD) == 0)
      result = detail::cat("pu ", spare);
  }
  hwloc_bitmap_free(bound);
  *dedicated = !result.empty();
  if (result.empty()) result = detail::cat("not pinned: ", pus, " PUs for ", local_size, " local ranks");
  return result;
}

}  // namespace mdsm::os::topology
