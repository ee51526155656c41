#include "common/wait_subject.hpp"

namespace mdsm::detail {

thread_local constinit const wait_subject* t_wait_subject = nullptr;

std::string describe_wait(int me) { return describe_subject(t_wait_subject, me); }

std::string describe_subject(const wait_subject* s, int me) {
  if (s == nullptr) return "an application condition (mdsm::wait_until or poll), or a collective step";
  std::string out = s->what ? s->what : "a remote event";
  if (s->object) out += std::string(": ") + s->object + " #" + std::to_string(s->id);
  if (s->peer >= 0 && s->peer != me) {
    out += ", an answer from rank " + std::to_string(s->peer);
    if (s->peer_role) out += std::string(" (") + s->peer_role + ")";
  }
  if (s->detail) out += "; " + s->detail(s->detail_ctx);
  for (const wait_subject* o = s->outer; o != nullptr; o = o->outer)
    if (o->what) out += std::string(" (in ") + o->what + ")";
  return out;
}

}  // namespace mdsm::detail
