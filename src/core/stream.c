/* Publish and snapshot over N payload slots. Writers hold the stream lock,
 * so every word here has a single writer. The publish line's seq guards the
 * metadata (which slot, count, frame id, time, state); each slot's own seq
 * guards its bytes. The writer fills the slot after the published one, so a
 * reader copying the published slot is torn only if the writer laps it
 * (N-1 whole writes during one copy). */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

/* A torn copy is retried this many times before the reader takes the lock:
 * a writer that laps every copy cannot lap the lock. */
#define SS_READ_TRIES 4
/* How long a reader spins on a write in flight (odd seq) before it falls
 * back to the lock, which also detects a dead writer. A reader waits for
 * the write in flight so that it returns the newest frame, as pyshmem does. */
#define SS_ODD_SPIN_NS 50000

static uint32_t slot_count(const ss_segment *seg) { return seg->hdr->id.slot_count; }

uint32_t ss_published_slot(const ss_segment *seg) {
  return atomic_load_explicit(&seg->hdr->pub.slot, memory_order_relaxed) % slot_count(seg);
}

static uint32_t writing_slot(const ss_segment *seg) {
  return (ss_published_slot(seg) + 1) % slot_count(seg);
}

uint32_t ss_write_begin(ss_segment *seg) {
  uint32_t w = writing_slot(seg);
  SS_ATOMIC(uint64_t) *sseq = &seg->hdr->slots.seq[w];
  uint64_t ss = atomic_load_explicit(sseq, memory_order_relaxed);
  atomic_store_explicit(&seg->hdr->pub.writer_pid, (int32_t)getpid(), memory_order_relaxed);
  atomic_store_explicit(sseq, ss | 1, memory_order_relaxed);
  /* SYNC POINT (a): the slot's odd seq is ordered before every payload
   * store, so a reader whose copy saw any of them re-reads it as changed. */
  atomic_thread_fence(memory_order_release);
  return w;
}

int ss_write_in_flight(const ss_segment *seg) {
  return (int)(atomic_load_explicit(&seg->hdr->slots.seq[writing_slot(seg)],
                                    memory_order_acquire) & 1);
}

/* SYNC POINT (c): pairs with the waiter's fence in ss_wait_count: wake_seq
 * is bumped (release) after the words a waiter checks, then a seq_cst fence
 * orders it before the read of waiters. */
static void wake_waiters(ss_segment *seg) {
  ss_notify_line *nl = &seg->hdr->notify;
  atomic_fetch_add_explicit(&nl->wake_seq, 1, memory_order_release);
  atomic_thread_fence(memory_order_seq_cst);
  if (atomic_load_explicit(&nl->waiters, memory_order_relaxed) > 0) ss_wake_all(seg);
}

/* Ends the write in flight: under the publish seqlock (odd only for these
 * few stores, so readers rarely meet it) the slot's seq goes even and the
 * metadata is replaced. */
static void publish(ss_segment *seg, uint32_t state, const uint64_t *frame_id) {
  ss_publish_line *p = &seg->hdr->pub;
  uint32_t w = writing_slot(seg);
  SS_ATOMIC(uint64_t) *sseq = &seg->hdr->slots.seq[w];
  uint64_t s = atomic_load_explicit(&p->seq, memory_order_relaxed);
  atomic_store_explicit(&p->seq, s + 1, memory_order_relaxed);
  /* SYNC POINT (b1): the publish seq goes odd before the slot's seq goes
   * even and before the metadata stores. A reader that sees the slot's new
   * even seq (acquire) then sees the publish seq moved, so it never pairs
   * the old metadata with the new bytes (with one slot, the slot being
   * finished is the published one). */
  atomic_thread_fence(memory_order_release);
  uint64_t ss = atomic_load_explicit(sseq, memory_order_relaxed);
  atomic_store_explicit(sseq, (ss | 1) + 1, memory_order_release);
  atomic_store_explicit(&p->state, state, memory_order_relaxed);
  if (state == SS_STATE_VALID) {
    if (frame_id) atomic_store_explicit(&p->frame_id, *frame_id, memory_order_relaxed);
    atomic_store_explicit(&p->write_time_ns, ss_realtime_ns(), memory_order_relaxed);
    uint64_t c = atomic_load_explicit(&p->count, memory_order_relaxed);
    atomic_store_explicit(&p->count, c + 1, memory_order_relaxed);
    atomic_store_explicit(&p->slot, w, memory_order_relaxed);
  } else {
    /* The slot that was being filled keeps garbage and is not published;
     * the state tells readers no consistent frame exists until the next
     * good write (pyshmem's rule). */
    atomic_fetch_add_explicit(&p->aborted, 1, memory_order_relaxed);
  }
  /* SYNC POINT (b2): even publish seq with release publishes the metadata. */
  atomic_store_explicit(&p->seq, s + 2, memory_order_release);
  wake_waiters(seg);
}

void ss_write_end(ss_segment *seg, const uint64_t *frame_id) {
  publish(seg, SS_STATE_VALID, frame_id);
}

void ss_write_abort(ss_segment *seg) { publish(seg, SS_STATE_ABORTED, NULL); }

void ss_mark_abandoned(ss_segment *seg) {
  if (!ss_write_in_flight(seg)) return; /* died holding the lock, not mid-write */
  publish(seg, SS_STATE_ABANDONED, NULL);
}

/* A GPU stream without CPU mirror has no CPU slot to copy to or from. */
static int slotless(const ss_segment *seg) {
  uint32_t f = seg->hdr->id.flags;
  return (f & SS_FLAG_GPU) && !(f & SS_FLAG_CPU_MIRROR);
}

void ss_write_locked(ss_segment *seg, const void *src, size_t n, const uint64_t *frame_id) {
  if (slotless(seg)) return;
  uint32_t w = ss_write_begin(seg);
  memcpy(ss_slot(seg, w), src, n);
  ss_write_end(seg, frame_id);
}

void ss_clear_locked(ss_segment *seg) {
  if (slotless(seg)) return;
  uint32_t w = ss_write_begin(seg);
  memset(ss_slot(seg, w), 0, seg->hdr->id.payload_bytes);
  ss_write_end(seg, NULL);
}

static void load_info(const ss_publish_line *p, ss_pubinfo *info) {
  info->count = atomic_load_explicit(&p->count, memory_order_relaxed);
  info->frame_id = atomic_load_explicit(&p->frame_id, memory_order_relaxed);
  info->write_time_ns = atomic_load_explicit(&p->write_time_ns, memory_order_relaxed);
  info->state = atomic_load_explicit(&p->state, memory_order_relaxed);
}

/* With the lock held: the published frame's metadata and slot, and a copy
 * of it unless dst is NULL (a zero-copy view). */
static int copy_owned(ss_segment *seg, void *dst, size_t n, ss_pubinfo *info, ss_frame *frame) {
  load_info(&seg->hdr->pub, info);
  if (info->state != SS_STATE_VALID) return SS_EINCONSISTENT;
  uint32_t slot = ss_published_slot(seg);
  frame->slot = slot;
  frame->slot_seq = atomic_load_explicit(&seg->hdr->slots.seq[slot], memory_order_acquire);
  if (dst) memcpy(dst, ss_slot(seg, slot), n);
  return SS_OK;
}

/* One optimistic attempt. Returns SS_OK / SS_EINCONSISTENT when done,
 * 1 if the write in flight at the first attempt (*arrival, the publish seq
 * then) is not published yet, 2 if the attempt was torn. */
static int try_read(ss_segment *seg, void *dst, size_t n, ss_pubinfo *info, uint64_t *arrival,
                    ss_frame *frame) {
  ss_publish_line *p = &seg->hdr->pub;
  uint64_t s1 = atomic_load_explicit(&p->seq, memory_order_acquire);
  if (s1 & 1) return 2;
  load_info(p, info);
  uint32_t slot = ss_published_slot(seg);
  SS_ATOMIC(uint64_t) *sseq = &seg->hdr->slots.seq[slot];
  uint64_t ss1 = atomic_load_explicit(sseq, memory_order_acquire);
  int in_flight = ss_write_in_flight(seg);
  /* SYNC POINT: pairs with (b1): if the publish seq has not moved, the
   * metadata and the slot's seq belong to one publication. */
  atomic_thread_fence(memory_order_acquire);
  if (atomic_load_explicit(&p->seq, memory_order_relaxed) != s1) return 2;
  if (info->state != SS_STATE_VALID) return SS_EINCONSISTENT;
  if (in_flight || (ss1 & 1)) {
    /* Wait for the write that was in flight when the read began, so the
     * read returns the newest frame begun before the call (pyshmem's
     * freshness rule). Once that write is published (s1 moved), a newer
     * write in flight fills another slot and does not hold us up; a
     * writer that never pauses cannot starve the reader. */
    if (*arrival == UINT64_MAX) *arrival = s1;
    if (s1 == *arrival || (ss1 & 1)) return 1;
  }
  frame->slot = slot;
  frame->slot_seq = ss1;
  if (!dst) return SS_OK; /* a view: the caller checks ss_view_valid later */
  memcpy(dst, ss_slot(seg, slot), n);
  /* SYNC POINT: pairs with (a); a copy that saw any store of a newer write
   * to this slot (the writer lapped us) sees the slot's seq changed. */
  atomic_thread_fence(memory_order_acquire);
  return atomic_load_explicit(sseq, memory_order_relaxed) == ss1 ? SS_OK : 2;
}

/* The published frame, copied into dst (or located only, dst NULL). */
static int snapshot(ss_segment *seg, void *dst, size_t n, int64_t timeout_ns, int holds_lock,
                    ss_pubinfo *info, ss_frame *frame) {
  if (slotless(seg)) return SS_EKIND;
  if (holds_lock) return copy_owned(seg, dst, n, info, frame);
  int64_t odd_until = 0;
  uint64_t arrival = UINT64_MAX;
  for (int torn = 0; torn < SS_READ_TRIES;) {
    int rc = try_read(seg, dst, n, info, &arrival, frame);
    if (rc <= 0) return rc;
    if (rc == 2) { torn++; continue; }
    int64_t now = ss_monotonic_ns();
    if (!odd_until)
      odd_until = now + (timeout_ns >= 0 && timeout_ns < SS_ODD_SPIN_NS ? timeout_ns : SS_ODD_SPIN_NS);
    if (now >= odd_until) break;
    ss_cpu_relax();
  }
  if (seg->readonly == 2) {
    /* A read-only mapping cannot take the lock: keep retrying until the
     * deadline. */
    int64_t deadline = timeout_ns < 0 ? INT64_MAX : ss_monotonic_ns() + timeout_ns;
    while (ss_monotonic_ns() < deadline) {
      int rc = try_read(seg, dst, n, info, &arrival, frame);
      if (rc <= 0) return rc;
      sched_yield();
    }
    return SS_ETIMEDOUT;
  }
  /* Fallback that always finishes: no writer runs while we copy, and a dead
   * writer's lock is handed to us with its frame marked abandoned. */
  int rc = ss_lock_for_read(seg, timeout_ns);
  if (rc != SS_OK && rc != SS_EOWNERDEAD) return rc;
  rc = copy_owned(seg, dst, n, info, frame);
  ss_unlock(seg);
  return rc;
}

int ss_read(ss_segment *seg, void *dst, size_t n, int64_t timeout_ns, int holds_lock,
            ss_pubinfo *info) {
  ss_frame frame;
  return snapshot(seg, dst, n, timeout_ns, holds_lock, info, &frame);
}

int ss_view_begin(ss_segment *seg, int64_t timeout_ns, int holds_lock, ss_pubinfo *info,
                  ss_frame *frame) {
  return snapshot(seg, NULL, 0, timeout_ns, holds_lock, info, frame);
}

int ss_view_valid(const ss_segment *seg, const ss_frame *frame) {
  /* SYNC POINT: pairs with (a): if the caller's loads of the slot saw any
   * store of a newer write, this acquire fence makes the odd (or newer)
   * slot seq visible here. */
  atomic_thread_fence(memory_order_acquire);
  return atomic_load_explicit(&seg->hdr->slots.seq[frame->slot], memory_order_relaxed) ==
         frame->slot_seq;
}
