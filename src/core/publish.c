/* The writer's side of a stream: publish over N payload slots, abort, and
 * the repair a lock takeover performs after a writer's death. Writers hold
 * the stream lock, so every word here has a single writer. The publish
 * line's seq guards the metadata (which slot, count, frame id, time,
 * state); each slot's own seq guards its bytes. The writer fills the slot
 * after the published one, so a reader copying the published slot is torn
 * only if the writer laps it (N-1 whole writes during one copy). On a
 * history stream each slot also has a record (count, frame id, time of the
 * publication it holds), written inside the slot's own seqlock window.
 * Protocol and labels: docs/ABI.md, "Publish", "Repair after a death" and
 * "History". */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>

#include "core_helpers.h"

static uint32_t slot_count(const ss_segment *seg) { return seg->id.slot_count; }

static SS_ATOMIC(uint64_t) *slot_seq(ss_segment *seg, uint32_t i) { return ss_slot_seq(seg, i); }

uint32_t ss_published_slot(const ss_segment *seg) {
  return atomic_load_explicit(&seg->hdr->pub.slot, memory_order_relaxed) % slot_count(seg);
}

uint32_t ss_writing_slot(const ss_segment *seg) {
  return (ss_published_slot(seg) + 1) % slot_count(seg);
}

int ss_slotless(const ss_segment *seg) {
  uint32_t f = seg->id.flags;
  return (f & SS_FLAG_GPU) && !(f & SS_FLAG_CPU_MIRROR);
}

/* Parity comes from the value, never from an increment: a seqlock left odd
 * by a dead process cannot invert the meaning of later writes. */
static void make_odd(SS_ATOMIC(uint64_t) *seq) {
  uint64_t v = atomic_load_explicit(seq, memory_order_relaxed);
  atomic_store_explicit(seq, v | 1, memory_order_relaxed);
}

static void make_even(SS_ATOMIC(uint64_t) *seq) {
  uint64_t v = atomic_load_explicit(seq, memory_order_relaxed);
  atomic_store_explicit(seq, (v | 1) + 1, memory_order_release);
}

uint32_t ss_write_begin(ss_segment *seg) {
  uint32_t w = ss_writing_slot(seg);
  ss_publish_line *p = &seg->hdr->pub;
  atomic_store_explicit(&p->writer_pid, ss_self_pid(), memory_order_relaxed);
  atomic_store_explicit(&p->writer_start_ticks, ss_self_start_ticks(), memory_order_relaxed);
  make_odd(slot_seq(seg, w));
  /* SYNC POINT (a): the slot's odd seq is ordered before every payload
   * store, so a reader whose copy saw any of them re-reads it as changed. */
  atomic_thread_fence(memory_order_release);
  SS_CRASH_POINT("stream.a");
  return w;
}

int ss_writer_alive(const ss_segment *seg) {
  const ss_publish_line *p = &seg->hdr->pub;
  int32_t pid;
  uint64_t ticks;
  /* The pid and its start time are two stores (write_begin): read them
   * until the pid is the same on both sides of the start time. */
  do {
    pid = atomic_load_explicit(&p->writer_pid, memory_order_acquire);
    ticks = atomic_load_explicit(&p->writer_start_ticks, memory_order_acquire);
  } while (atomic_load_explicit(&p->writer_pid, memory_order_acquire) != pid);
  return pid == 0 || pid == ss_self_pid() || ss_proc_alive(pid, ticks);
}

int ss_write_in_flight(const ss_segment *seg) {
  const ss_header *h = seg->hdr;
  return (
      int)((atomic_load_explicit(&h->pub.seq, memory_order_acquire) |
            atomic_load_explicit(ss_slot_seq(seg, ss_writing_slot(seg)), memory_order_acquire)) &
           1);
}

/* SYNC POINT (c): pairs with the waiter's fence in ss_wait_count: wake_seq
 * is bumped (release) after the words a waiter checks, then a seq_cst fence
 * orders it before the read of waiters. */
static void wake_waiters(ss_segment *seg) {
  ss_notify_line *nl = &seg->hdr->notify;
  atomic_fetch_add_explicit(&nl->wake_seq, 1, memory_order_release);
  atomic_thread_fence(memory_order_seq_cst);
  SS_CRASH_POINT("stream.c");
  uint64_t sleepers = atomic_load_explicit(&nl->sleepers, memory_order_relaxed);
  if ((sleepers | atomic_load_explicit(&nl->waiters, memory_order_relaxed)) == 0) return;
  /* Somebody sleeps, or did: a sleeper killed asleep leaves its bit, and
   * then nobody wakes. Heal so later writes make no syscall. */
  if (ss_futex_wake(&nl->wake_seq) == 0 && sleepers) ss_heal_sleepers(seg);
}

/* SYNC POINT (u): the publish line as it is, into the undo line, before
 * the window opens: what a repair rolls back to. Lock holders only. */
static void save_undo(ss_segment *seg) {
  ss_publish_line *p = &seg->hdr->pub;
  ss_undo_line *u = &seg->hdr->stream.undo;
  const memory_order r = memory_order_relaxed;
  atomic_store_explicit(&u->count, atomic_load_explicit(&p->count, r), r);
  atomic_store_explicit(&u->frame_id, atomic_load_explicit(&p->frame_id, r), r);
  atomic_store_explicit(&u->write_time_ns, atomic_load_explicit(&p->write_time_ns, r), r);
  atomic_store_explicit(&u->aborted, atomic_load_explicit(&p->aborted, r), r);
  atomic_store_explicit(&u->slot, atomic_load_explicit(&p->slot, r), r);
  atomic_store_explicit(&u->state, atomic_load_explicit(&p->state, r), r);
}

/* SYNC POINT (h1): a history stream's record of slot w, stored while the
 * slot's seq is odd (since a): the release store that makes it even
 * publishes the record with the payload. count 0 says the slot holds no
 * publication (an aborted write left garbage there). */
static void store_record(ss_segment *seg, uint32_t w, uint64_t count, uint64_t frame_id,
                         uint64_t write_time_ns) {
  ss_slot_record *r = ss_slot_record_at(seg, w);
  atomic_store_explicit(&r->count, count, memory_order_relaxed);
  atomic_store_explicit(&r->frame_id, frame_id, memory_order_relaxed);
  atomic_store_explicit(&r->write_time_ns, write_time_ns, memory_order_relaxed);
  SS_CRASH_POINT("stream.record");
}

/* Ends the write in flight: under the publish seqlock (odd only for these
 * few stores, so readers rarely meet it) the slot's seq goes even and the
 * metadata is replaced. */
static void publish(ss_segment *seg, uint32_t state, const ss_publish_meta *m) {
  ss_publish_line *p = &seg->hdr->pub;
  uint32_t w = ss_writing_slot(seg);
  /* The new metadata, computed before the window opens (the clock too),
   * so that the window holds stores only. */
  uint64_t c = atomic_load_explicit(&p->count, memory_order_relaxed);
  /* The count never wraps (a reader waiting for count > c would wait for
   * ever): it stops at UINT64_MAX, 2^63 writes past any SS_MAX_COUNT. */
  uint64_t next = c < UINT64_MAX ? c + 1 : c;
  uint64_t count = m->count > next ? m->count : next;
  uint64_t frame_id = m->frame_id ? *m->frame_id
                                  : atomic_load_explicit(&p->frame_id, memory_order_relaxed);
  uint64_t write_time_ns = 0;
  if (state == SS_STATE_VALID)
    write_time_ns = m->write_time_ns ? m->write_time_ns : ss_realtime_ns();
  save_undo(seg);
  SS_CRASH_POINT("stream.u");
  make_odd(&p->seq);
  /* SYNC POINT (b1): the publish seq goes odd before the slot's seq goes
   * even and before the metadata stores. A reader that sees the slot's new
   * even seq (acquire) then sees the publish seq moved, so it never pairs
   * the old metadata with the new bytes (with one slot, the slot being
   * finished is the published one). */
  atomic_thread_fence(memory_order_release);
  SS_CRASH_POINT("stream.b1");
  if (seg->history)
    store_record(seg, w, state == SS_STATE_VALID ? count : 0, frame_id, write_time_ns);
  make_even(slot_seq(seg, w));
  SS_CRASH_POINT("stream.slot_even");
  atomic_store_explicit(&p->state, state, memory_order_relaxed);
  if (state == SS_STATE_VALID) {
    atomic_store_explicit(&p->frame_id, frame_id, memory_order_relaxed);
    atomic_store_explicit(&p->write_time_ns, write_time_ns, memory_order_relaxed);
    SS_CRASH_POINT("stream.meta");
    atomic_store_explicit(&p->count, count, memory_order_relaxed);
    SS_CRASH_POINT("stream.count");
    atomic_store_explicit(&p->slot, w, memory_order_relaxed);
  } else {
    /* The slot that was being filled keeps garbage and is not published;
     * the state tells readers no consistent frame exists until the next
     * good write (pyshmem's rule). */
    atomic_fetch_add_explicit(&p->aborted, 1, memory_order_relaxed);
  }
  /* SYNC POINT (b2): even publish seq with release publishes the metadata. */
  make_even(&p->seq);
  SS_CRASH_POINT("stream.b2");
  wake_waiters(seg);
}

void ss_write_end_ex(ss_segment *seg, const ss_publish_meta *meta) {
  publish(seg, SS_STATE_VALID, meta);
}

void ss_write_end(ss_segment *seg, const uint64_t *frame_id) {
  ss_publish_meta m = {frame_id, 0, 0};
  publish(seg, SS_STATE_VALID, &m);
}

void ss_write_abort(ss_segment *seg) {
  ss_publish_meta m = {NULL, 0, 0};
  publish(seg, SS_STATE_ABORTED, &m);
}

int ss_stream_repair(ss_segment *seg) {
  ss_publish_line *p = &seg->hdr->pub;
  ss_undo_line *u = &seg->hdr->stream.undo;
  uint32_t n = slot_count(seg);
  if (!(atomic_load_explicit(&p->seq, memory_order_relaxed) & 1)) {
    int filling = 0;
    for (uint32_t i = 0; i < n; i++)
      filling |= (int)(atomic_load_explicit(slot_seq(seg, i), memory_order_relaxed) & 1);
    if (!filling) return 0; /* died between writes, or after (b2) */
    /* Died filling a slot: the metadata is untouched, so it is what the
     * repair keeps. */
    save_undo(seg);
  }
  /* From here on `undo` holds the line before the window and is not
   * written again: a repairer that dies is followed by one that computes
   * the same values. */
  make_odd(&p->seq);
  /* SYNC POINT (r1): as (b1): readers see the window open before any
   * metadata or slot seq changes. */
  atomic_thread_fence(memory_order_release);
  SS_CRASH_POINT("repair.r1");
  const memory_order r = memory_order_relaxed;
  atomic_store_explicit(&p->count, atomic_load_explicit(&u->count, r), r);
  atomic_store_explicit(&p->frame_id, atomic_load_explicit(&u->frame_id, r), r);
  atomic_store_explicit(&p->write_time_ns, atomic_load_explicit(&u->write_time_ns, r), r);
  atomic_store_explicit(&p->slot, atomic_load_explicit(&u->slot, r), r);
  if (seg->history) {
    /* The slot the dead writer filled may already be even with a whole
     * frame and its record; it was never published, so it must not be
     * history: empty its record (R2h), under its own seqlock. */
    uint32_t w = (atomic_load_explicit(&u->slot, r) + 1) % n;
    make_odd(slot_seq(seg, w));
    /* SYNC POINT (r2h): the slot's seq moves before its record does, so a
     * reader that validated the record before sees the seq changed. */
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&ss_slot_record_at(seg, w)->count, 0, r);
    SS_CRASH_POINT("repair.history");
  }
  for (uint32_t i = 0; i < n; i++)
    if (atomic_load_explicit(slot_seq(seg, i), memory_order_relaxed) & 1)
      make_even(slot_seq(seg, i));
  SS_CRASH_POINT("repair.r3");
  atomic_store_explicit(&p->state, SS_STATE_ABANDONED, r);
  atomic_store_explicit(&p->aborted, atomic_load_explicit(&u->aborted, r) + 1, r);
  SS_CRASH_POINT("repair.r4");
  /* SYNC POINT (r5): as (b2). */
  make_even(&p->seq);
  wake_waiters(seg); /* sleepers learn of the abandoned frame at once */
  return 1;
}

/* Half the payload, then the crash point, then the rest: a writer killed
 * there leaves a slot that is half new, half old. Only when a point is
 * armed; otherwise one memcpy. */
static void copy_payload(uint8_t *dst, const void *src, size_t n) {
  if (ss_fault_active()) {
    memcpy(dst, src, n / 2);
    SS_CRASH_POINT("stream.copy");
    memcpy(dst + n / 2, (const uint8_t *)src + n / 2, n - n / 2);
    return;
  }
  memcpy(dst, src, n);
}

void ss_write_locked_ex(ss_segment *seg, const void *src, size_t n, const ss_publish_meta *meta) {
  if (ss_slotless(seg)) return;
  uint32_t w = ss_write_begin(seg);
  copy_payload(ss_slot(seg, w), src, n);
  publish(seg, SS_STATE_VALID, meta);
}

int ss_publish_count_check(const ss_segment *seg, uint64_t count, uint64_t *current) {
  *current = atomic_load_explicit(&seg->hdr->pub.count, memory_order_relaxed);
  if (count > SS_MAX_COUNT) return ERANGE;
  if (count && count <= *current) return EINVAL;
  return SS_OK;
}

int ss_publish_locked(ss_segment *seg, const void *src, size_t n, const ss_publish_meta *meta,
                      uint64_t *count) {
  int rc = ss_publish_count_check(seg, meta->count, count);
  if (rc) return rc;
  ss_write_locked_ex(seg, src, n, meta);
  *count = atomic_load_explicit(&seg->hdr->pub.count, memory_order_relaxed);
  return SS_OK;
}

void ss_write_locked(ss_segment *seg, const void *src, size_t n, const uint64_t *frame_id) {
  ss_publish_meta m = {frame_id, 0, 0};
  ss_write_locked_ex(seg, src, n, &m);
}

void ss_clear_locked(ss_segment *seg) {
  if (ss_slotless(seg)) return;
  uint32_t w = ss_write_begin(seg);
  memset(ss_slot(seg, w), 0, seg->id.payload_bytes);
  ss_write_end(seg, NULL);
}
