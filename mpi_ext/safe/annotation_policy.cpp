#include "annotation_policy.hpp"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace mdsm::safe {
namespace {

// Written once in MPI_Init (single-threaded), read-only afterwards.
mdsm_annotation g_default = MDSM_RELEASE;
int g_keyval = MPI_KEYVAL_INVALID;
int g_bad_value_code = MPI_ERR_INFO_VALUE;  // MPI_Error_string names the key and the valid values
// Set once any communicator has an annotation of its own; until then no lookup is needed.
std::atomic<bool> g_any_cached{false};
// Moves on whenever an annotation attribute is set, copied (MPI_Comm_dup) or deleted (also when
// its communicator is freed), so a thread's cached lookup below is known to be current: Open MPI
// takes a lock in every attribute lookup.
std::atomic<std::uint64_t> g_epoch{1};
// The calling thread's last lookup.
struct last_lookup {
  MPI_Comm comm = MPI_COMM_NULL;
  std::uint64_t epoch = 0;
  bool found = false;
  mdsm_annotation annotation = MDSM_RELEASE;
};
thread_local last_lookup t_last;

void bump() { g_epoch.fetch_add(1, std::memory_order_acq_rel); }

int copy_annotation(MPI_Comm, int, void*, void* in, void* out, int* flag) {
  *static_cast<void**>(out) = in;
  *flag = 1;
  bump();
  return MPI_SUCCESS;
}
int delete_annotation(MPI_Comm, int, void*, void*) {
  bump();
  return MPI_SUCCESS;
}

// The attribute holds annotation + 1 (never a null pointer).
void* encode(mdsm_annotation a) { return reinterpret_cast<void*>(static_cast<std::intptr_t>(a) + 1); }
mdsm_annotation decode(void* v) {
  return static_cast<mdsm_annotation>(reinterpret_cast<std::intptr_t>(v) - 1);
}

}  // namespace

std::optional<mdsm_annotation> parse_annotation(const std::string& text) {
  if (text == "release") return MDSM_RELEASE;
  if (text == "release_nt") return MDSM_RELEASE_NT;
  if (text == "none") return MDSM_NONE;
  return std::nullopt;
}

const char* annotation_name(mdsm_annotation a) {
  switch (a) {
    case MDSM_NONE: return "none";
    case MDSM_REQUEST: return "request";
    case MDSM_RELEASE: return "release";
    case MDSM_RELEASE_NT: return "release_nt";
  }
  return "?";
}

bool load_default(std::string* message) {
  const char* text = std::getenv(k_env_name);
  if (text == nullptr || *text == '\0') return true;
  auto a = parse_annotation(text);
  if (!a) {
    *message = std::string("mdsm safe mode: ") + k_env_name + "=\"" + text +
               "\" is not an annotation; use release (the default), release_nt or none";
    return false;
  }
  g_default = *a;
  return true;
}

int create_keyval() {
  int rc = PMPI_Comm_create_keyval(copy_annotation, delete_annotation, &g_keyval, nullptr);
  if (rc != MPI_SUCCESS) return rc;
  int code = 0;
  if (PMPI_Add_error_code(MPI_ERR_INFO_VALUE, &code) == MPI_SUCCESS &&
      PMPI_Add_error_string(code, const_cast<char*>("mdsm safe mode: invalid value of the info key mdsm_annotation "
                                                    "(use release, release_nt or none)")) == MPI_SUCCESS)
    g_bad_value_code = code;
  return MPI_SUCCESS;
}

void free_keyval() {
  if (g_keyval != MPI_KEYVAL_INVALID) PMPI_Comm_free_keyval(&g_keyval);
  g_any_cached.store(false, std::memory_order_relaxed);
  bump();
}

policy policy_for(MPI_Comm comm) {
  policy p;
  p.annotation = g_default;
  if (comm == MPI_COMM_NULL) return p;  // the MDSM_ call reports the invalid communicator
  if (g_any_cached.load(std::memory_order_acquire)) {
    const std::uint64_t epoch = g_epoch.load(std::memory_order_acquire);
    if (t_last.comm != comm || t_last.epoch != epoch) {
      void* value = nullptr;
      int flag = 0;
      if (PMPI_Comm_get_attr(comm, g_keyval, &value, &flag) != MPI_SUCCESS) flag = 0;
      t_last = {comm, epoch, flag != 0, flag ? decode(value) : MDSM_RELEASE};
    }
    if (t_last.found) p.annotation = t_last.annotation;
  }
  if (comm != MPI_COMM_WORLD && comm != MPI_COMM_SELF) {
    int inter = 0;
    if (PMPI_Comm_test_inter(comm, &inter) == MPI_SUCCESS && inter) p.pass_through = true;
  }
  return p;
}

int annotation_from_info(MPI_Info info, const char* call, MPI_Comm comm, bool* found, mdsm_annotation* value) {
  *found = false;
  if (info == MPI_INFO_NULL) return MPI_SUCCESS;
  char text[MPI_MAX_INFO_VAL + 1] = {};
  int flag = 0;
  int rc = PMPI_Info_get(info, k_info_key, MPI_MAX_INFO_VAL, text, &flag);
  if (rc != MPI_SUCCESS || !flag) return rc;
  auto a = parse_annotation(text);
  if (!a) {
    int rank = 0;
    PMPI_Comm_rank(comm, &rank);
    if (rank == 0)
      std::fprintf(stderr,
                   "mdsm safe mode: %s: info key %s=\"%s\" is not an annotation; use release, release_nt or none\n",
                   call, k_info_key, text);
    return g_bad_value_code;
  }
  *found = true;
  *value = *a;
  return MPI_SUCCESS;
}

int set_annotation(MPI_Comm comm, mdsm_annotation value) {
  int rc = PMPI_Comm_set_attr(comm, g_keyval, encode(value));
  if (rc == MPI_SUCCESS) g_any_cached.store(true, std::memory_order_release);
  bump();
  return rc;
}

int clear_annotation(MPI_Comm comm) {
  void* value = nullptr;
  int flag = 0;
  int rc = PMPI_Comm_get_attr(comm, g_keyval, &value, &flag);
  if (rc != MPI_SUCCESS || !flag) return rc;
  return PMPI_Comm_delete_attr(comm, g_keyval);
}

}  // namespace mdsm::safe
