/* Clocks and deadlines, in nanoseconds. */
#define _GNU_SOURCE
#include <sched.h>
#include <time.h>

#include "core_helpers.h"

int64_t ss_monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * SS_NS_PER_S + ts.tv_nsec;
}

uint64_t ss_realtime_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * SS_NS_PER_S + (uint64_t)ts.tv_nsec;
}

int64_t ss_deadline_ns(int64_t timeout_ns) {
  return timeout_ns < 0 ? INT64_MAX : ss_deadline_from(ss_monotonic_ns(), timeout_ns);
}

int64_t ss_deadline_from(int64_t now, int64_t timeout_ns) {
  if (timeout_ns < 0) return INT64_MAX;
  /* Saturate: a timeout of years (math.inf in Python) means never. */
  return timeout_ns > INT64_MAX - now ? INT64_MAX : now + timeout_ns;
}

void ss_backoff(int64_t since_ns, int64_t now_ns) {
  int64_t waited = now_ns - since_ns;
  if (waited < SS_BACKOFF_YIELD_NS) {
    sched_yield();
    return;
  }
  /* A window a few stores long that stays open this long belongs to a
   * writer that lost its core, or to a peer that left the word odd: sleep,
   * growing to 1 ms, instead of burning a core on it for ever. */
  int64_t nap = waited / 16;
  if (nap > SS_NS_PER_S / 1000) nap = SS_NS_PER_S / 1000;
  struct timespec ts = {0, (long)nap};
  nanosleep(&ts, NULL);
}

int64_t ss_remaining_ns(int64_t deadline) {
  if (deadline == INT64_MAX) return -1;
  int64_t left = deadline - ss_monotonic_ns();
  return left > 0 ? left : 0;
}
