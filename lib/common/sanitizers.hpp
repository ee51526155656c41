// Which sanitizer this translation unit is built with: MDSM_ASAN, MDSM_TSAN (1 or 0), for the
// few places that must tell the sanitizer what the code does (fiber switches) or must avoid what
// it cannot follow (a fiber switch inside a signal handler under TSan).
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define MDSM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MDSM_ASAN 1
#endif
#endif
#ifndef MDSM_ASAN
#define MDSM_ASAN 0
#endif

#if defined(__SANITIZE_THREAD__)
#define MDSM_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define MDSM_TSAN 1
#endif
#endif
#ifndef MDSM_TSAN
#define MDSM_TSAN 0
#endif
