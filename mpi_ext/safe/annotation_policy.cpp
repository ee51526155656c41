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
  int rc = PMPI_Comm_create_keyval(MPI_COMM_DUP_FN, MPI_COMM_NULL_DELETE_FN, &g_keyval, nullptr);
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
}

policy policy_for(MPI_Comm comm) {
  policy p;
  p.annotation = g_default;
  if (comm == MPI_COMM_NULL) return p;  // the MDSM_ call reports the invalid communicator
  if (g_any_cached.load(std::memory_order_acquire)) {
    void* value = nullptr;
    int flag = 0;
    if (PMPI_Comm_get_attr(comm, g_keyval, &value, &flag) == MPI_SUCCESS && flag) p.annotation = decode(value);
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
