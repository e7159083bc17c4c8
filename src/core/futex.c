/* The futex calls every waiter and waker of the core uses. */
#define _GNU_SOURCE
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core_helpers.h"

void ss_futex_wait(SS_ATOMIC(uint32_t) *addr, uint32_t val, int64_t timeout_ns) {
  struct timespec ts = {(time_t)(timeout_ns / SS_NS_PER_S), (long)(timeout_ns % SS_NS_PER_S)};
  /* A relative timeout; EINTR and EAGAIN (the word moved) return at once and
   * the caller re-checks its condition. */
  syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT, val, timeout_ns < 0 ? NULL : &ts, NULL, 0);
}

int ss_futex_wake(SS_ATOMIC(uint32_t) *addr) {
  long n = syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
  return n < 0 ? 0 : (int)n;
}
