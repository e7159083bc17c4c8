/* Publish and snapshot: a seqlock over the payload slot. Writers hold the
 * stream lock, so seq/count/frame_id/write_time have a single writer. */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

/* A torn copy is retried this many times before the reader takes the lock:
 * a writer faster than our copy can tear every try, the lock cannot. */
#define SS_READ_TRIES 4
/* How long a reader spins on an odd seq (a write in flight) before it
 * falls back to the lock, which also detects a dead writer. */
#define SS_ODD_SPIN_NS 50000

void ss_write_begin(ss_segment *seg) {
  ss_publish_line *p = &seg->hdr->pub;
  uint64_t s = atomic_load_explicit(&p->seq, memory_order_relaxed);
  atomic_store_explicit(&p->writer_pid, (int32_t)getpid(), memory_order_relaxed);
  atomic_store_explicit(&p->seq, s | 1, memory_order_relaxed);
  /* SYNC POINT: odd seq is ordered before every payload store, so a reader
   * whose copy saw any of them re-reads seq as changed. */
  atomic_thread_fence(memory_order_release);
}

/* SYNC POINT: pairs with the waiter's fence in ss_wait_count: wake_seq is
 * bumped (release) after the words a waiter checks, then a seq_cst fence
 * orders it before the read of waiters. */
static void wake_waiters(ss_segment *seg) {
  ss_notify_line *nl = &seg->hdr->notify;
  atomic_fetch_add_explicit(&nl->wake_seq, 1, memory_order_release);
  atomic_thread_fence(memory_order_seq_cst);
  if (atomic_load_explicit(&nl->waiters, memory_order_relaxed) > 0) ss_wake_all(seg);
}

static void publish_and_wake(ss_segment *seg, uint64_t s) {
  /* SYNC POINT: even seq with release publishes payload and metadata. */
  atomic_store_explicit(&seg->hdr->pub.seq, (s | 1) + 1, memory_order_release);
  wake_waiters(seg);
}

void ss_write_end(ss_segment *seg, const uint64_t *frame_id) {
  ss_publish_line *p = &seg->hdr->pub;
  uint64_t s = atomic_load_explicit(&p->seq, memory_order_relaxed);
  if (frame_id)
    atomic_store_explicit(&p->frame_id, *frame_id, memory_order_relaxed);
  atomic_store_explicit(&p->write_time_ns, ss_realtime_ns(), memory_order_relaxed);
  atomic_store_explicit(&p->state, SS_STATE_VALID, memory_order_relaxed);
  uint64_t c = atomic_load_explicit(&p->count, memory_order_relaxed);
  atomic_store_explicit(&p->count, c + 1, memory_order_relaxed);
  publish_and_wake(seg, s);
}

void ss_write_abort(ss_segment *seg) {
  ss_publish_line *p = &seg->hdr->pub;
  uint64_t s = atomic_load_explicit(&p->seq, memory_order_relaxed);
  atomic_store_explicit(&p->state, SS_STATE_ABORTED, memory_order_relaxed);
  atomic_fetch_add_explicit(&p->aborted, 1, memory_order_relaxed);
  publish_and_wake(seg, s); /* waiters learn the stream is inconsistent */
}

void ss_mark_abandoned(ss_segment *seg) {
  ss_publish_line *p = &seg->hdr->pub;
  uint64_t s = atomic_load_explicit(&p->seq, memory_order_relaxed);
  if (!(s & 1)) return; /* died holding the lock but not mid-write */
  atomic_store_explicit(&p->state, SS_STATE_ABANDONED, memory_order_relaxed);
  atomic_fetch_add_explicit(&p->aborted, 1, memory_order_relaxed);
  publish_and_wake(seg, s);
}

/* A GPU stream without CPU mirror has no CPU slot to copy to or from. */
static int slotless(const ss_segment *seg) {
  uint32_t f = seg->hdr->id.flags;
  return (f & SS_FLAG_GPU) && !(f & SS_FLAG_CPU_MIRROR);
}

void ss_write_locked(ss_segment *seg, const void *src, size_t n, const uint64_t *frame_id) {
  if (slotless(seg)) return;
  ss_write_begin(seg);
  memcpy(ss_slot(seg, 0), src, n);
  ss_write_end(seg, frame_id);
}

void ss_clear_locked(ss_segment *seg) {
  if (slotless(seg)) return;
  ss_write_begin(seg);
  memset(ss_slot(seg, 0), 0, seg->hdr->id.payload_bytes);
  ss_write_end(seg, NULL);
}

static void load_info(const ss_publish_line *p, ss_pubinfo *info) {
  info->count = atomic_load_explicit(&p->count, memory_order_relaxed);
  info->frame_id = atomic_load_explicit(&p->frame_id, memory_order_relaxed);
  info->write_time_ns = atomic_load_explicit(&p->write_time_ns, memory_order_relaxed);
  info->state = atomic_load_explicit(&p->state, memory_order_relaxed);
}

static int copy_owned(ss_segment *seg, void *dst, size_t n, ss_pubinfo *info) {
  load_info(&seg->hdr->pub, info);
  if (info->state != SS_STATE_VALID) return SS_EINCONSISTENT;
  memcpy(dst, ss_slot(seg, 0), n);
  return SS_OK;
}

int ss_read(ss_segment *seg, void *dst, size_t n, int64_t timeout_ns, int holds_lock,
            ss_pubinfo *info) {
  if (slotless(seg)) return SS_EKIND;
  if (holds_lock) return copy_owned(seg, dst, n, info);
  ss_publish_line *p = &seg->hdr->pub;
  const uint8_t *src = ss_slot(seg, 0);
  int64_t odd_until = 0;
  for (int tries = 0; tries < SS_READ_TRIES;) {
    uint64_t s1 = atomic_load_explicit(&p->seq, memory_order_acquire);
    if (s1 & 1) {
      int64_t now = ss_monotonic_ns();
      if (!odd_until) odd_until = now + (timeout_ns >= 0 && timeout_ns < SS_ODD_SPIN_NS
                                         ? timeout_ns : SS_ODD_SPIN_NS);
      if (now >= odd_until) break;
      ss_cpu_relax();
      continue;
    }
    load_info(p, info);
    if (info->state == SS_STATE_VALID) memcpy(dst, src, n);
    /* SYNC POINT: pairs with the writer's release fence in ss_write_begin;
     * a copy that saw any store of a newer write sees seq changed. */
    atomic_thread_fence(memory_order_acquire);
    uint64_t s2 = atomic_load_explicit(&p->seq, memory_order_relaxed);
    if (s1 == s2) return info->state == SS_STATE_VALID ? SS_OK : SS_EINCONSISTENT;
    tries++;
  }
  if (seg->readonly == 2) {
    /* A read-only mapping cannot take the lock: keep retrying until the
     * deadline. */
    int64_t deadline = timeout_ns < 0 ? INT64_MAX : ss_monotonic_ns() + timeout_ns;
    while (ss_monotonic_ns() < deadline) {
      uint64_t s1 = atomic_load_explicit(&p->seq, memory_order_acquire);
      if (s1 & 1) { sched_yield(); continue; }
      load_info(p, info);
      if (info->state == SS_STATE_VALID) memcpy(dst, src, n);
      atomic_thread_fence(memory_order_acquire);
      if (atomic_load_explicit(&p->seq, memory_order_relaxed) == s1)
        return info->state == SS_STATE_VALID ? SS_OK : SS_EINCONSISTENT;
    }
    return SS_ETIMEDOUT;
  }
  /* Fallback that always finishes: the writer cannot run while we copy, and
   * a dead writer's lock is handed to us with its frame marked abandoned. */
  int rc = ss_lock(seg, timeout_ns);
  if (rc != SS_OK && rc != SS_EOWNERDEAD) return rc;
  rc = copy_owned(seg, dst, n, info);
  ss_unlock(seg);
  return rc;
}
