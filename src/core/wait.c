/* Waiting for a publication: spin briefly, then sleep on the futex.
 * Protocol and labels: docs/ABI.md, "Wait". */
#define _GNU_SOURCE
#include <stdlib.h>

#include "core_helpers.h"

/* The spin cap of waits that name none: SHMSTREAM_SPIN_US if set, else -1
 * (the policy's own cap, docs/waiting.md). */
int64_t ss_default_spin_ns(void) {
  static int64_t cached = -2;
  if (cached == -2) {
    const char *env = getenv("SHMSTREAM_SPIN_US");
    int64_t v = env && *env ? (int64_t)(strtod(env, NULL) * 1000.0) : -1;
    cached = env && *env && v < 0 ? 0 : v;
  }
  return cached;
}

void ss_wake_all(ss_segment *seg) { ss_futex_wake(&seg->hdr->notify.wake_seq); }

void ss_cancel(ss_segment *seg) {
  atomic_store_explicit(&seg->cancelled, 1, memory_order_release);
  /* Spurious for other handles' waiters: they re-check and sleep again. */
  if (seg->hdr) ss_wake_all(seg);
}

static int cancelled(ss_segment *seg) {
  return atomic_load_explicit(&seg->cancelled, memory_order_acquire);
}

/* A waiter gives up with SS_EINCONSISTENT when the stream's last write was
 * aborted or abandoned: no newer consistent frame is coming until a good
 * write, and the caller must hear why rather than time out. */
static int inconsistent(const ss_publish_line *p) {
  /* SYNC POINT (w1): the state with the publish seq even around it, so a
   * state seen mid-window (a write replacing it) is not taken for the
   * published one. */
  uint64_t s = atomic_load_explicit(&p->seq, memory_order_acquire);
  uint32_t st = atomic_load_explicit(&p->state, memory_order_relaxed);
  atomic_thread_fence(memory_order_acquire);
  return st != SS_STATE_VALID && !(s & 1) &&
         atomic_load_explicit(&p->seq, memory_order_relaxed) == s;
}

int ss_check_writer(ss_segment *seg) {
  ss_publish_line *p = &seg->hdr->pub;
  if (inconsistent(p)) return SS_EINCONSISTENT;
  if (!ss_write_in_flight(seg) || seg->readonly == SS_ACCESS_FOREIGN) return SS_OK;
  /* A write is in flight. If its writer died, the lock is owner-dead: a
   * trylock takes it over and marks the frame abandoned. A live writer
   * keeps the lock and we leave at once. */
  int rc = ss_lock(seg, 0);
  if (rc == SS_OK || rc == SS_EOWNERDEAD) ss_unlock(seg);
  return inconsistent(p) ? SS_EINCONSISTENT : SS_OK;
}

/* A reader whose mapping is read-only (someone else's segment shared
 * read-only) cannot announce itself: nobody will wake it, so it sleeps in
 * short naps and re-checks. */
#define SS_POLL_SLOT (-2)
#define SS_POLL_NAP_NS 1000000LL

static int sleep_until(ss_segment *seg, uint64_t after, int64_t deadline, int slot,
                       int ignore_failed, uint64_t *count_out);
static int sleep_announced(ss_segment *seg, uint64_t after, int64_t until, int ignore_failed,
                           uint64_t *count_out, uint64_t *asleep_at);
static void record_sleep(ss_segment *seg, ss_spin *sp, int rc, uint64_t asleep_at);

int ss_wait_count(ss_segment *seg, uint64_t after, int64_t timeout_ns, int64_t spin_ns,
                  uint64_t *count_out) {
  return ss_wait_newer(seg, after, timeout_ns, spin_ns, 0, count_out);
}

int ss_wait_newer(ss_segment *seg, uint64_t after, int64_t timeout_ns, int64_t spin_ns,
                  int ignore_failed, uint64_t *count_out) {
  ss_publish_line *p = &seg->hdr->pub;
  if (ss_mapping_lost(seg)) return SS_ECORRUPT;
  uint64_t c = atomic_load_explicit(&p->count, memory_order_acquire);
  if (c > after) {
    *count_out = c;
    return SS_OK;
  }
  /* spin_ns is the cap: the policy (docs/waiting.md) picks the budget, and
   * whether the wait naps before it spins. */
  ss_spin sp;
  ss_spin_begin(&seg->wait, spin_ns, timeout_ns, ss_monotonic_ns(), &sp);
  int64_t now = sp.start;
  uint64_t asleep_at;
  if (sp.nap_end > sp.start) {
    int rc = sleep_announced(seg, after, sp.nap_end, ignore_failed, count_out, &asleep_at);
    if (rc == SS_OK) {
      record_sleep(seg, &sp, rc, asleep_at);
      return rc;
    }
    if (rc != SS_ETIMEDOUT) return rc;
    now = ss_monotonic_ns();
    ss_spin_nap_over(&sp, now);
  }
  /* Past the budget, a write in flight means the publication is a copy
   * away: the spin goes on, up to the cap. Only `pause` between checks:
   * sched_yield would let a producer on our core run in theory, but under
   * CFS each call could hand a whole time slice to any other task (a reader
   * on the core of a full-speed writer read ~260 frames/s instead of
   * ~77 000, docs/API.md, "Spinning"); a producer on our core is the
   * contention case of the policy instead. */
  for (unsigned i = 1; sp.end > sp.start; i++) {
    if (now >= sp.end && (now >= sp.cap_end || !ss_write_in_flight(seg))) break;
    ss_cpu_relax();
    c = atomic_load_explicit(&p->count, memory_order_acquire);
    if (c > after) {
      ss_spin_end(&seg->wait, &sp, SS_WAIT_CAUGHT, ss_monotonic_ns(), -1);
      *count_out = c;
      return SS_OK;
    }
    if ((i & 15) == 0) {
      if (cancelled(seg)) return SS_ECANCELLED;
      if (ss_mapping_lost(seg)) return SS_ECORRUPT;
      if (!ignore_failed && inconsistent(p)) return SS_EINCONSISTENT;
      now = ss_monotonic_ns();
      if (ss_spin_preempted(&seg->wait, &sp, now)) break;
    }
  }
  int rc = sleep_announced(seg, after, sp.deadline, ignore_failed, count_out, &asleep_at);
  if (rc == SS_OK || rc == SS_ETIMEDOUT) record_sleep(seg, &sp, rc, asleep_at);
  return rc;
}

/* Sleep until count > after or `until`, announced for the whole sleep: a
 * sleeper slot (z1, z2) that a writer can check for liveness, or, if all 64
 * are taken, the waiters count around each futex wait. *asleep_at: when it
 * went to sleep (CLOCK_REALTIME, the publications' clock). */
static int sleep_announced(ss_segment *seg, uint64_t after, int64_t until, int ignore_failed,
                           uint64_t *count_out, uint64_t *asleep_at) {
  int slot = seg->readonly == SS_ACCESS_FOREIGN ? SS_POLL_SLOT : ss_sleeper_claim(seg);
  *asleep_at = ss_realtime_ns();
  int rc = sleep_until(seg, after, until, slot, ignore_failed, count_out);
  ss_sleeper_release(seg, slot);
  return rc;
}

/* The end of a wait that slept (rc SS_OK or SS_ETIMEDOUT), for the policy:
 * how long after the publication it woke, from the publication's
 * CLOCK_REALTIME stamp (a racing newer write only makes it shorter); only
 * for one published while the wait was going to sleep or asleep, which is a
 * wake-up (one that came before found its count at once). */
static void record_sleep(ss_segment *seg, ss_spin *sp, int rc, uint64_t asleep_at) {
  int64_t woke = -1;
  if (rc == SS_OK) {
    uint64_t at = atomic_load_explicit(&seg->hdr->pub.write_time_ns, memory_order_relaxed);
    uint64_t rt = ss_realtime_ns();
    woke = at > asleep_at && rt > at ? (int64_t)(rt - at) : -1;
  }
  ss_spin_end(&seg->wait, sp, rc == SS_OK ? SS_WAIT_WOKEN : SS_WAIT_TIMED_OUT, ss_monotonic_ns(),
              woke);
}

/* The sleeping half of sleep_announced, between claiming and releasing the
 * sleeper slot. */
static int sleep_until(ss_segment *seg, uint64_t after, int64_t deadline, int slot,
                       int ignore_failed, uint64_t *count_out) {
  ss_publish_line *p = &seg->hdr->pub;
  ss_notify_line *nl = &seg->hdr->notify;
  for (;;) {
    if (cancelled(seg)) return SS_ECANCELLED;
    if (ss_mapping_lost(seg)) return SS_ECORRUPT;
    int64_t now = ss_monotonic_ns();
    if (now >= deadline) return SS_ETIMEDOUT;
    /* SYNC POINT (c): the waker bumps wake_seq (release) after publishing the
     * count, then fences and reads the sleeper bits and waiters. We read
     * wake_seq (acquire), are announced (slot bit, or waiters), fence, and
     * re-check the count: either the waker sees us and wakes us, or we see
     * its count, or wake_seq has moved and FUTEX_WAIT returns at once. No
     * lost wake-up. */
    int counted = slot == -1; /* no slot: announced in the waiters count */
    uint32_t w = atomic_load_explicit(&nl->wake_seq, memory_order_acquire);
    if (counted) atomic_fetch_add_explicit(&nl->waiters, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
    uint64_t c = atomic_load_explicit(&p->count, memory_order_relaxed);
    if (c > after || cancelled(seg)) {
      if (counted) atomic_fetch_sub_explicit(&nl->waiters, 1, memory_order_relaxed);
      if (c > after) {
        *count_out = c;
        return SS_OK;
      }
      return SS_ECANCELLED;
    }
    int64_t left = deadline == INT64_MAX ? -1 : deadline - now;
    if (slot == SS_POLL_SLOT && (left < 0 || left > SS_POLL_NAP_NS)) left = SS_POLL_NAP_NS;
    ss_futex_wait(&nl->wake_seq, w, left);
    if (counted) atomic_fetch_sub_explicit(&nl->waiters, 1, memory_order_relaxed);
    c = atomic_load_explicit(&p->count, memory_order_acquire);
    if (c > after) {
      *count_out = c;
      return SS_OK;
    }
    if (!ignore_failed && inconsistent(p)) return SS_EINCONSISTENT;
  }
}

/* ---- read_new: wait for a newer publication, then take it ---------------- */

/* One step of read_new: wait until count > after (then take a snapshot), or
 * until the deadline; between waits, a writer that died mid-write is taken
 * over (the stream repaired) and reported (unless ignore_failed: then the
 * wait goes on for the next good write). If a writer raced between the
 * wait and the snapshot, the snapshot may be the same publication: wait
 * again. */
int ss_read_newer(ss_segment *seg, uint64_t after, int64_t timeout_ns, int64_t spin_ns,
                  int ignore_failed, const ss_snapshot_args *a, ss_pubinfo *info, ss_frame *frame) {
  int64_t deadline = ss_deadline_ns(timeout_ns);
  if (spin_ns < 0) spin_ns = ss_default_spin_ns();
  for (;;) {
    uint64_t c;
    int rc = ss_wait_newer(seg, after, ss_remaining_ns(deadline), spin_ns, ignore_failed, &c);
    if (rc == SS_ETIMEDOUT && ss_check_writer(seg) == SS_EINCONSISTENT && !ignore_failed)
      return SS_EINCONSISTENT;
    if (rc) return rc;
    rc = ss_snapshot(seg, ss_remaining_ns(deadline), a, info, frame);
    if (rc != SS_OK || info->count > after) return rc;
    spin_ns = 0; /* spin only before the first sleep */
  }
}

/* read_new into host memory; complete: the last complete publication,
 * waiting past failed writes (ss_read_new_complete). */
static int host_read_new(ss_segment *seg, void *dst, size_t n, uint64_t after, int64_t timeout_ns,
                         int64_t spin_ns, int complete, ss_pubinfo *info) {
  if (ss_slotless(seg)) return SS_EKIND;
  ss_host_dst d = {dst, n};
  ss_snapshot_args a = {ss_copy_to_host, &d, 0, complete};
  ss_frame frame;
  return ss_read_newer(seg, after, timeout_ns, spin_ns, complete, &a, info, &frame);
}

int ss_read_new(ss_segment *seg, void *dst, size_t n, uint64_t after, int64_t timeout_ns,
                int64_t spin_ns, ss_pubinfo *info) {
  return host_read_new(seg, dst, n, after, timeout_ns, spin_ns, 0, info);
}

int ss_read_new_complete(ss_segment *seg, void *dst, size_t n, uint64_t after, int64_t timeout_ns,
                         int64_t spin_ns, ss_pubinfo *info) {
  return host_read_new(seg, dst, n, after, timeout_ns, spin_ns, 1, info);
}

int ss_read_new_view(ss_segment *seg, uint64_t after, int64_t timeout_ns, int64_t spin_ns,
                     ss_pubinfo *info, ss_frame *frame) {
  if (ss_slotless(seg)) return SS_EKIND;
  ss_snapshot_args a = {NULL, NULL, 0, 0};
  return ss_read_newer(seg, after, timeout_ns, spin_ns, 0, &a, info, frame);
}
