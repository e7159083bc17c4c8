/* The lock line's mutex: process-shared, robust, error-checking. If its
 * owner dies, the kernel's robust-futex list hands it to the next acquirer
 * at once with EOWNERDEAD. This file knows nothing about streams: what a
 * dead owner left behind is repaired by the caller (stream_lock.c). */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

void ss_mutex_init(pthread_mutex_t *m) {
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
  pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK);
  pthread_mutex_init(m, &a);
  pthread_mutexattr_destroy(&a);
}

/* The mutex lives in memory another process wrote, and glibc trusts its
 * kind word: a priority-protect kind, say, ends in an assertion (tpp.c)
 * inside pthread_mutex_trylock. So a lock refuses any kind but the one
 * ss_mutex_init gives (docs/ABI.md, "Lock"; a tests/fuzz/fuzz_open.c
 * finding). glibc only: the kind word is its mutex's __data.__kind. */
static int kind_ok(const pthread_mutex_t *m) {
#ifdef __GLIBC__
  static SS_ATOMIC(int) want = -1; /* the kind ss_mutex_init gives, once known */
  int w = atomic_load_explicit(&want, memory_order_relaxed);
  if (w < 0) {
    pthread_mutex_t ref;
    ss_mutex_init(&ref);
    w = ref.__data.__kind;
    pthread_mutex_destroy(&ref);
    atomic_store_explicit(&want, w, memory_order_relaxed);
  }
  /* Set before the segment's magic was published (m) and never written
   * since by a well-behaved process: a plain read. */
  return ((const volatile pthread_mutex_t *)m)->__data.__kind == w;
#else
  (void)m;
  return 1;
#endif
}

int32_t ss_mutex_word_tid(const ss_lock_line *l) {
#ifdef __GLIBC__
  /* glibc's robust mutex word: the owner's tid, plus FUTEX_WAITERS and
   * FUTEX_OWNER_DIED in the top bits. */
  return ((const volatile pthread_mutex_t *)&l->m.mutex)->__data.__owner & 0x3fffffff;
#else
  (void)l;
  return 0;
#endif
}

int ss_mutex_owner_died(const ss_lock_line *l) {
#ifdef __GLIBC__
  /* The futex word of a robust mutex: the owner's tid, plus FUTEX_WAITERS
   * and FUTEX_OWNER_DIED. The kernel sets FUTEX_OWNER_DIED (clearing the
   * tid) when the owner exits holding it; that is what makes the next lock
   * return EOWNERDEAD, i.e. the takeover's own test, read without locking. */
  return (((const volatile pthread_mutex_t *)&l->m.mutex)->__data.__lock & FUTEX_OWNER_DIED) != 0;
#else
  (void)l;
  return 0;
#endif
}

/* Whether thread `tid` exists, as far as /proc can tell (1 without /proc).
 * /proc/<tid> stays until the thread is reaped, after the kernel has
 * released its robust mutexes (FUTEX_OWNER_DIED, tid cleared). */
static int thread_exists(int32_t tid) {
  char path[32];
  if (access("/proc/self", F_OK) != 0) return 1;
  snprintf(path, sizeof path, "/proc/%d", (int)tid);
  return access(path, F_OK) == 0;
}

/* A lock word that names a thread that does not exist was not left by a
 * death (the kernel clears the tid then): another process wrote it, and no
 * one will ever release it. */
static int forged(const ss_lock_line *l) {
  int32_t tid = ss_mutex_word_tid(l);
  return tid != 0 && !thread_exists(tid);
}

/* How long one wait of an unbounded lock lasts before the lock word is
 * checked for a forged owner. */
#define SS_LOCK_CHECK_NS (100 * 1000 * 1000LL)

int ss_mutex_lock(ss_lock_line *l, int64_t timeout_ns) {
  pthread_mutex_t *m = &l->m.mutex;
  int rc;
  if (!kind_ok(m)) return SS_ECORRUPT;
  if (timeout_ns == 0) {
    rc = pthread_mutex_trylock(m);
    if (rc == EBUSY) rc = ETIMEDOUT;
  } else {
    int64_t deadline = ss_deadline_ns(timeout_ns);
    for (;;) {
      int64_t now = ss_monotonic_ns();
      int64_t until = deadline - now > SS_LOCK_CHECK_NS ? now + SS_LOCK_CHECK_NS : deadline;
      struct timespec ts = {(time_t)(until / SS_NS_PER_S), (long)(until % SS_NS_PER_S)};
      rc = pthread_mutex_clocklock(m, CLOCK_MONOTONIC, &ts);
      if (rc != ETIMEDOUT) break;
      if (forged(l)) return SS_ECORRUPT;
      if (until >= deadline) break;
    }
  }
  int status;
  switch (rc) {
    case 0: status = SS_OK; break;
    case EOWNERDEAD: status = SS_EOWNERDEAD; break;
    case ETIMEDOUT: return SS_ETIMEDOUT;
    case EDEADLK: return SS_EDEADLK;
    default: return rc;
  }
  SS_CRASH_POINT("lock.acquired");
  atomic_store_explicit(&l->owner_pid, ss_self_pid(), memory_order_relaxed);
  atomic_store_explicit(&l->owner_tid, ss_self_tid(), memory_order_relaxed);
  atomic_fetch_add_explicit(&l->acquisitions, 1, memory_order_relaxed);
  return status;
}

void ss_mutex_consistent(ss_lock_line *l) { pthread_mutex_consistent(&l->m.mutex); }

int ss_mutex_unlock(ss_lock_line *l) {
  if (atomic_load_explicit(&l->owner_tid, memory_order_relaxed) != ss_self_tid() ||
      atomic_load_explicit(&l->owner_pid, memory_order_relaxed) != ss_self_pid())
    return SS_ENOTOWNER;
  atomic_store_explicit(&l->owner_tid, 0, memory_order_relaxed);
  atomic_store_explicit(&l->owner_pid, 0, memory_order_relaxed);
  SS_CRASH_POINT("lock.unlock");
  int rc = pthread_mutex_unlock(&l->m.mutex);
  return rc == 0 ? SS_OK : (rc == EPERM ? SS_ENOTOWNER : rc);
}
