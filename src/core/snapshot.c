/* The reader's side of a stream: a consistent snapshot of the published
 * frame, copied (CPU memcpy, or a device copy through a callback from
 * cuda_stream.c) or only located (a zero-copy view). One routine serves every
 * kind of read. Protocol and labels: docs/ABI.md, "Snapshot read". */
#define _GNU_SOURCE
#include <sched.h>
#include <string.h>

#include "core_helpers.h"

/* A torn copy is retried this many times before the reader takes its turn
 * at the lock: a writer that laps every copy cannot lap the lock, and while
 * the turn stands writers do not take it (docs/ABI.md, "Reader's turn"). */
#define SS_READ_TRIES 4
/* How long a reader spins on a write in flight (odd seq) before it falls
 * back to the lock, which also detects a dead writer. A reader waits for
 * the write in flight so that it returns the newest frame, as pyshmem does. */
#define SS_ODD_SPIN_NS 50000
/* ss_publication's attempts at a closed window before it returns what it
 * read: a writer needs a whole write between two attempts to move seq, so
 * an honest one is outrun within a few. */
#define SS_PUBLICATION_TRIES 64

enum try_result { TRY_DONE, TRY_WAIT, TRY_TORN };

static void load_info(const ss_publish_line *p, ss_pubinfo *info) {
  info->count = atomic_load_explicit(&p->count, memory_order_relaxed);
  info->frame_id = atomic_load_explicit(&p->frame_id, memory_order_relaxed);
  info->write_time_ns = atomic_load_explicit(&p->write_time_ns, memory_order_relaxed);
  info->state = atomic_load_explicit(&p->state, memory_order_relaxed);
}

/* With the lock held: the published frame's metadata and slot, and a copy
 * of it when copy is given. last_complete: whatever the state says (a
 * failed write never touched the published slot, unless there is only one). */
static int copy_owned(ss_segment *seg, const ss_snapshot_args *a, ss_pubinfo *info,
                      ss_frame *frame) {
  load_info(&seg->hdr->pub, info);
  if (info->state != SS_STATE_VALID && !(a->last_complete && seg->id.slot_count > 1))
    return SS_EINCONSISTENT;
  uint32_t slot = ss_published_slot(seg);
  frame->slot = slot;
  frame->slot_seq = atomic_load_explicit(ss_slot_seq(seg, slot), memory_order_acquire);
  return a->copy ? a->copy(a->ctx, seg, slot) : SS_OK;
}

/* One optimistic attempt: TRY_DONE with *rc, TRY_WAIT if the write in
 * flight at the first attempt (*arrival, the publish seq then) is not
 * published yet, TRY_TORN if the attempt was torn. */
static enum try_result try_read(ss_segment *seg, const ss_snapshot_args *a, ss_pubinfo *info,
                                uint64_t *arrival, ss_frame *frame, int *rc) {
  ss_publish_line *p = &seg->hdr->pub;
  uint64_t s1 = atomic_load_explicit(&p->seq, memory_order_acquire);
  if (s1 & 1) return TRY_TORN;
  load_info(p, info);
  uint32_t slot = ss_published_slot(seg);
  SS_ATOMIC(uint64_t) *sseq = ss_slot_seq(seg, slot);
  uint64_t ss1 = atomic_load_explicit(sseq, memory_order_acquire);
  int in_flight =
      (int)(atomic_load_explicit(ss_slot_seq(seg, ss_writing_slot(seg)), memory_order_acquire) & 1);
  /* SYNC POINT (s1): pairs with (b1): if the publish seq has not moved, the
   * metadata and the slot's seq belong to one publication. */
  atomic_thread_fence(memory_order_acquire);
  if (atomic_load_explicit(&p->seq, memory_order_relaxed) != s1) return TRY_TORN;
  if (info->state != SS_STATE_VALID) {
    *rc = SS_EINCONSISTENT;
    return TRY_DONE;
  }
  if (in_flight || (ss1 & 1)) {
    /* Wait for the write that was in flight when the read began, so the
     * read returns the newest frame begun before the call (pyshmem's
     * freshness rule). Once that write is published (s1 moved), a newer
     * write in flight fills another slot and does not hold us up; a
     * writer that never pauses cannot starve the reader. */
    if (*arrival == UINT64_MAX) *arrival = s1;
    if (s1 == *arrival || (ss1 & 1)) return TRY_WAIT;
  }
  frame->slot = slot;
  frame->slot_seq = ss1;
  *rc = SS_OK;
  if (!a->copy) return TRY_DONE; /* a view: the caller checks ss_view_valid later */
  if ((*rc = a->copy(a->ctx, seg, slot)) != SS_OK) return TRY_DONE;
  /* SYNC POINT (s2): pairs with (a); a copy that saw any store of a newer
   * write to this slot (the writer lapped us) sees the slot's seq changed. */
  atomic_thread_fence(memory_order_acquire);
  return atomic_load_explicit(sseq, memory_order_relaxed) == ss1 ? TRY_DONE : TRY_TORN;
}

/* The fallback that always finishes: no writer runs while we copy, and a
 * dead writer's lock is handed to us with the stream repaired. */
static int locked_copy(ss_segment *seg, int64_t deadline, const ss_snapshot_args *a,
                       ss_pubinfo *info, ss_frame *frame) {
  int rc = ss_lock_for_read(seg, ss_remaining_ns(deadline));
  if (rc != SS_OK && rc != SS_EOWNERDEAD) return rc;
  SS_CRASH_POINT("read.locked");
  rc = copy_owned(seg, a, info, frame);
  ss_unlock(seg);
  return rc;
}

static int snapshot(ss_segment *seg, int64_t timeout_ns, const ss_snapshot_args *a,
                    ss_pubinfo *info, ss_frame *frame) {
  if (a->holds_lock) return copy_owned(seg, a, info, frame);
  int64_t deadline = ss_deadline_ns(timeout_ns);
  int64_t odd_until = 0;
  uint64_t arrival = UINT64_MAX;
  int rc = SS_OK;
  for (int torn = 0; torn < SS_READ_TRIES;) {
    enum try_result t = try_read(seg, a, info, &arrival, frame, &rc);
    if (t == TRY_DONE) {
      if (rc == SS_EINCONSISTENT && a->last_complete) break; /* to the locked copy */
      return rc;
    }
    if (t == TRY_TORN) {
      torn++;
      continue;
    }
    int64_t now = ss_monotonic_ns();
    if (!odd_until) odd_until = deadline - now < SS_ODD_SPIN_NS ? deadline : now + SS_ODD_SPIN_NS;
    if (now >= odd_until) break;
    ss_cpu_relax();
  }
  if (seg->readonly == SS_ACCESS_FOREIGN) {
    /* A read-only mapping cannot take the lock: keep retrying until the
     * deadline. */
    int64_t since = ss_monotonic_ns();
    for (int64_t now = since; now < deadline; now = ss_monotonic_ns()) {
      if (try_read(seg, a, info, &arrival, frame, &rc) == TRY_DONE) return rc;
      ss_backoff(since, now);
    }
    return SS_ETIMEDOUT;
  }
  /* The reader's turn (docs/ABI.md, "Reader's turn"): writers stop taking
   * the lock while it stands, so the lock comes after at most one write per
   * writer thread. Another reader's turn holds the writers back too: read
   * optimistically at each wake until it is ours. */
  for (;;) {
    uint64_t mine = 0;
    int claimed = ss_turn_claim(seg, &mine);
    if (claimed != 0) {
      rc = locked_copy(seg, deadline, a, info, frame);
      if (claimed > 0) ss_turn_give_back(seg, mine);
      return rc;
    }
    if (try_read(seg, a, info, &arrival, frame, &rc) == TRY_DONE &&
        !(rc == SS_EINCONSISTENT && a->last_complete))
      return rc;
    if (ss_remaining_ns(deadline) == 0) return SS_ETIMEDOUT;
    ss_turn_wait(seg, deadline);
  }
}

int ss_snapshot(ss_segment *seg, int64_t timeout_ns, const ss_snapshot_args *a, ss_pubinfo *info,
                ss_frame *frame) {
  /* A copy that ran into a truncated file read zeros (src/core/guard.c):
   * the read fails instead of returning them (and so does every later one:
   * the mark stays). */
  return ss_guarded(seg, snapshot(seg, timeout_ns, a, info, frame));
}

void ss_publication(const ss_segment *seg, ss_pubinfo *info) {
  const ss_publish_line *p = &seg->hdr->pub;
  /* Bounded: a peer that rewrites seq without pause (a writer lapping us
   * every time, or bytes from a hostile process) gets the values of the
   * last attempt, as a window left open does, not a reader that never
   * returns. */
  for (int tries = 1;; tries++) {
    uint64_t s1 = atomic_load_explicit(&p->seq, memory_order_acquire);
    load_info(p, info);
    /* SYNC POINT (s4): as (s1), without a slot: an unchanged even seq means
     * the values belong to one publication. A window that is open returns
     * what was read at once (a writer mid-write, or one that died there:
     * no spinning on a word another process may never close). */
    atomic_thread_fence(memory_order_acquire);
    if ((s1 & 1) || atomic_load_explicit(&p->seq, memory_order_relaxed) == s1) return;
    if (tries >= SS_PUBLICATION_TRIES) return;
  }
}

/* ---- CPU reads ------------------------------------------------------------ */

int ss_copy_to_host(void *ctx, ss_segment *seg, uint32_t slot) {
  ss_host_dst *d = (ss_host_dst *)ctx;
  memcpy(d->dst, ss_slot(seg, slot), d->n);
  return SS_OK;
}

static int cpu_read(ss_segment *seg, void *dst, size_t n, int64_t timeout_ns, int holds_lock,
                    int last_complete, ss_pubinfo *info) {
  if (ss_slotless(seg)) return SS_EKIND;
  ss_host_dst d = {dst, n};
  ss_snapshot_args a = {ss_copy_to_host, &d, holds_lock, last_complete};
  ss_frame frame;
  return ss_snapshot(seg, timeout_ns, &a, info, &frame);
}

int ss_read(ss_segment *seg, void *dst, size_t n, int64_t timeout_ns, int holds_lock,
            ss_pubinfo *info) {
  return cpu_read(seg, dst, n, timeout_ns, holds_lock, 0, info);
}

int ss_read_last_complete(ss_segment *seg, void *dst, size_t n, int64_t timeout_ns, int holds_lock,
                          ss_pubinfo *info) {
  return cpu_read(seg, dst, n, timeout_ns, holds_lock, 1, info);
}

int ss_view_begin(ss_segment *seg, int64_t timeout_ns, int holds_lock, ss_pubinfo *info,
                  ss_frame *frame) {
  if (ss_slotless(seg)) return SS_EKIND;
  ss_snapshot_args a = {NULL, NULL, holds_lock, 0};
  return ss_snapshot(seg, timeout_ns, &a, info, frame);
}

int ss_view_valid(const ss_segment *seg, const ss_frame *frame) {
  /* SYNC POINT (s3): pairs with (a): if the caller's loads of the slot saw
   * any store of a newer write, this acquire fence makes the odd (or newer)
   * slot seq visible here. */
  atomic_thread_fence(memory_order_acquire);
  /* A view into a file that shrank read zeros (src/core/guard.c): not valid. */
  return atomic_load_explicit(ss_slot_seq(seg, frame->slot), memory_order_relaxed) ==
             frame->slot_seq &&
         !ss_mapping_lost(seg);
}
