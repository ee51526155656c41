// What an application thread is waiting for, named for the failure detector
// (net::progress::wait_until ends the job when a wait outlives MDSM_WAIT_DEADLINE_S and reports
// the innermost subject of the waiting thread; "an application condition" when there is none).
//
// Set by the code that knows: a coordination call (which object, whose answer), a fault (which
// unit, from which rank), a collective step. Costs two thread-local stores per scope; read only
// when a deadline passes.
#pragma once

#include <cstdint>
#include <string>

namespace mdsm::detail {

struct wait_subject {
  const char* what = nullptr;       // "mutex::lock", "a copy of a coherent unit", ...
  const char* object = nullptr;     // "mutex", "unit", ...: names `id`; nullptr: no id
  std::uint64_t id = 0;
  int peer = -1;                    // the rank whose answer is awaited, or -1
  const char* peer_role = nullptr;  // "its manager, ...", ...
  // More detail, computed only for the report (e.g. the ranks a barrier's manager still waits
  // for); may be null.
  std::string (*detail)(const void* ctx) = nullptr;
  const void* detail_ctx = nullptr;
  const wait_subject* outer = nullptr;
};

extern thread_local constinit const wait_subject* t_wait_subject;

// Makes `s` the calling thread's subject for the scope's lifetime (nests).
class waiting_for {
 public:
  explicit waiting_for(wait_subject& s) noexcept : s_(s) {
    s.outer = t_wait_subject;
    t_wait_subject = &s;
  }
  ~waiting_for() { t_wait_subject = s_.outer; }
  waiting_for(const waiting_for&) = delete;
  waiting_for& operator=(const waiting_for&) = delete;

 private:
  wait_subject& s_;
};

// "mutex::lock: mutex #3, an answer from rank 0 (its manager ...)" for the calling thread's
// innermost subject, with the outer ones named after it. A peer that is `me` is not named.
std::string describe_wait(int me);
// The same for subject `s` (of any thread; nullptr: "an application condition ...").
std::string describe_subject(const wait_subject* s, int me);

}  // namespace mdsm::detail
