/* The robust cross-process lock: a process-shared, robust, error-checking
 * pthread mutex in the segment. If its owner dies, the kernel's robust-futex
 * list hands it to the next acquirer at once with EOWNERDEAD. */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

#include "internal.h"

static int32_t gettid_(void) { return (int32_t)syscall(SYS_gettid); }

/* A writer that never pauses would win the mutex back every time (it is not
 * fair), starving a reader that fell back to it. Writers therefore step
 * aside while a reader waits, for at most this long. */
#define SS_READER_PRIORITY_NS 2000000

static int lock_mutex(ss_segment *seg, int64_t timeout_ns);

int ss_lock(ss_segment *seg, int64_t timeout_ns) {
  SS_ATOMIC(uint32_t) *readers = &seg->hdr->notify.lock_readers;
  if (atomic_load_explicit(readers, memory_order_relaxed) > 0) {
    if (timeout_ns == 0) return SS_ETIMEDOUT; /* a trylock defers to them */
    int64_t until = ss_monotonic_ns() + SS_READER_PRIORITY_NS;
    while (atomic_load_explicit(readers, memory_order_relaxed) > 0 && ss_monotonic_ns() < until)
      sched_yield();
    /* Still announced after a whole step-aside: a live reader waiting for
     * a free lock would have taken it by now, so this is a reader that died
     * while waiting. Forget it, or every write would pay the step-aside. */
    if (atomic_load_explicit(readers, memory_order_relaxed) > 0)
      atomic_store_explicit(readers, 0, memory_order_relaxed);
  }
  return lock_mutex(seg, timeout_ns);
}

int ss_lock_for_read(ss_segment *seg, int64_t timeout_ns) {
  SS_ATOMIC(uint32_t) *readers = &seg->hdr->notify.lock_readers;
  atomic_fetch_add_explicit(readers, 1, memory_order_relaxed);
  int rc = lock_mutex(seg, timeout_ns);
  /* Saturating: a writer may have reset the word meanwhile (see ss_lock). */
  uint32_t v = atomic_load_explicit(readers, memory_order_relaxed);
  while (v > 0 && !atomic_compare_exchange_weak_explicit(readers, &v, v - 1,
                                                         memory_order_relaxed,
                                                         memory_order_relaxed)) {
  }
  return rc;
}

static int lock_mutex(ss_segment *seg, int64_t timeout_ns) {
  pthread_mutex_t *m = &seg->hdr->lock.m.mutex;
  int rc;
  if (timeout_ns < 0) {
    rc = pthread_mutex_lock(m);
  } else if (timeout_ns == 0) {
    rc = pthread_mutex_trylock(m);
    if (rc == EBUSY) rc = ETIMEDOUT;
  } else {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t ns = ts.tv_nsec + timeout_ns % SS_NS_PER_S;
    ts.tv_sec += (time_t)(timeout_ns / SS_NS_PER_S + ns / SS_NS_PER_S);
    ts.tv_nsec = (long)(ns % SS_NS_PER_S);
    rc = pthread_mutex_clocklock(m, CLOCK_MONOTONIC, &ts);
  }
  int status = SS_OK;
  switch (rc) {
    case 0: break;
    case ETIMEDOUT: return SS_ETIMEDOUT;
    case EDEADLK: return SS_EDEADLK;
    case EOWNERDEAD:
      /* The previous owner died holding the lock. If it died mid-write the
       * frame is half-copied: mark it abandoned before anyone reads it. */
      ss_mark_abandoned(seg);
      pthread_mutex_consistent(m);
      status = SS_EOWNERDEAD;
      break;
    default: return rc;
  }
  ss_lock_line *l = &seg->hdr->lock;
  atomic_store_explicit(&l->owner_pid, (int32_t)getpid(), memory_order_relaxed);
  atomic_store_explicit(&l->owner_tid, gettid_(), memory_order_relaxed);
  atomic_fetch_add_explicit(&l->acquisitions, 1, memory_order_relaxed);
  return status;
}

int ss_unlock(ss_segment *seg) {
  ss_lock_line *l = &seg->hdr->lock;
  if (atomic_load_explicit(&l->owner_tid, memory_order_relaxed) != gettid_() ||
      atomic_load_explicit(&l->owner_pid, memory_order_relaxed) != (int32_t)getpid())
    return SS_ENOTOWNER;
  atomic_store_explicit(&l->owner_tid, 0, memory_order_relaxed);
  atomic_store_explicit(&l->owner_pid, 0, memory_order_relaxed);
  int rc = pthread_mutex_unlock(&l->m.mutex);
  return rc == 0 ? SS_OK : (rc == EPERM ? SS_ENOTOWNER : rc);
}
