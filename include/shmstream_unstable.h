/* shmstream's unstable C API: public, but outside the C API's stability
 * rule (docs/C-API.md, "What is public"). It declares what the Python
 * binding (src/bindings/) and the test suite need beyond include/shmstream.h:
 * the writer's steps one by one, a slot's bytes by index, the wait policy's
 * statistics and the test-only fault injection. Any release may change it; a
 * C program that wants a stable API uses the other headers of include/ only.
 */
#ifndef SHMSTREAM_UNSTABLE_H
#define SHMSTREAM_UNSTABLE_H

#include "shmstream.h"
#include "shmstream_channel.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How a handle may touch its segment (ss_segment.readonly). */
enum ss_access {
  SS_ACCESS_WRITE = 0,    /* mapped read-write */
  SS_ACCESS_READONLY = 1, /* mapped read-write, opened readonly: may take the lock to read */
  SS_ACCESS_FOREIGN = 2   /* a read-only mapping of someone else's segment
                           * (or a peek): no lock, so no lock fallback */
};

/* ---- the wait policy (src/core/wait_policy.c, docs/waiting.md) ---------- */

/* Histogram buckets of wait lengths: 0: < 1024 ns; j in 1..15:
 * [2^(9+j), 2^(10+j)) ns; 16: longer. */
#define SS_WAIT_BUCKETS 17

/* What Segment.spin_policy shows. */
typedef struct ss_wait_policy_info {
  int64_t wake_ns;    /* the process's measured (or injected) wake-up cost */
  int64_t seen_wake_ns; /* this handle's observed wake-up cost (0: none yet); W is it if known */
  int64_t cap_ns;     /* the longest spin the policy allows now: 10 W, or W contended */
  int contended;      /* the process's current view: 1 contended, 0 not */
  int64_t budget_ns;  /* the budget chosen for this handle's last wait */
  uint32_t hist[SS_WAIT_BUCKETS];
  uint64_t waits, spun, caught, slept, slept_at_once, preempted, contended_waits;
  int64_t low_ns;     /* L, when this handle's publications are due (0: not known yet) */
  int64_t nap_ns;     /* the nap of this handle's last wait (0: it did not nap) */
  uint64_t napped;    /* waits that napped, then spun */
} ss_wait_policy_info;

SS_API void ss_wait_policy_info_get(const ss_segment *seg, ss_wait_policy_info *out);
/* The same of a milk stream handle's waits (include/shmstream_milk.h). */
struct ss_milk;
SS_API void ss_milk_spin_policy(const struct ss_milk *m, ss_wait_policy_info *out);
/* Test hook: wake_ns >= 0 replaces the measured W (0: never spin), -1
 * measures it (again); load 1: contended, 0: not, -1: measure. */
SS_API void ss_wait_policy_override(int64_t wake_ns, int load);

/* The bytes of slot `slot` (< ss_segment_slot_count) of a mapped segment;
 * ss_view_data is the stable way to reach a located frame's bytes. */
SS_API uint8_t *ss_slot(const ss_segment *seg, uint32_t slot);

/* ---- the writer's steps (src/core/publish.c) ------------------------------ */

/* ss_write_begin returns the slot the caller fills (ss_slot(seg, slot)),
 * under the lock; ss_write_end publishes it, ss_write_abort marks it
 * aborted. */
SS_API uint32_t ss_write_begin(ss_segment *seg);
SS_API uint32_t ss_published_slot(const ss_segment *seg);
/* 1 while a writer is filling a slot or replacing the metadata (or died
 * doing either: the next lock holder repairs it). */
SS_API int ss_write_in_flight(const ss_segment *seg);
SS_API void ss_write_end(ss_segment *seg, const uint64_t *frame_id);

/* ss_write_end with explicit metadata, for a mirror of another stream or a
 * replay: write_time_ns 0 means now; count 0 means count + 1, otherwise it
 * is the new count and must exceed the current one (the caller checks,
 * holding the lock; a smaller value is raised to count + 1). */
typedef struct ss_publish_meta {
  const uint64_t *frame_id; /* NULL keeps the previous frame id */
  uint64_t write_time_ns;
  uint64_t count;
} ss_publish_meta;
SS_API void ss_write_end_ex(ss_segment *seg, const ss_publish_meta *meta);
SS_API void ss_write_locked_ex(ss_segment *seg, const void *src, size_t n,
                               const ss_publish_meta *meta);
/* ss_gpu_write_locked (shmstream_cuda.h) with explicit metadata, as above. */
struct ss_gpu;
SS_API int ss_gpu_write_locked_ex(struct ss_gpu *g, ss_segment *seg, uint64_t src, int src_kind,
                                  uint64_t user_stream, const ss_publish_meta *meta,
                                  int64_t timeout_ns);
SS_API void ss_write_abort(ss_segment *seg);

/* ss_write_locked_ex with its count checked, the lock held: ERANGE if
 * meta->count is above SS_MAX_COUNT, EINVAL if it is not 0 and does not
 * exceed the current count (a mirror's counts only grow), else the write.
 * *count: the count after the write, or the current one on refusal. The
 * check alone, without a write: ss_publish_count_check. */
SS_API int ss_publish_count_check(const ss_segment *seg, uint64_t count, uint64_t *current);
SS_API int ss_publish_locked(ss_segment *seg, const void *src, size_t n,
                             const ss_publish_meta *meta, uint64_t *count);

/* ---- a handle's state, for the binding's properties and messages -------- */

/* How the handle may touch its segment: enum ss_access (0 write, 1 opened
 * readonly, 2 a foreign read-only mapping or a peek). */
SS_API int ss_segment_access(const ss_segment *seg);
/* The file's permission bits (fstat at open, create or peek). */
SS_API uint32_t ss_segment_file_mode(const ss_segment *seg);
/* 1 while the handle maps a segment, 0 before open and after close. */
SS_API int ss_segment_mapped(const ss_segment *seg);
/* pub.state (enum ss_state), relaxed: what the binding tests before a fast read. */
SS_API uint32_t ss_segment_state(const ss_segment *seg);

/* The shared header's words a status report shows (docs/ABI.md, "Header"),
 * each one load: seq and count acquire, the rest relaxed (they are
 * informational). waiters: sleeping readers, with or without a slot. */
typedef struct ss_segment_words {
  uint64_t seq, count, frame_id, write_time_ns, aborted, writer_start_ticks, acquisitions;
  uint32_t state, waiters;
  int32_t writer_pid, owner_pid, owner_tid;
} ss_segment_words;
SS_API void ss_segment_words_get(const ss_segment *seg, ss_segment_words *out);

/* A stream's or loader pool's liveness by lease (docs/ABI.md, "Stream lock
 * by lease"), each 1 alive, 0 gone, -1 cannot tell (another kind, a free
 * lock, a handle without fd): the creator handle's lease, the lock
 * holder's, and whether any handle holds a lease on the file. One
 * F_OFD_GETLK each; changes nothing. */
typedef struct ss_stream_leases {
  int creator_alive, lock_holder_alive, any_held;
} ss_stream_leases;
SS_API void ss_stream_leases_get(const ss_segment *seg, ss_stream_leases *out);

/* For a table in a segment's payload that names its holders by lease (a
 * loader pool's slot lines: docs/ABI.md, "Loader pool by lease"). The
 * handle's lease in this process (a fork child's inherited handle takes a
 * fresh one now, l1); 0: not a lease segment, or no lease could be taken. */
SS_API uint64_t ss_segment_lease(ss_segment *seg);
/* Whether the lease `word` is held (l2, one F_OFD_GETLK through the
 * handle's fd): 1 alive, 0 gone (or no lease number), -1 cannot tell. */
SS_API int ss_segment_lease_alive(const ss_segment *seg, uint64_t word);

/* ---- a channel handle's state (src/core/ring.c) ------------------------- */

/* 1 while attached (an end held, the ring mapped); the segment under the
 * channel (for ss_segment_* and the wait policy); the ring's bytes; the
 * role (enum ss_role, 0 once detached); 1 while a zero-copy send is open. */
SS_API int ss_channel_attached(const ss_channel *ch);
SS_API const ss_segment *ss_channel_segment(const ss_channel *ch);
SS_API uint64_t ss_channel_capacity(const ss_channel *ch);
SS_API int ss_channel_role(const ss_channel *ch);
SS_API int ss_channel_tx_open(const ss_channel *ch);
/* The producer's batch (ss_channel_set_batch) and messages not yet published. */
SS_API uint32_t ss_channel_batch(const ss_channel *ch);
SS_API uint32_t ss_channel_pending(const ss_channel *ch);
/* The spin before a wait sleeps (default SHMSTREAM_SPIN_US); < 0 restores it. */
SS_API int64_t ss_channel_spin_ns(const ss_channel *ch);
SS_API void ss_channel_set_spin_ns(ss_channel *ch, int64_t spin_ns);
/* The consumer's read cursor (end of the last record taken) and the bytes
 * it released: what ss_channel_release_rx moves between. */
SS_API uint64_t ss_channel_rx_cursor(const ss_channel *ch);
SS_API uint64_t ss_channel_rx_released(const ss_channel *ch);

/* A channel segment's ring words (docs/ABI.md, "Channels"), each one
 * relaxed load, from an attached channel's segment or a peeked one (kind
 * checked by the caller). An end: its owner's lease, pid and PID
 * namespace, state, attaches, takeovers, and whether its lease is held. */
typedef struct ss_ring_end_words {
  int32_t pid; /* the owner's pid, in its own PID namespace (informational) */
  uint32_t state;
  uint64_t attaches, takeovers;
  uint64_t owner;     /* the owner word: the owner handle's lease */
  uint64_t pidns_ino; /* the owner's PID namespace (0: unknown) */
  int alive;          /* the owner's lease is held */
} ss_ring_end_words;
typedef struct ss_ring_words {
  uint64_t head, tail;
  ss_ring_end_words producer, consumer;
} ss_ring_words;
SS_API void ss_ring_words_get(const ss_segment *seg, ss_ring_words *out);

/* ---- fault injection (src/core/fault.c; tests only) --------------------- */

/* Arm the crash point `point` (docs/ABI.md, "Crash points"): the nth time
 * this process passes it, it raises SIGKILL on itself (SS_FAULT_SIGKILL) or
 * calls _exit(SS_FAULT_EXIT_CODE) (SS_FAULT_EXIT). EINVAL for an unknown
 * point. The environment variable SHMSTREAM_CRASH_AT="point[:nth[:exit]]"
 * arms a point when the core is loaded. */
enum ss_fault_action { SS_FAULT_SIGKILL = 0, SS_FAULT_EXIT = 1 };
#define SS_FAULT_EXIT_CODE 86
SS_API int ss_fault_arm(const char *point, uint32_t nth, int action);
SS_API void ss_fault_disarm(void);
SS_API const char *const *ss_fault_points(size_t *n);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SHMSTREAM_UNSTABLE_H */
