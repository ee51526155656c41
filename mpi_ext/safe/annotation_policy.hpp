// Safe mode (libmdsm_safe): which annotation a plain MPI call on a communicator gets.
//
// The default is RELEASE. MDSM_SAFE_ANNOTATION changes it for the whole job; the info key
// `mdsm_annotation` (MPI_Comm_set_info, MPI_Comm_dup_with_info) changes it for one communicator.
// Values: "release", "release_nt", "none". A communicator's choice is cached in an MPI attribute
// (copied by MPI_Comm_dup, as the communicator's hints are). A message costs no lookup while no
// communicator has a choice of its own, and afterwards one only when the calling thread's last
// communicator differs or an annotation changed anywhere since (an epoch counter).
//
// Threads: load_default and create_keyval run once, in the MPI_Init wrapper, before the program
// has other threads; after that the shared state is read-only, atomic (a flag, the epoch) or
// MPI's attributes (thread-safe under MPI_THREAD_MULTIPLE); each thread's last lookup is its own.
#pragma once

#include <mpi.h>

#include <optional>
#include <string>

#include <mdsm/mdsm.h>

namespace mdsm::safe {

// What a plain call on a communicator turns into: an MDSM_ call with an annotation, or the plain
// PMPI_ call (intercommunicators, which MDSM_ calls do not cover; both sides agree on it).
struct policy {
  bool pass_through = false;
  mdsm_annotation annotation = MDSM_RELEASE;
};

inline constexpr const char* k_env_name = "MDSM_SAFE_ANNOTATION";
inline constexpr const char* k_info_key = "mdsm_annotation";

// "release" -> RELEASE, "release_nt" -> RELEASE_NT, "none" -> NONE (exact, lower case); else nullopt.
std::optional<mdsm_annotation> parse_annotation(const std::string& text);
const char* annotation_name(mdsm_annotation a);

// Reads MDSM_SAFE_ANNOTATION. On an invalid value returns false and sets *message.
bool load_default(std::string* message);
// Creates the attribute key. Returns an MPI error code.
int create_keyval();
// Frees the attribute key (at MPI_Finalize).
void free_keyval();

// The policy for a call on comm.
policy policy_for(MPI_Comm comm);

// Reads `mdsm_annotation` from info (given to `call` on comm). Returns MPI_SUCCESS and sets *found /
// *value, or an error code of class MPI_ERR_INFO_VALUE; then comm's rank 0 (the call is collective)
// has written a message naming the call and the bad value to stderr.
int annotation_from_info(MPI_Info info, const char* call, MPI_Comm comm, bool* found, mdsm_annotation* value);
// Caches a communicator's annotation / drops it (the job's default applies). MPI error codes.
int set_annotation(MPI_Comm comm, mdsm_annotation value);
int clear_annotation(MPI_Comm comm);

}  // namespace mdsm::safe
