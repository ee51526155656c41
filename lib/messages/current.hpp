// The process's message endpoint, for the public classes that reach it without an argument.
#pragma once

#include "messages/endpoint.hpp"

namespace mdsm::messages {

// Set by the runtime between init and finalize.
void set_current(endpoint* e) noexcept;
// Throws MDSM_ERR_NOT_INITIALIZED outside init..finalize.
endpoint& current();

}  // namespace mdsm::messages
