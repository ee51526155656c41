/* hello.c: the C API version of hello.cpp. Rank 0 writes into coherent memory and sends a
 * RELEASE message carrying a pointer; the others accept it and read through the pointer.
 *
 *   mdsmrun -n 2 ./hello_c
 */
#include <mdsm/mdsm.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char* volatile g_greeting = NULL;

static void check(mdsm_status s, const char* what) {
  if (s != MDSM_SUCCESS) {
    fprintf(stderr, "%s: %s (%s)\n", what, mdsm_strerror(s), mdsm_last_error());
    exit(1);
  }
}

static void on_hello(mdsm_message* msg, void* context) {
  (void)context;
  size_t len = 0;
  const void* payload = mdsm_message_payload(msg, &len);
  const char* p = NULL;
  if (len == sizeof p) memcpy(&p, payload, sizeof p);
  check(mdsm_accept(msg), "mdsm_accept");
  g_greeting = p;
}

static int arrived(void* context) {
  (void)context;
  return g_greeting != NULL;
}

int main(int argc, char** argv) {
  check(mdsm_init(&argc, &argv, NULL), "mdsm_init");
  int me = 0, n = 0;
  check(mdsm_rank(&me), "mdsm_rank");
  check(mdsm_size(&n), "mdsm_size");
  mdsm_handler_id hello;
  check(mdsm_register_handler("hello", on_hello, NULL, &hello), "mdsm_register_handler");

  if (me == 0) {
    char* text = NULL;
    check(mdsm_alloc(64, (void**)&text), "mdsm_alloc");
    snprintf(text, 64, "hello from rank 0 of %d", n);
    for (int r = 1; r < n; ++r) check(mdsm_send(r, hello, &text, sizeof text, MDSM_RELEASE), "mdsm_send");
  } else {
    check(mdsm_wait_until(arrived, NULL), "mdsm_wait_until");
    printf("rank %d read: %s\n", me, g_greeting);
  }
  check(mdsm_finalize(), "mdsm_finalize");
  return 0;
}
