/* The lock of a stream (or loader pool), judged by lease, not by tid, so
 * that holders and waiters in different PID namespaces (two pid-1
 * processes that share /dev/shm) never take each other's lock for their
 * own, and a holder that dies in another namespace is taken over.
 * Protocol and its labels: docs/ABI.md, "Stream lock by lease".
 *
 * One word, lock_lease: 0 free, else the holder handle's lease number
 * (liveness.c) and bit 63 when somebody sleeps on lock_wake. Uncontended:
 * one CAS to lock, one exchange to unlock, no system call. Contended:
 * waiters sleep on lock_wake in chunks of at most SS_LEASE_LOCK_CHUNK_NS and
 * test the holder's lease between them; a dead lease is taken over by CAS,
 * and the caller repairs (SS_EOWNERDEAD). This file knows nothing about
 * streams beyond the two words and the owner words of the lock line. */
#define _GNU_SOURCE
#include <errno.h>

#include "core_helpers.h"

#define SS_LOCK_WAITERS (1ull << 63)
/* How long a waiter sleeps before it tests the holder's lease again: the
 * most a dead holder keeps the lock (a death wakes nobody). */
#define SS_LEASE_LOCK_CHUNK_NS (10 * 1000 * 1000LL)

static SS_ATOMIC(uint64_t) *lock_word(const ss_segment *seg) {
  return &seg->hdr->stream.lock_lease;
}

static int acquired(ss_segment *seg, int status) {
  ss_lock_line *l = &seg->hdr->lock;
  SS_CRASH_POINT("lock.acquired");
  atomic_store_explicit(&l->owner_pid, ss_self_pid(), memory_order_relaxed);
  atomic_store_explicit(&l->owner_tid, ss_self_tid(), memory_order_relaxed);
  atomic_fetch_add_explicit(&l->acquisitions, 1, memory_order_relaxed);
  return status;
}

static int lock_slow(ss_segment *seg, uint64_t mine, int64_t timeout_ns) {
  SS_ATOMIC(uint64_t) *word = lock_word(seg);
  SS_ATOMIC(uint32_t) *wake = &seg->hdr->stream.lock_wake;
  int64_t deadline = ss_deadline_ns(timeout_ns);
  uint64_t keep = 0; /* after a sleep: others may sleep too, keep the bit */
  for (;;) {
    /* SYNC POINT (sl2): the wake sequence before the word, so a release
     * whose exchange this caller does not see yet bumps it later. */
    uint32_t s = atomic_load_explicit(wake, memory_order_acquire);
    uint64_t w = atomic_load_explicit(word, memory_order_relaxed);
    if (w == 0) {
      if (atomic_compare_exchange_strong_explicit(word, &w, mine | keep, memory_order_acquire,
                                                  memory_order_relaxed))
        return acquired(seg, SS_OK);
      continue;
    }
    uint64_t holder = w & ~SS_LOCK_WAITERS;
    if (holder == mine || ss_lease_is_ours(holder)) {
      /* This process's lease (this handle's or another's): the owner
       * words were written in this process, so its tid means this thread
       * or another thread here, which waits. */
      if (atomic_load_explicit(&seg->hdr->lock.owner_tid, memory_order_relaxed) == ss_self_tid())
        return SS_EDEADLK;
    } else if (ss_lease_alive(seg, holder) == 0) {
      /* SYNC POINT (sl3): the holder's lease is gone for good (l2): take
       * the word over by CAS, so of two takers one wins and a holder that
       * released meanwhile is not displaced. */
      if (atomic_compare_exchange_strong_explicit(word, &w, mine | (w & SS_LOCK_WAITERS),
                                                  memory_order_acquire, memory_order_relaxed))
        return acquired(seg, SS_EOWNERDEAD);
      continue;
    }
    int64_t left = ss_remaining_ns(deadline);
    if (timeout_ns == 0 || left == 0) return SS_ETIMEDOUT;
    /* SYNC POINT (sl4): announce the sleep on the word itself, so the
     * holder's release (sl5) reads it with the release. */
    if (!(w & SS_LOCK_WAITERS) &&
        !atomic_compare_exchange_strong_explicit(word, &w, w | SS_LOCK_WAITERS,
                                                 memory_order_relaxed, memory_order_relaxed))
      continue;
    keep = SS_LOCK_WAITERS;
    ss_futex_wait(wake, s,
                  left < 0 || left > SS_LEASE_LOCK_CHUNK_NS ? SS_LEASE_LOCK_CHUNK_NS : left);
  }
}

int ss_lease_lock(ss_segment *seg, int64_t timeout_ns) {
  uint64_t mine = ss_lease_mine(seg);
  if (!mine) return EBADF; /* no fd to hold a lease on: not a handle of ours */
  uint64_t expected = 0;
  /* SYNC POINT (sl1): the claim. Acquire: the previous holder's stores,
   * released by its exchange (sl5), are visible to this holder. */
  if (atomic_compare_exchange_strong_explicit(lock_word(seg), &expected, mine, memory_order_acquire,
                                              memory_order_relaxed))
    return acquired(seg, SS_OK);
  return lock_slow(seg, mine, timeout_ns);
}

int ss_lease_unlock(ss_segment *seg) {
  ss_lock_line *l = &seg->hdr->lock;
  SS_ATOMIC(uint64_t) *word = lock_word(seg);
  uint64_t mine = ss_lease_self(seg);
  uint64_t w = atomic_load_explicit(word, memory_order_relaxed);
  if (!mine || (w & ~SS_LOCK_WAITERS) != mine ||
      atomic_load_explicit(&l->owner_tid, memory_order_relaxed) != ss_self_tid())
    return SS_ENOTOWNER;
  atomic_store_explicit(&l->owner_tid, 0, memory_order_relaxed);
  atomic_store_explicit(&l->owner_pid, 0, memory_order_relaxed);
  SS_CRASH_POINT("lock.unlock");
  /* SYNC POINT (sl5): the release, reading the waiters bit with it. */
  uint64_t old = atomic_exchange_explicit(word, 0, memory_order_release);
  if (old & SS_LOCK_WAITERS) {
    atomic_fetch_add_explicit(&seg->hdr->stream.lock_wake, 1, memory_order_release);
    ss_futex_wake(&seg->hdr->stream.lock_wake);
  }
  return SS_OK;
}

int ss_lease_lock_holder_alive(const ss_segment *seg) {
  uint64_t w = atomic_load_explicit(lock_word(seg), memory_order_acquire) & ~SS_LOCK_WAITERS;
  return w ? ss_lease_alive(seg, w) : -1;
}

void ss_stream_leases_get(const ss_segment *seg, ss_stream_leases *out) {
  out->creator_alive = out->lock_holder_alive = out->any_held = -1;
  if (!ss_lease_locked(&seg->id)) return;
  /* The creator's lease is in the private copy of the identity: checked
   * once at open, like the rest of it. */
  out->creator_alive = ss_lease_alive(seg, seg->id.creator_lease);
  out->lock_holder_alive = ss_lease_lock_holder_alive(seg);
  out->any_held = ss_lease_any(seg);
}
