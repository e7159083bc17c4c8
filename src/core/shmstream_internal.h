/* shmstream's internal C API: the handles' definitions, the writer's
 * internals and the test-only fault injection. Used by the core
 * (src/core/), the bindings (src/bindings/_*.cpp), the fuzzers and the
 * tests that build C; never by a program outside this repository
 * (examples/ include only the public headers). Nothing here is covered by
 * the C API's stability rule (docs/C-API.md): it may change in any release.
 */
#ifndef SHMSTREAM_INTERNAL_H
#define SHMSTREAM_INTERNAL_H

#include "shmstream.h"

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

/* One handle's waits. Relaxed atomics: two threads waiting on one handle at
 * once only blur the statistics. */
typedef struct ss_wait_stats {
  SS_ATOMIC(uint32_t) hist[SS_WAIT_BUCKETS]; /* decayed counts, 16 per wait */
  SS_ATOMIC(uint32_t) total;                 /* their sum */
  SS_ATOMIC(int64_t) budget_ns;              /* the budget chosen for the last wait */
  SS_ATOMIC(int64_t) wake_ns;  /* wake-ups this handle's sleeps were seen to cost, 0: none */
  SS_ATOMIC(uint64_t) waits;         /* waits that did not find their condition at once */
  SS_ATOMIC(uint64_t) spun;          /* of those, waits that spun (budget > 0) */
  SS_ATOMIC(uint64_t) caught;        /* waits that ended in the spin */
  SS_ATOMIC(uint64_t) slept;         /* waits that went to sleep */
  SS_ATOMIC(uint64_t) slept_at_once; /* waits whose budget was 0 */
  SS_ATOMIC(uint64_t) preempted;     /* spins cut short: the core was taken from them */
  SS_ATOMIC(uint64_t) contended;     /* waits that began while the process saw contention */
} ss_wait_stats;

/* What Segment.spin_policy shows. */
typedef struct ss_wait_policy_info {
  int64_t wake_ns;    /* the process's measured (or injected) wake-up cost */
  int64_t seen_wake_ns; /* this handle's observed wake-up cost (0: none yet); W is it if known */
  int64_t cap_ns;     /* the longest spin the policy allows now: 10 W, or W contended */
  int contended;      /* the process's current view: 1 contended, 0 not */
  int64_t budget_ns;  /* the budget chosen for this handle's last wait */
  uint32_t hist[SS_WAIT_BUCKETS];
  uint64_t waits, spun, caught, slept, slept_at_once, preempted, contended_waits;
} ss_wait_policy_info;

SS_API void ss_wait_policy_info_get(const ss_segment *seg, ss_wait_policy_info *out);
/* Test hook: wake_ns >= 0 replaces the measured W (0: never spin), -1
 * measures it (again); load 1: contended, 0: not, -1: measure. */
SS_API void ss_wait_policy_override(int64_t wake_ns, int load);

/* A mapped segment. Local to one process; never placed in shared memory. */
struct ss_segment {
  ss_header *hdr;
  uint8_t *base;
  size_t map_bytes;
  enum ss_access readonly; /* how this handle may touch the segment */
  SS_ATOMIC(int) cancelled; /* set by ss_stream_cancel: waiters give up */
  int64_t next_heal_ns;     /* monotonic time before which no sleeper heal runs */
  char segname[SS_SEGMENT_NAME_MAX];
  /* Where slot i's seqlock word is: base + slot_seq_off + 8 * slot_seq_step
   * * i (the header's slot line, step 1; or the slot records of a history
   * stream, step 8). An offset, not a pointer: a remapped segment keeps it. */
  size_t slot_seq_off;
  uint32_t slot_seq_step;
  uint32_t history;         /* id.history, 0: no slot records */
  /* This handle's waits, for the spin policy (src/core/wait_policy.c,
   * docs/waiting.md). Process-local; relaxed counters. */
  ss_wait_stats wait;
  /* The identity as validated at open (or written at create): everything
   * that sizes or locates memory is read from here, never again from the
   * shared header, which any process that can write the segment may change
   * (docs/ABI.md, "The header is trusted once"). */
  ss_identity id;
  /* This mapping's entry in the bus-error guard (src/core/guard.c): set
   * when the file shrank under the mapping; NULL while unmapped. */
  struct ss_guard *guard;
  /* The file's owner and permission bits (fstat of the fd at open, create
   * or peek); after SS_EOWNER, the owner that was refused. */
  uint32_t owner_uid;
  uint32_t file_mode;
};

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

/* ---- channels (src/core/ring.c) ----------------------------------------- */

struct ss_channel {
  ss_segment seg;
  ss_ring_control *ctl;
  uint8_t *ring;            /* capacity bytes, mapped twice back to back */
  uint64_t capacity;
  int role;                 /* enum ss_role; 0 once detached */
  uint64_t owner_word;      /* what we stored in our end's owner word */
  int64_t spin_ns;          /* spin before sleeping (default: SHMSTREAM_SPIN_US) */
  /* producer */
  uint64_t head;            /* bytes written, published or not */
  uint64_t head_pub;        /* bytes published */
  uint64_t tail_cache;      /* last tail read */
  uint32_t batch;           /* publish at most every `batch` messages */
  uint32_t pending;         /* messages written since the last publish */
  uint64_t tx_cap;          /* payload bytes of the loan, 0 when none */
  uint32_t tx_meta;
  int tx_open;
  /* consumer */
  uint64_t rd;              /* read cursor */
  uint64_t tail;            /* bytes released (published) */
  uint64_t head_cache;      /* last head read */
  uint64_t rx_len;          /* record length of the acquired message */
  int64_t next_peer_check;  /* rate limit of liveness checks */
  int64_t next_heal_ns;     /* rate limit of dead-sleeper checks (heal_line) */
  uint64_t peer_dead;       /* peer owner word found dead (sticky) */
};

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SHMSTREAM_INTERNAL_H */
