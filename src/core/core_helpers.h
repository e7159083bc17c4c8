/* Helpers shared by the core's source files; not part of the public ABI.
 *
 * The files call each other without a circle:
 *   clock.c, proc.c, names.c, fault.c, guard.c   leaves (and the platform
 *                  seam below them all: platform.h, platform_<system>.c)
 *   owner.c        who may open a segment: owner uid, PID namespace (leaf)
 *   liveness.c     leases: is a peer alive, without a pid  (proc, clock)
 *   sleepers.c     who sleeps on a stream                (liveness, proc, clock)
 *   lease_lock.c   a stream's lock by lease              (liveness, futex, clock)
 *   read_pending.c a reader's turn at that lock          (liveness, futex, clock)
 *   publish.c      the writer's protocol and the repair  (futex, clock)
 *   stream_lock.c  the stream lock: lease lock + repair + reader's turn
 *   snapshot.c     the reader's protocol                 (publish, stream_lock)
 *   wait.c         waiting for a publication, read_new   (futex, publish, stream_lock, snapshot)
 *   history.c      reading every frame of a history      (publish, snapshot, wait)
 */
#ifndef SS_CORE_HELPERS_H
#define SS_CORE_HELPERS_H

#include <string.h>

#include "internal_api.h"
#include "platform.h"

#define SS_NS_PER_S 1000000000LL

uint64_t ss_fnv1a64(const void *data, size_t n, uint64_t h);
#define SS_FNV_OFFSET 0xcbf29ce484222325ULL

/* src/core/clock.c (the clocks and ss_deadline_ns are public). Time left
 * until a deadline from ss_deadline_ns, as the next call's timeout: -1 for
 * none (wait for ever), else >= 0 (0 once it has passed). */
int64_t ss_remaining_ns(int64_t deadline);
/* ss_deadline_ns from a clock read the caller already made. */
int64_t ss_deadline_from(int64_t now, int64_t timeout_ns);
/* One pause of a wait for a word another process should change within
 * microseconds (an odd seqlock), waiting since `since_ns`: sched_yield for
 * the first SS_BACKOFF_YIELD_NS, then sleeps that grow to 1 ms, so that a
 * word left odd by a live peer costs no core. */
#define SS_BACKOFF_YIELD_NS 1000000
void ss_backoff(int64_t since_ns, int64_t now_ns);

/* src/core/proc.c (ss_proc_alive and ss_proc_start_ticks are public).
 * This process's pid and start time and this thread's tid, without a
 * system call after the first (a fork child asks again). */
int32_t ss_self_pid(void);
int32_t ss_self_tid(void);
uint64_t ss_self_start_ticks(void);
/* How often a waker whose FUTEX_WAKE woke nobody may check whether the
 * sleepers it counted died (/proc reads): at most once per this per handle
 * (src/core/sleepers.c for streams, src/core/ring.c for channels). */
#define SS_HEAL_INTERVAL_NS (100 * 1000 * 1000LL)

/* src/core/owner.c (ss_pidns_self and ss_pidns_match are public): who may
 * open a segment (docs/ABI.md, "Owner and PID namespace"). */
void ss_pidns_record(ss_identity *id);       /* at create, before the checksum */
int ss_owner_record(int fd, ss_segment *seg); /* seg->owner_uid and file_mode from fstat */
/* ss_owner_record, then SS_EOWNER unless the owner is the caller's euid,
 * in opts (may be NULL) or in SHMSTREAM_ALLOW_OWNERS. */
int ss_owner_check(int fd, ss_segment *seg, const ss_open_opts *opts);
/* A file opened again by name has the owner checked at open: SS_OK or SS_EOWNER. */
int ss_owner_same(int fd, const ss_segment *seg);

/* ---- src/core/liveness.c: leases (docs/ABI.md, "Liveness leases") ------- */

/* Lease numbers: 2^62 + 62 random bits, the byte of the segment's file a
 * handle holds an OFD lock on for its life. */
#define SS_LEASE_BASE (1ull << 62)
/* Keep fd (the segment's, O_CLOEXEC) in the handle for its life; with own,
 * take a new lease on it (l1). SS_OK, or an errno (the fd is then closed). */
int ss_lease_take(ss_segment *seg, int fd, int own);
/* Close the handle's fd, which drops its lease; nothing if it has none. */
void ss_lease_drop(ss_segment *seg);
/* The handle's own lease in this process (0: none, or a fork child's
 * inherited handle, whose lease is its parent's). */
uint64_t ss_lease_self(const ss_segment *seg);
/* Whether the lease `word` is held (l2): 1 alive, 0 gone (or word 0), -1
 * cannot tell (no fd: callers take it for alive). */
int ss_lease_alive(const ss_segment *seg, uint64_t word);
/* The handle's lease in this process, taking a new one (l1) on its fd in a
 * fork child whose inherited handle has only its parent's; 0 if it has no
 * fd or the lock cannot be taken. */
uint64_t ss_lease_mine(ss_segment *seg);
/* Whether `lease` is held by a handle of this process (a lookup in the
 * process's table of lease fds, under its mutex: for slow paths). */
int ss_lease_is_ours(uint64_t lease);
/* Raise the soft fd limit towards the hard one after an EMFILE (handles
 * keep their fds): 1 if it rose, so that the open may be tried again. */
int ss_more_fds(void);
/* Whether any handle holds a lease on the segment's file (one F_OFD_GETLK
 * over the lease range): 1, 0, or -1 cannot tell. */
int ss_lease_any(const ss_segment *seg);
/* Every kind but a plain shared array judges liveness by lease: a channel
 * its ends, a stream and a loader pool's root their lock, sleepers and
 * creator (docs/ABI.md, "Liveness leases"). By kind and flags, as a
 * creator knows them; by the handle's private identity copy after open. */
static inline int ss_kind_uses_leases(uint32_t kind, uint32_t flags) {
  return kind != SS_KIND_ARRAY || (flags & SS_FLAG_LOADER_POOL);
}
static inline int ss_uses_leases(const ss_identity *id) {
  return ss_kind_uses_leases(id->kind, id->flags);
}
/* A stream or a loader pool's root: locked by lease (src/core/lease_lock.c). */
static inline int ss_kind_lease_locked(uint32_t kind, uint32_t flags) {
  return kind == SS_KIND_STREAM || (kind == SS_KIND_ARRAY && (flags & SS_FLAG_LOADER_POOL));
}
static inline int ss_lease_locked(const ss_identity *id) {
  return ss_kind_lease_locked(id->kind, id->flags);
}

/* ---- src/core/fault.c: crash points (docs/ABI.md, "Crash points") ------- */

extern SS_ATOMIC(int) ss_fault_armed_;
void ss_fault_hit(const char *point);
static inline int ss_fault_active(void) {
  return __builtin_expect(atomic_load_explicit(&ss_fault_armed_, memory_order_relaxed), 0);
}
/* A death here must find every store before it done and none after it: the
 * signal fence keeps the compiler from moving stores across the point (a
 * SIGKILL is asynchronous, like a signal). No instruction is emitted. */
#define SS_CRASH_POINT(name)                   \
  do {                                         \
    atomic_signal_fence(memory_order_seq_cst); \
    if (ss_fault_active()) ss_fault_hit(name); \
  } while (0)

/* src/core/segment.c: open a /dev/shm name without blocking or following a
 * link; a FIFO, directory or device is ENODEV. The fd, or -errno. */
int ss_open_regular(const char *segname, int flags);
/* Unmap the segment, keeping the handle's fd and lease (a channel's second
 * mapping replaces the first: src/core/ring.c). */
void ss_segment_unmap(ss_segment *seg);

/* ---- src/core/guard.c: a file that shrank under a mapping ---------------- */

/* One mapping in the guard's table. Here, not in guard.c, so that the
 * check after every call (ss_mapping_lost) is two inlined loads. */
struct ss_guard {
  SS_ATOMIC(uintptr_t) lo;  /* first byte of the mapping, 0: entry free */
  SS_ATOMIC(uintptr_t) hi;  /* one past its last byte */
  SS_ATOMIC(int) hit;       /* a bus error was caught in it */
  SS_ATOMIC(int) used;      /* taken by a handle (claimed by CAS) */
};
/* Enter the segment's mapping (base, map_bytes) in the bus-error guard, and
 * take it out before it is unmapped (ss_segment_close does). */
void ss_guard_attach(ss_segment *seg);
void ss_guard_detach(ss_segment *seg);
/* A bus error was caught in the segment's mapping (ss_segment_status). The
 * handler runs on the faulting thread, so relaxed order is enough for the
 * call that faulted; another thread's call sees it at its next check. */
static inline int ss_mapping_lost(const ss_segment *seg) {
  const struct ss_guard *g = seg->guard;
  return g && atomic_load_explicit(&g->hit, memory_order_relaxed);
}
/* The fields that size or place memory are as the handle validated them:
 * payload offset, payload bytes, slot stride, slot count and ndim (identity
 * bytes 24..55: four words) and the history depth. On the lock's path,
 * so four word compares and no call; shape, itemsize, kind and flags only
 * describe the bytes, and ss_identity_changed (the error's wording) checks
 * them too. */
static inline int ss_identity_same(const ss_segment *seg) {
  uint64_t now[4], was[4];
  memcpy(now, (const uint8_t *)&seg->hdr->id + offsetof(ss_identity, payload_offset), sizeof now);
  memcpy(was, (const uint8_t *)&seg->id + offsetof(ss_identity, payload_offset), sizeof was);
  return ((now[0] ^ was[0]) | (now[1] ^ was[1]) | (now[2] ^ was[2]) | (now[3] ^ was[3])) == 0 &&
         seg->hdr->id.history == seg->id.history;
}
/* rc, or SS_ECORRUPT if the mapping was lost: what a call returns after it
 * touched the segment. */
static inline int ss_guarded(const ss_segment *seg, int rc) {
  return ss_mapping_lost(seg) ? SS_ECORRUPT : rc;
}

/* ---- src/core/sleepers.c: who sleeps on a stream -------------------------- */

/* Take a sleeper slot for this thread's coming sleep (-1: table full). */
int ss_sleeper_claim(ss_segment *seg);
void ss_sleeper_release(ss_segment *seg, int slot);
/* Clear the slots of sleepers that died asleep (rate-limited per handle). */
void ss_heal_sleepers(ss_segment *seg);

/* ---- src/core/lease_lock.c: the lock of a stream or loader pool ------- */

/* The lock on the stream area's lock_lease word (docs/ABI.md, "Stream lock
 * by lease"). timeout_ns < 0 waits forever, 0 tries once. SS_OK,
 * SS_EOWNERDEAD (held: a takeover from a holder whose lease is gone; the
 * caller repairs), SS_ETIMEDOUT, SS_EDEADLK or a positive errno. The owner
 * is recorded. */
int ss_lease_lock(ss_segment *seg, int64_t timeout_ns);
int ss_lease_unlock(ss_segment *seg);
/* Whether the holder's lease is alive (l2): 1, 0 (dead: the next lock takes
 * it over), -1 free or cannot tell. */
int ss_lease_lock_holder_alive(const ss_segment *seg);

/* ---- slots: where each slot's seqlock word and record are ---------------- */

/* Slot i's seqlock word: in the header's slot line, or in slot i's record
 * on a history stream (docs/ABI.md, "History"); set when the segment is
 * mapped (segment.c). */
static inline SS_ATOMIC(uint64_t) *ss_slot_seq(const ss_segment *seg, uint32_t i) {
  return (SS_ATOMIC(uint64_t) *)(seg->base + seg->slot_seq_off +
                                 (size_t)8 * seg->slot_seq_step * i);
}
/* Slot i's record (history streams only). */
static inline ss_slot_record *ss_slot_record_at(const ss_segment *seg, uint32_t i) {
  return (ss_slot_record *)(seg->base + seg->slot_seq_off) + i;
}

/* ---- src/core/publish.c: the writer's side ------------------------------- */

/* After a lock takeover: finish what a dead writer left (docs/ABI.md,
 * "Repair after a death"). Returns 1 if a frame was abandoned. */
int ss_stream_repair(ss_segment *seg);
/* Payload slots a reader may copy from (0 for a GPU stream without CPU
 * mirror: its payload is on the device). */
int ss_slotless(const ss_segment *seg);
/* 0 if the last writer (writer_pid and its start time) has died; 1 if it
 * runs, is this process, or nobody wrote yet. */
int ss_writer_alive(const ss_segment *seg);
/* The slot the next (or current) write fills: the one after the published. */
uint32_t ss_writing_slot(const ss_segment *seg);

/* ---- src/core/snapshot.c: the reader's side -------------------------------- */

/* Copies slot `slot` of the published frame to the caller's destination
 * (host memcpy, or a device copy for GPU streams); SS_OK or an error that
 * ends the read. */
typedef int (*ss_copy_fn)(void *ctx, ss_segment *seg, uint32_t slot);
typedef struct ss_snapshot_args {
  ss_copy_fn copy;   /* NULL: locate the frame only (a zero-copy view) */
  void *ctx;
  int holds_lock;    /* the caller holds the stream lock: copy directly */
  int last_complete; /* ignore an aborted/abandoned state (slot_count > 1) */
} ss_snapshot_args;
/* The copy step of a CPU read: memcpy of the slot into ctx's buffer. */
typedef struct ss_host_dst {
  void *dst;
  size_t n;
} ss_host_dst;
int ss_copy_to_host(void *ctx, ss_segment *seg, uint32_t slot);
/* The one snapshot loop: optimistic seqlock attempts, then the lock. */
int ss_snapshot(ss_segment *seg, int64_t timeout_ns, const ss_snapshot_args *a, ss_pubinfo *info,
                ss_frame *frame);

/* ---- src/core/wait.c -------------------------------------------------------- */

/* ss_wait_count; with ignore_failed, an aborted or abandoned write does not
 * end the wait (a history reader waits for the next publication). */
int ss_wait_newer(ss_segment *seg, uint64_t after, int64_t timeout_ns, int64_t spin_ns,
                  int ignore_failed, uint64_t *count_out);
/* read_new's loop: wait, then take a snapshot (a copy, or a view when
 * a->copy is NULL) of a publication newer than `after`. */
int ss_read_newer(ss_segment *seg, uint64_t after, int64_t timeout_ns, int64_t spin_ns,
                  int ignore_failed, const ss_snapshot_args *a, ss_pubinfo *info, ss_frame *frame);

/* ---- src/core/read_pending.c: a reader's turn (docs/ABI.md) ------------- */

/* A writer's gate when read_pending is set (ss_lock loads it first, rp2):
 * wait while a live reader's claim stands, clearing a dead one's. SS_OK,
 * or SS_ETIMEDOUT (timeout 0: a trylock defers to the reader). */
int ss_turn_gate_slow(ss_segment *seg, int64_t timeout_ns);
/* Claim the turn (rp1): 1 claimed (*mine: the lease to give back), 0
 * another live reader's turn stands, -1 no lease to name (lock without). */
int ss_turn_claim(ss_segment *seg, uint64_t *mine);
/* Sleep while another reader's turn stands, one chunk at most. */
void ss_turn_wait(ss_segment *seg, int64_t deadline);
/* Give the turn back (rp3) and wake who sleeps on it. */
void ss_turn_give_back(ss_segment *seg, uint64_t mine);

/* ---- src/core/stream_lock.c ---------------------------------------------- */

/* ss_lock for a reader's fallback, without the writers' gate: the reader's
 * turn (read_pending.c) makes writers wait for it. */
int ss_lock_for_read(ss_segment *seg, int64_t timeout_ns);

/* ---- the wait policy (src/core/wait_policy.c, docs/waiting.md) ---------- */

/* One wait's spin, as the policy chose it. */
typedef struct ss_spin {
  int64_t start;   /* monotonic ns the wait began */
  int64_t end;     /* the budget's end (start: no spin) */
  int64_t cap_end; /* how far a write in flight may extend the spin */
  int64_t last;    /* the spin's last clock read */
  int64_t wake_ns; /* W when the wait began */
  int64_t nap_end; /* when the nap ends (start: no nap; always before deadline) */
  int64_t low;     /* L when the wait began (a napping wait's spin starts from it) */
  int64_t cap;     /* the cap when the wait began */
  int64_t deadline; /* when the wait's timeout ends, as ss_deadline_ns (INT64_MAX: none) */
  int counts;      /* 0 for a poll (timeout 0): not recorded */
} ss_spin;

/* How a wait ended, for its record in the handle's histogram. */
enum ss_wait_end { SS_WAIT_CAUGHT, SS_WAIT_WOKEN, SS_WAIT_TIMED_OUT };

/* The budget docs/waiting.md's rule picks from a handle's histogram, for a
 * wake-up cost w, a cap and a price (10 with a spare core, 1 without). */
int64_t ss_wait_budget(const ss_wait_stats *ws, int64_t w, int64_t cap, int64_t price);
/* The same, and that budget's cost scaled by price * total into *cost. */
int64_t ss_wait_budget_cost(const ss_wait_stats *ws, int64_t w, int64_t cap, int64_t price,
                            int64_t *cost);
/* Choose this wait's budget: cap_ns is the caller's cap (< 0: the policy's,
 * 0: no spin), timeout_ns the wait's (0: a poll, no spin). */
void ss_spin_begin(ss_wait_stats *ws, int64_t cap_ns, int64_t timeout_ns, int64_t now, ss_spin *s);
/* A napping wait (s->nap_end > s->start) sleeps until s->nap_end as it
 * would sleep for good (a publication wakes it), then calls this: its spin
 * budget runs from then to the cap past max(now, start + L). */
void ss_spin_nap_over(ss_spin *s, int64_t now);
/* The nap docs/waiting.md's rule picks ("Napping"), 0 for none: low is L,
 * moves how many waits moved it, slack the thread's timer slack, best the
 * best budget's cost scaled as ss_wait_budget scales it (price * total). */
int64_t ss_wait_nap(int64_t low, uint32_t moves, uint32_t total, int64_t best, int64_t w,
                    int64_t cap, int64_t price, int64_t slack, int64_t timeout_ns);
/* At each clock read of a spin: 1 if the spin must stop because it lost
 * its core (more than W since its last read); the process is then taken to
 * be contended. */
int ss_spin_preempted(ss_wait_stats *ws, ss_spin *s, int64_t now);
/* The wait is over: record how long it took. woke_ns: for a wait that
 * slept, how long after its publication it woke (the publication's time is
 * known: a stream), -1 if unknown. */
void ss_spin_end(ss_wait_stats *ws, const ss_spin *s, enum ss_wait_end how, int64_t now,
                 int64_t woke_ns);
/* What ss_wait_policy_info_get says, of any handle's statistics (a
 * segment's, a milk stream's). */
void ss_wait_stats_info(const ss_wait_stats *ws, ss_wait_policy_info *out);

/* n rounded up to a multiple of a (a > 0). */
static inline uint64_t ss_round_up(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

static inline void ss_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

#endif
