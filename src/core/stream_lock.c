/* The stream lock: the lock by lease (lease_lock.c, which works across PID
 * namespaces), plus what is stream-specific about it: the takeover after a
 * dead owner repairs the stream (publish.c) before anything else, and
 * writers step aside for readers that fell back to the lock. */
#define _GNU_SOURCE
#include <sched.h>

#include "core_helpers.h"

/* A writer that never pauses would win the lock back every time (it is not
 * fair), starving a reader that fell back to it. Writers therefore step
 * aside while a reader waits, for at most this long. */
#define SS_READER_PRIORITY_NS 2000000

static int lock_and_repair(ss_segment *seg, int64_t timeout_ns) {
  int rc = ss_lease_lock(seg, timeout_ns);
  if (rc == SS_EOWNERDEAD) {
    /* The previous owner died holding the lock, maybe mid-write: repair
     * before anyone reads (docs/ABI.md, "Repair after a death"). A death
     * during the repair leaves the word naming a dead lease for the next
     * one. */
    SS_CRASH_POINT("lock.takeover");
    ss_stream_repair(seg);
  }
  return rc;
}

int ss_lock(ss_segment *seg, int64_t timeout_ns) {
  /* A file that shrank under the handle: nothing more is written, and the
   * answer is the same whatever the header's words say now (a trylock
   * deferring to announced readers answered SS_ETIMEDOUT; the fuzzer's
   * fuzz_live, corpus regress-lock-after-truncation). */
  if (ss_mapping_lost(seg)) return SS_ECORRUPT;
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
  int rc = lock_and_repair(seg, timeout_ns);
  if ((rc == SS_OK || rc == SS_EOWNERDEAD) && !ss_identity_same(seg)) {
    /* A header rewritten after open: nothing is written into a segment
     * whose other users may size it differently (docs/ABI.md, "The header
     * is trusted once"). */
    ss_lease_unlock(seg);
    return SS_ECORRUPT;
  }
  return rc;
}

static int owner_died(const ss_segment *seg) { return ss_lease_lock_holder_alive(seg) == 0; }

uint32_t ss_read_state(const ss_segment *seg) {
  uint32_t state = atomic_load_explicit(&seg->hdr->pub.state, memory_order_acquire);
  /* A write in flight whose lock owner died: the next ss_lock (a reader's
   * ss_check_writer included) takes the lock over and marks the frame
   * abandoned (lock_and_repair). Say so now, without doing it. */
  if (state == SS_STATE_VALID && ss_write_in_flight(seg) && owner_died(seg))
    return SS_STATE_ABANDONED;
  return state;
}

int ss_lock_for_read(ss_segment *seg, int64_t timeout_ns) {
  SS_ATOMIC(uint32_t) *readers = &seg->hdr->notify.lock_readers;
  atomic_fetch_add_explicit(readers, 1, memory_order_relaxed);
  int rc = lock_and_repair(seg, timeout_ns);
  /* Saturating: a writer may have reset the word meanwhile (see ss_lock). */
  uint32_t v = atomic_load_explicit(readers, memory_order_relaxed);
  while (v > 0 && !atomic_compare_exchange_weak_explicit(readers, &v, v - 1, memory_order_relaxed,
                                                         memory_order_relaxed)) {
  }
  return rc;
}

/* A write under the lock that ran into a truncated file (src/core/guard.c)
 * is reported when the lock is released: every write ends here. */
int ss_unlock(ss_segment *seg) { return ss_guarded(seg, ss_lease_unlock(seg)); }
