/* A reader's turn at a stream's lock: a snapshot reader
 * whose optimistic copies keep being lapped names its lease in
 * read_pending, and writers do not take the lock while a live reader's
 * claim stands, so the reader gets the lock after at most one write per
 * writer thread. The word is judged by lease (liveness.c), so a reader that
 * dies holding it holds nobody up. Protocol, bound and labels: docs/ABI.md,
 * "Reader's turn". Sleepers share lock_wake with the lock's own waiters
 * (lease_lock.c): a wake meant for the other is one more loop. */
#define _GNU_SOURCE
#include "core_helpers.h"

#define SS_TURN_WAITERS (1ull << 63)
/* How long a sleeper waits before it tests the claim's lease again: the
 * most a dead reader's claim holds a writer (a death wakes nobody). */
#define SS_TURN_CHUNK_NS (10 * 1000 * 1000LL)

static SS_ATOMIC(uint64_t) *turn_word(const ss_segment *seg) {
  return &seg->hdr->stream.read_pending;
}

static void wake(ss_segment *seg) {
  atomic_fetch_add_explicit(&seg->hdr->stream.lock_wake, 1, memory_order_release);
  ss_futex_wake(&seg->hdr->stream.lock_wake);
}

/* The claim standing now, 0 if none: a claim whose reader's lease is gone
 * (l2) is cleared on the way, by CAS from the word naming it, so a live
 * reader's later claim is never cleared. *s: lock_wake, loaded before. */
static uint64_t standing(ss_segment *seg, uint32_t *s) {
  SS_ATOMIC(uint64_t) *word = turn_word(seg);
  for (;;) {
    /* SYNC POINT (rp4): lock_wake before the claim it tests, as (sl2): a
     * give-back this caller does not see yet bumps it later. */
    *s = atomic_load_explicit(&seg->hdr->stream.lock_wake, memory_order_acquire);
    uint64_t p = atomic_load_explicit(word, memory_order_seq_cst);
    if (!p || ss_lease_alive(seg, p & ~SS_TURN_WAITERS) != 0) return p;
    if (atomic_compare_exchange_strong_explicit(word, &p, 0, memory_order_relaxed,
                                                memory_order_relaxed) &&
        (p & SS_TURN_WAITERS))
      wake(seg);
  }
}

/* Sleep until the claim p changes, at most `left` ns (-1: a whole chunk):
 * the waiters bit first (rp4), so the give-back wakes us. */
static void nap(ss_segment *seg, uint64_t p, uint32_t s, int64_t left) {
  if (!(p & SS_TURN_WAITERS) &&
      !atomic_compare_exchange_strong_explicit(turn_word(seg), &p, p | SS_TURN_WAITERS,
                                               memory_order_relaxed, memory_order_relaxed))
    return; /* the claim changed: the caller looks again */
  ss_futex_wait(&seg->hdr->stream.lock_wake, s,
                left < 0 || left > SS_TURN_CHUNK_NS ? SS_TURN_CHUNK_NS : left);
}

int ss_turn_gate_slow(ss_segment *seg, int64_t timeout_ns) {
  int64_t deadline = ss_deadline_ns(timeout_ns);
  for (;;) {
    uint32_t s;
    uint64_t p = standing(seg, &s);
    if (!p) return SS_OK;
    int64_t left = ss_remaining_ns(deadline);
    if (timeout_ns == 0 || left == 0) return SS_ETIMEDOUT; /* a trylock defers to it */
    nap(seg, p, s, left);
  }
}

int ss_turn_claim(ss_segment *seg, uint64_t *mine) {
  uint64_t lease = ss_lease_mine(seg);
  if (!lease) return -1; /* no lease to name: the caller locks without a turn */
  SS_ATOMIC(uint64_t) *word = turn_word(seg);
  for (;;) {
    uint32_t s;
    uint64_t p = standing(seg, &s);
    if (p) return 0; /* another live reader's turn */
    /* SYNC POINT (rp1): the claim, seq_cst: one total order with every
     * writer's gate load (rp2), so each writer thread passes its gate at
     * most once more. */
    if (atomic_compare_exchange_strong_explicit(word, &p, lease, memory_order_seq_cst,
                                                memory_order_relaxed)) {
      *mine = lease;
      SS_CRASH_POINT("read.claimed");
      return 1;
    }
  }
}

void ss_turn_wait(ss_segment *seg, int64_t deadline) {
  uint32_t s;
  uint64_t p = standing(seg, &s);
  int64_t left = ss_remaining_ns(deadline);
  if (p && left != 0) nap(seg, p, s, left);
}

void ss_turn_give_back(ss_segment *seg, uint64_t mine) {
  SS_ATOMIC(uint64_t) *word = turn_word(seg);
  uint64_t p = atomic_load_explicit(word, memory_order_relaxed);
  /* SYNC POINT (rp3): the give-back, reading the waiters bit with it; only
   * this reader's own claim (a word that names another was never ours). */
  while ((p & ~SS_TURN_WAITERS) == mine) {
    if (atomic_compare_exchange_weak_explicit(word, &p, 0, memory_order_release,
                                              memory_order_relaxed)) {
      if (p & SS_TURN_WAITERS) wake(seg);
      return;
    }
  }
}
