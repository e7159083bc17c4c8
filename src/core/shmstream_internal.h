/* shmstream's internal C API: the handles' definitions, the writer's
 * internals and the test-only fault injection. Used by the core
 * (src/core/), the bindings (src/shmstream/_*.cpp), the fuzzers and the
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
  /* The waits' learned spin policy (src/core/wait.c): consecutive spins that
   * ended in a sleep, and waits since the last probe. Per handle. */
  SS_ATOMIC(uint32_t) spin_misses;
  SS_ATOMIC(uint32_t) spin_skipped;
  SS_ATOMIC(int64_t) spin_learned_ns; /* a longer budget that would have paid, 0: none */
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
