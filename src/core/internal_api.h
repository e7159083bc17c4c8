/* shmstream's internal C API: the handles' definitions (ss_segment,
 * ss_channel) and what only the core needs. Used by the core (src/core/),
 * the fuzzers and the tests that build C; never by the Python binding
 * (src/bindings/ includes only include/) nor by a program outside this
 * repository. Nothing here is covered by the C API's stability rule
 * (docs/C-API.md): it may change in any release.
 */
#ifndef SHMSTREAM_INTERNAL_H
#define SHMSTREAM_INTERNAL_H

#include "shmstream.h"
#include "shmstream_unstable.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the wait policy's per-handle statistics (src/core/wait_policy.c) ---- */

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
  SS_ATOMIC(int64_t) low_ns;         /* L: the 1-in-10 quantile of recent T, 0: none yet */
  SS_ATOMIC(int64_t) spread_ns;      /* D: the running mean of |T - L|, L's step */
  SS_ATOMIC(uint32_t) low_moves;     /* waits that moved L (counted up to SS_NAP_SETTLE) */
  SS_ATOMIC(int64_t) nap_ns;         /* the last wait's nap, 0: it did not nap */
  SS_ATOMIC(uint64_t) napped;        /* waits that napped before their spin */
} ss_wait_stats;

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
  /* The segment's fd, kept for the handle's life where liveness is by
   * lease (src/core/liveness.c): its lease lock lives on it, and others'
   * leases are tested through it. */
  int has_fd;
  int fd;
  uint64_t lease;     /* this handle's lease number, 0: none */
  int32_t lease_pid;  /* the process that took it (a fork child did not) */
};

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
  /* zero-copy holds (src/core/rx_holds.c): records read but not yet
   * released, in ring order, a circular array of holds_cap */
  struct ss_rx_hold *holds;
  uint32_t holds_cap, holds_first, holds_n;
  uint64_t done_upto;       /* released by the holds, not yet published as tail */
  int64_t next_peer_check;  /* rate limit of liveness checks */
  int64_t next_heal_ns;     /* rate limit of dead-sleeper checks (heal_line) */
  uint64_t peer_dead;       /* peer owner word found dead (sticky) */
};

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SHMSTREAM_INTERNAL_H */
