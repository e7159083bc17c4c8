/* The stream lock: the lock by lease (lease_lock.c, which works across PID
 * namespaces), plus what is stream-specific about it: the takeover after a
 * dead owner repairs the stream (publish.c) before anything else, and
 * writers wait while a reader that fell back to it has its turn: a writer
 * that never pauses would win the lock back every time (it is not fair)
 * and starve that reader (read_pending.c, docs/ABI.md "Reader's turn"). */
#define _GNU_SOURCE
#include "core_helpers.h"

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
  /* SYNC POINT (rp2): the gate, seq_cst: in one total order with a reader's
   * claim (rp1), so a writer passes it at most once after the claim
   * (docs/ABI.md, "Reader's turn"). Uncontended: this one plain load. */
  if (__builtin_expect(
          atomic_load_explicit(&seg->hdr->stream.read_pending, memory_order_seq_cst) != 0, 0)) {
    int64_t deadline = ss_deadline_ns(timeout_ns);
    int rc = ss_turn_gate_slow(seg, timeout_ns);
    if (rc != SS_OK) return rc;
    timeout_ns = ss_remaining_ns(deadline); /* the lock gets what the gate left */
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
  /* No gate: the reader's turn (read_pending.c) holds the writers back. */
  return lock_and_repair(seg, timeout_ns);
}

/* A write under the lock that ran into a truncated file (src/core/guard.c)
 * is reported when the lock is released: every write ends here. */
int ss_unlock(ss_segment *seg) { return ss_guarded(seg, ss_lease_unlock(seg)); }
