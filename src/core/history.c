/* History reads: every publication a history stream still holds after a
 * given count, located (and copied) without the lock, oldest first, with
 * exact accounting of what is gone. A slow history reader never holds the
 * writer up: it only loads, and a slot the writer overwrites under it is
 * counted as missed. Protocol and labels: docs/ABI.md, "History". */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <string.h>

#include "core_helpers.h"

/* A walk that finds nothing because the writer lapped its first slot
 * starts again from a newer publication this many times at most. */
#define SS_LOCATE_TRIES 4
/* Locate-and-copy rounds of ss_history_read when every located frame was
 * overwritten before its copy. */
#define SS_HISTORY_READ_TRIES 4
/* How long the publish seqlock may stay odd (a few stores) before the
 * reader suspects a dead writer and tries to take its lock over. */
#define SS_PUB_ODD_NS 50000

uint32_t ss_history_depth(const ss_segment *seg) { return seg->history; }

/* SYNC POINT (h2): the published count and slot, of one publication (the
 * publish seq even and unchanged around them): the walk never goes past a
 * publication whose window did not close, so a write rolled back by a
 * repair is never read as history. */
static int published(ss_segment *seg, int64_t deadline, uint64_t *count, uint32_t *slot) {
  ss_publish_line *p = &seg->hdr->pub;
  int64_t odd_since = 0, odd_first = 0;
  for (unsigned i = 0;; i++) {
    uint64_t s = atomic_load_explicit(&p->seq, memory_order_acquire);
    if (!(s & 1)) {
      uint64_t c = atomic_load_explicit(&p->count, memory_order_relaxed);
      uint32_t sl = atomic_load_explicit(&p->slot, memory_order_relaxed);
      atomic_thread_fence(memory_order_acquire);
      if (atomic_load_explicit(&p->seq, memory_order_relaxed) == s) {
        *count = c;
        *slot = sl % seg->id.slot_count;
        return SS_OK;
      }
      continue;
    }
    /* A window is open: a few stores, unless its writer lost its core or
     * died in it. A dead one's lock is taken over (trylock), which repairs
     * the stream; a live one keeps it and we wait. */
    int64_t now = ss_monotonic_ns();
    if (!odd_since) {
      odd_since = odd_first = now;
    } else if (now - odd_since > SS_PUB_ODD_NS) {
      ss_check_writer(seg);
      odd_since = now;
    }
    if (now >= deadline) return SS_ETIMEDOUT;
    if (i < 64)
      ss_cpu_relax();
    else
      ss_backoff(odd_first, now);
  }
}

/* Walk back from the published slot p (count c): the publications with
 * count > after still held, newest first, into out[]. Each good
 * publication advanced the ring by one slot, so going back the counts
 * strictly decrease; the walk ends at the first slot that is being
 * written, emptied, lapped by a newer publication, or not newer than
 * `after` (everything behind it is older still). */
static uint32_t walk(const ss_segment *seg, uint64_t after, uint64_t c, uint32_t p,
                     ss_history_frame *out) {
  uint32_t n = seg->id.slot_count, k = 0;
  uint64_t bound = c; /* the next slot back must hold a count <= bound */
  for (uint32_t j = 0; j < n; j++) {
    uint32_t i = (p + n - j) % n;
    SS_ATOMIC(uint64_t) *sq = ss_slot_seq(seg, i);
    const ss_slot_record *r = ss_slot_record_at(seg, i);
    uint64_t s = atomic_load_explicit(sq, memory_order_acquire);
    if (s & 1) break;
    uint64_t rc = atomic_load_explicit(&r->count, memory_order_relaxed);
    uint64_t fid = atomic_load_explicit(&r->frame_id, memory_order_relaxed);
    uint64_t t = atomic_load_explicit(&r->write_time_ns, memory_order_relaxed);
    /* SYNC POINT (h3): pairs with (h1): an unchanged even seq means the
     * record was read whole, from one publication. */
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(sq, memory_order_relaxed) != s) break;
    if (rc == 0 || rc > bound || rc <= after) break;
    out[k].at.slot = i;
    out[k].at.slot_seq = s;
    out[k].count = rc;
    out[k].frame_id = fid;
    out[k].write_time_ns = t;
    k++;
    bound = rc - 1;
  }
  return k;
}

/* Streams without history: the newest complete publication, as a view. */
static int locate_latest(ss_segment *seg, uint64_t after, int64_t timeout_ns, int64_t spin_ns,
                         ss_history_frame *frames, uint32_t *n, uint64_t *last) {
  ss_snapshot_args a = {NULL, NULL, 0, 1};
  ss_pubinfo info;
  int rc = ss_read_newer(seg, after, timeout_ns, spin_ns, 1, &a, &info, &frames[0].at);
  if (rc != SS_OK) return rc;
  frames[0].count = info.count;
  frames[0].frame_id = info.frame_id;
  frames[0].write_time_ns = info.write_time_ns;
  *n = 1;
  *last = info.count;
  return SS_OK;
}

static int locate(ss_segment *seg, uint64_t after, uint32_t max_frames, int64_t timeout_ns,
                  int64_t spin_ns, ss_history_frame *frames, uint32_t *n, uint64_t *last) {
  *n = 0;
  *last = after;
  if (ss_slotless(seg)) return SS_EKIND;
  if (!seg->history) return locate_latest(seg, after, timeout_ns, spin_ns, frames, n, last);
  int64_t deadline = ss_deadline_ns(timeout_ns);
  if (spin_ns < 0) spin_ns = ss_default_spin_ns();
  for (int tries = 0;;) {
    uint64_t seen;
    int rc = ss_wait_newer(seg, after, ss_remaining_ns(deadline), spin_ns, 1, &seen);
    if (rc == SS_ETIMEDOUT) ss_check_writer(seg); /* take a dead writer over, as read_new */
    if (rc != SS_OK) return rc;
    spin_ns = 0; /* spin only before the first sleep */
    uint64_t c;
    uint32_t p;
    if ((rc = published(seg, deadline, &c, &p)) != SS_OK) return rc;
    if (c <= after) continue; /* the count we saw was rolled back: wait again */
    uint32_t k = walk(seg, after, c, p, frames);
    if (k == 0 && ++tries < SS_LOCATE_TRIES) continue;
    /* Oldest first; a limit keeps the oldest, so the next call goes on
     * from where this one stops. */
    uint32_t keep = max_frames && k > max_frames ? max_frames : k;
    for (uint32_t lo = 0, hi = k; lo + 1 < hi; lo++, hi--) {
      ss_history_frame tmp = frames[lo];
      frames[lo] = frames[hi - 1];
      frames[hi - 1] = tmp;
    }
    *n = keep;
    /* Nothing located although c > after: slot p was overwritten, and with
     * it everything older (the writer overwrites oldest first). */
    *last = keep ? frames[keep - 1].count : c;
    return SS_OK;
  }
}

int ss_history_locate(ss_segment *seg, uint64_t after, uint32_t max_frames, int64_t timeout_ns,
                      int64_t spin_ns, ss_history_frame *frames, uint32_t *n, uint64_t *last) {
  if (ss_mapping_lost(seg)) return SS_ECORRUPT;
  int rc = locate(seg, after, max_frames, timeout_ns, spin_ns, frames, n, last);
  if (ss_mapping_lost(seg)) {
    *n = 0;
    return SS_ECORRUPT;
  }
  return rc;
}

/* Every frame located in SS_HISTORY_READ_TRIES rounds was lapped before its
 * copy: the writers outrun this reader. The newest publication instead,
 * copied by the snapshot protocol, which takes the reader's turn at the lock
 * when its copies are lapped too (docs/ABI.md, "Reader's turn"), so a batch
 * is not empty while a newer publication exists. What it skipped is missed. */
static int newest(ss_segment *seg, uint64_t after, int64_t timeout_ns, ss_history_frame *frames,
                  ss_history_dst_fn dst_for, void *ctx, uint32_t *n, uint64_t *last) {
  void *dst = dst_for(ctx, 1);
  if (!dst) return ENOMEM;
  ss_host_dst d = {dst, (size_t)seg->id.payload_bytes};
  ss_snapshot_args a = {ss_copy_to_host, &d, 0, 1}; /* failed writes are skipped */
  ss_pubinfo info;
  int rc = ss_snapshot(seg, timeout_ns, &a, &info, &frames[0].at);
  /* Out of time (the binding's next chunk starts the read again, up to the
   * caller's timeout), except for a mapping that can never take the lock:
   * it gets the empty batch, as after every round, and *last stands. */
  if (rc == SS_ETIMEDOUT && seg->readonly != SS_ACCESS_FOREIGN) return rc;
  if (rc == SS_ETIMEDOUT || (rc == SS_OK && info.count <= after)) {
    dst_for(ctx, 0);
    return SS_OK;
  }
  if (rc != SS_OK) return rc;
  frames[0].count = info.count;
  frames[0].frame_id = info.frame_id;
  frames[0].write_time_ns = info.write_time_ns;
  *n = 1;
  *last = info.count;
  return SS_OK;
}

int ss_history_read(ss_segment *seg, uint64_t after, uint32_t max_frames, int64_t timeout_ns,
                    int64_t spin_ns, ss_history_frame *frames, ss_history_dst_fn dst_for, void *ctx,
                    uint32_t *n, uint64_t *last) {
  uint64_t from = after;
  for (int attempt = 0;; attempt++) {
    /* Only the first locate waits: a retry goes on from what is left now. */
    int rc = ss_history_locate(seg, from, max_frames, attempt ? 0 : timeout_ns,
                               attempt ? 0 : spin_ns, frames, n, last);
    /* Nothing published since the frames the last round found lapped: the
     * writers that lapped them are still writing. */
    if (rc == SS_ETIMEDOUT && attempt)
      return newest(seg, after, timeout_ns, frames, dst_for, ctx, n, last);
    if (rc != SS_OK) return rc;
    uint32_t located = *n;
    void *dst = dst_for(ctx, located);
    if (!dst) return ENOMEM; /* the caller's allocation failed; it knows why */
    *n = ss_history_copy(seg, frames, located, dst);
    if (ss_mapping_lost(seg)) return SS_ECORRUPT;
    /* A reader far behind a fast writer can find every frame it located
     * overwritten before its copy: it goes on from there (what is lost is
     * counted from `after`) a few times, then takes the newest frame. */
    if (*n) return SS_OK;
    /* Nothing located (the walk was lapped SS_LOCATE_TRIES times), or
     * every round's frames lapped under the copy. */
    if (!located || attempt + 1 == SS_HISTORY_READ_TRIES)
      return newest(seg, after, timeout_ns, frames, dst_for, ctx, n, last);
    from = *last;
  }
}

uint32_t ss_history_copy(const ss_segment *seg, ss_history_frame *frames, uint32_t n, void *dst) {
  size_t bytes = (size_t)seg->id.payload_bytes;
  uint32_t kept = 0;
  for (uint32_t j = 0; j < n; j++) {
    memcpy((uint8_t *)dst + (size_t)kept * bytes, ss_slot(seg, frames[j].at.slot), bytes);
    /* SYNC POINT (h4): ss_view_valid's acquire fence pairs with (a): a copy
     * that saw any store of a newer write sees the slot's seq changed. */
    if (!ss_view_valid(seg, &frames[j].at)) continue; /* lapped: missed */
    if (kept != j) frames[kept] = frames[j];
    kept++;
  }
  return kept;
}
