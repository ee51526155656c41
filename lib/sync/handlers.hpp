// The message handlers of each primitive (defined next to the primitive), registered by
// services in one fixed order on every rank.
#pragma once

#include <mdsm/mdsm.hpp>

namespace mdsm::sync {

void on_mutex_request(message& m);
void on_mutex_token(message& m);
void on_mutex_deny(message& m);
void on_sem_release(message& m);
void on_sem_acquire(message& m);
void on_sem_grant(message& m);
void on_cond_wait(message& m);
void on_cond_notify(message& m);
void on_cond_reply(message& m);
void on_barrier_arrive(message& m);
void on_barrier_depart(message& m);
void on_queue_push(message& m);
void on_queue_pop(message& m);
void on_queue_reply(message& m);

}  // namespace mdsm::sync
