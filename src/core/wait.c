/* Waiting for a publication: spin briefly, then sleep on the futex.
 * Protocol and labels: docs/ABI.md, "Wait". */
#define _GNU_SOURCE
#include <stdlib.h>

#include "internal.h"

/* On a 2-core machine a blocking wake costs ~120 us while a spinning reader
 * sees a write in < 1 us; 50 us of spinning covers a producer that answers
 * promptly without burning a core for a slow one. See BENCHMARKS.md. */
#define SS_DEFAULT_SPIN_NS 50000
/* Longest a waiter keeps spinning past its budget while a write is in
 * flight (a write_view held open must not burn a core for long). */
#define SS_IN_FLIGHT_SPIN_NS 10000000
/* The learned part of the policy: after this many spins in a row that ended
 * asleep, a handle's waits sleep at once (its producer is slower than the
 * budget, or shares its core, where a spinner only delays it), except for
 * probes that spin the whole budget to find out whether spinning pays
 * again: the first after SS_SPIN_PROBE_MIN skipped waits, each failed probe
 * doubling the gap up to SS_SPIN_PROBE_MAX (so a failing probe costs one
 * budget per ~1000 waits). A spin that sees its publication resets it all. */
/* And the other way: a wait that slept but saw its publication a little
 * after the budget ran out, yet long after it began (a responder that
 * copies 4 MiB for ~330 us before it answers), paid a wake-up (~70-200 us
 * on an idle VM core) that a longer spin saves. So when such a wait took
 * at least SS_SPIN_LEARN_MIN budgets and 1.5x it is at most
 * SS_SPIN_LEARN_MAX budgets, the handle's next budget is that 1.5x. Short
 * waits (a producer on our core, a 64 B exchange) never extend the budget;
 * a learned budget that fails is re-learned from that wait without
 * counting as a miss. */
#define SS_SPIN_LEARN_MIN 4
#define SS_SPIN_LEARN_MAX 20
#define SS_SPIN_MISSES_TO_SKIP 2
#define SS_SPIN_PROBE_MIN 16
#define SS_SPIN_PROBE_MAX 1024

int64_t ss_default_spin_ns(void) {
  static int64_t cached = -1;
  if (cached < 0) {
    const char *env = getenv("SHMSTREAM_SPIN_US");
    cached = env && *env ? (int64_t)(strtod(env, NULL) * 1000.0) : SS_DEFAULT_SPIN_NS;
    if (cached < 0) cached = 0;
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

int ss_wait_count(ss_segment *seg, uint64_t after, int64_t timeout_ns, int64_t spin_ns,
                  uint64_t *count_out) {
  return ss_wait_newer(seg, after, timeout_ns, spin_ns, 0, count_out);
}

/* Whether this wait spins (the learned policy above). spin_misses counts
 * the spins in a row that ended asleep; past SS_SPIN_MISSES_TO_SKIP it also
 * sets the probe gap, 16 << (misses - 2). Relaxed counters: two threads
 * waiting on one handle at once only blur the heuristic. */
static int spin_pays(ss_segment *seg) {
  const memory_order r = memory_order_relaxed;
  uint32_t misses = atomic_load_explicit(&seg->spin_misses, r);
  if (misses < SS_SPIN_MISSES_TO_SKIP) return 1;
  uint32_t shift = misses - SS_SPIN_MISSES_TO_SKIP;
  uint32_t gap = shift >= 6 ? SS_SPIN_PROBE_MAX : SS_SPIN_PROBE_MIN << shift;
  uint32_t skipped = atomic_load_explicit(&seg->spin_skipped, r) + 1;
  atomic_store_explicit(&seg->spin_skipped, skipped >= gap ? 0 : skipped, r);
  return skipped >= gap; /* the probe */
}

/* extended: the spin ran a learned budget longer than the caller's. */
static void spin_ended(ss_segment *seg, int seen, int extended) {
  const memory_order r = memory_order_relaxed;
  if (!seen && extended) {
    atomic_store_explicit(&seg->spin_learned_ns, 0, r);
    return;
  }
  uint32_t m = atomic_load_explicit(&seg->spin_misses, r);
  atomic_store_explicit(&seg->spin_misses, seen ? 0 : (m < 64 ? m + 1 : m), r);
}

/* A wait that spun (the caller's budget spin_ns) slept and saw its
 * publication `waited` ns after it began: the learned budget. */
static void spin_learn(ss_segment *seg, int64_t spin_ns, int64_t waited) {
  int64_t want = waited + waited / 2;
  int ok = waited >= SS_SPIN_LEARN_MIN * spin_ns && want <= SS_SPIN_LEARN_MAX * spin_ns;
  atomic_store_explicit(&seg->spin_learned_ns, ok ? want : 0, memory_order_relaxed);
}

int ss_wait_newer(ss_segment *seg, uint64_t after, int64_t timeout_ns, int64_t spin_ns,
                  int ignore_failed, uint64_t *count_out) {
  ss_publish_line *p = &seg->hdr->pub;
  if (ss_mapping_lost(seg)) return SS_ECORRUPT;
  uint64_t c = atomic_load_explicit(&p->count, memory_order_acquire);
  if (c > after) { *count_out = c; return SS_OK; }
  if (spin_ns > 0 && timeout_ns != 0 && !spin_pays(seg)) spin_ns = 0;
  int64_t budget = spin_ns; /* the caller's, before any learned extension */
  if (spin_ns > 0) {
    int64_t learned = atomic_load_explicit(&seg->spin_learned_ns, memory_order_relaxed);
    if (learned > spin_ns) spin_ns = learned;
  }
  int64_t now = ss_monotonic_ns(), start = now;
  int64_t deadline = ss_deadline_ns(timeout_ns);
  int64_t spin_end = now + (spin_ns < timeout_ns || timeout_ns < 0 ? spin_ns : timeout_ns);
  /* A write in flight means a publication is imminent: a big copy (4 MiB
   * takes ~350 us here) outlasts the spin budget, and sleeping then costs a
   * wake-up (~100 us on an idle VM core). So spinning goes on while the
   * writer is copying, up to SS_IN_FLIGHT_SPIN_NS. */
  int64_t flight_end = spin_ns > 0 ? now + SS_IN_FLIGHT_SPIN_NS : now;
  if (flight_end > deadline) flight_end = deadline;
  /* Only `pause` between checks: sched_yield let a producer on our core
   * run in theory, but under CFS each call could hand a whole time slice to
   * any other task, and a reader on the core of a full-speed writer read
   * ~260 frames/s instead of ~77 000 (docs/API.md, "Spinning"). A producer
   * on our core is the learned policy's case instead. */
  int spun = spin_ns > 0;
  for (unsigned i = 1;; i++) {
    if (now >= spin_end && (now >= flight_end || !ss_write_in_flight(seg))) break;
    ss_cpu_relax();
    c = atomic_load_explicit(&p->count, memory_order_acquire);
    if (c > after) {
      if (spun) spin_ended(seg, 1, spin_ns > budget);
      *count_out = c;
      return SS_OK;
    }
    if ((i & 15) == 0) {
      if (cancelled(seg)) return SS_ECANCELLED;
      if (ss_mapping_lost(seg)) return SS_ECORRUPT;
      if (!ignore_failed && inconsistent(p)) return SS_EINCONSISTENT;
      now = ss_monotonic_ns();
    }
  }
  if (spun && now < deadline) spin_ended(seg, 0, spin_ns > budget);
  /* Announce ourselves for the whole sleep: a sleeper slot (z1, z2) that a
   * writer can check for liveness, or, if all 64 are taken, the waiters
   * count around each futex wait. */
  int slot = seg->readonly == SS_ACCESS_FOREIGN ? SS_POLL_SLOT : ss_sleeper_claim(seg);
  int rc = sleep_until(seg, after, deadline, slot, ignore_failed, count_out);
  ss_sleeper_release(seg, slot);
  if (spun && rc == SS_OK) spin_learn(seg, budget, ss_monotonic_ns() - start);
  return rc;
}

/* The sleeping half of ss_wait_count, between claiming and releasing the
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
      if (c > after) { *count_out = c; return SS_OK; }
      return SS_ECANCELLED;
    }
    int64_t left = deadline == INT64_MAX ? -1 : deadline - now;
    if (slot == SS_POLL_SLOT && (left < 0 || left > SS_POLL_NAP_NS)) left = SS_POLL_NAP_NS;
    ss_futex_wait(&nl->wake_seq, w, left);
    if (counted) atomic_fetch_sub_explicit(&nl->waiters, 1, memory_order_relaxed);
    c = atomic_load_explicit(&p->count, memory_order_acquire);
    if (c > after) { *count_out = c; return SS_OK; }
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
                  int ignore_failed, const ss_snapshot_args *a, ss_pubinfo *info,
                  ss_frame *frame) {
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
