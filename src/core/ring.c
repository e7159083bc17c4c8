/* Channels: a bounded lock-free SPSC ring of variable-size records.
 *
 * The producer owns `head` (bytes published), the consumer owns `tail`
 * (bytes released); each sits alone on its 64-byte line. Records are
 * written and read with plain stores and loads and published by the
 * release store of head (data) or tail (space). The ring is mapped twice
 * back to back, so records never split. Protocol: docs/ABI.md, "Channels". */
#define _GNU_SOURCE
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core_helpers.h"

/* The documented offsets (docs/ABI.md); a change here is a layout bump. */
static_assert(offsetof(ss_header, kind_area) == SS_RING_CONTROL_OFFSET, "ring control offset");
static_assert(sizeof(ss_ring_control) <= SS_HEADER_BYTES - SS_RING_CONTROL_OFFSET, "fits");
static_assert(offsetof(ss_ring_control, head) == 0, "head at 2240");
static_assert(offsetof(ss_ring_control, tail) == 64, "tail at 2304");
static_assert(offsetof(ss_ring_control, producer) == 128, "producer at 2368");
static_assert(offsetof(ss_ring_control, consumer) == 192, "consumer at 2432");
static_assert(offsetof(ss_ring_control, space) == 256, "space at 2496");
static_assert(sizeof(ss_ring_index_line) == 64 && sizeof(ss_ring_end_line) == 64 &&
                  sizeof(ss_ring_sleep_line) == 64,
              "one line each");
static_assert(offsetof(ss_ring_sleep_line, want) == 8, "space.want at 2504");
static_assert(offsetof(ss_ring_end_line, state) == 8 &&
                  offsetof(ss_ring_end_line, attaches) == 16 &&
                  offsetof(ss_ring_end_line, takeovers) == 24 &&
                  offsetof(ss_ring_end_line, pid) == 32 &&
                  offsetof(ss_ring_end_line, pidns_ino) == 40,
              "end line fields");
static_assert(offsetof(ss_header, notify) == 2176, "consumer sleeps on the notify line");
static_assert(sizeof(ss_msg_header) == SS_MSG_HEADER_BYTES, "record header");
static_assert(offsetof(ss_msg_header, type_id) == 4 && offsetof(ss_msg_header, flags) == 8 &&
                  offsetof(ss_msg_header, meta_len) == 12 &&
                  offsetof(ss_msg_header, payload_off) == 14,
              "record header fields");

/* A waiting end checks that its peer is alive this often. */
#define SS_PEER_CHECK_NS (100 * 1000 * 1000LL)

static uint32_t payload_off(uint32_t meta_len) {
  return meta_len ? (uint32_t)ss_round_up(SS_MSG_HEADER_BYTES + meta_len, SS_MSG_ALIGN)
                  : SS_MSG_HEADER_BYTES;
}

static uint64_t record_len(uint32_t off, uint64_t size) {
  return ss_round_up(off + size, SS_MSG_ALIGN);
}

static ss_ring_end_line *own_end(const ss_channel *ch, int role) {
  return role == SS_ROLE_PRODUCER ? &ch->ctl->producer : &ch->ctl->consumer;
}

/* ---- validation and mapping ------------------------------------------- */

static int validate_channel(const ss_segment *seg) {
  const ss_identity *id = &seg->id;
  uint64_t c = id->payload_bytes;
  if (id->kind != SS_KIND_CHANNEL) return SS_EKIND;
  if (id->slot_count != 1 || id->slot_stride != c || c < SS_CHANNEL_MIN_CAPACITY ||
      c > SS_CHANNEL_MAX_CAPACITY || (c & (c - 1)) != 0)
    return SS_ECORRUPT;
  return SS_OK;
}

/* Replace the segment's mapping by header + ring + ring again, so that
 * ring[i] and ring[i + capacity] are the same byte. */
static int map_mirror(ss_channel *ch) {
  uint64_t cap = ch->seg.id.payload_bytes;
  size_t total = SS_HEADER_BYTES + 2 * cap;
  int fd = ss_open_regular(ch->seg.segname, O_RDWR);
  if (fd < 0) return -fd;
  if (ss_owner_same(fd, &ch->seg) != SS_OK) return close(fd), ESTALE; /* replaced since open */
  uint8_t *va = mmap(NULL, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (va == MAP_FAILED) {
    int err = errno;
    close(fd);
    return err;
  }
  int prot = PROT_READ | PROT_WRITE;
  int flags = MAP_SHARED | MAP_FIXED | SS_MAP_POPULATE;
  if (mmap(va, SS_HEADER_BYTES + cap, prot, flags, fd, 0) == MAP_FAILED ||
      mmap(va + SS_HEADER_BYTES + cap, cap, prot, flags, fd, SS_HEADER_BYTES) == MAP_FAILED) {
    int err = errno;
    munmap(va, total);
    close(fd);
    return err;
  }
  close(fd);
  /* The name could have been unlinked and created again since we validated
   * it: the generation (instance id) must be the one we checked. */
  if (memcmp(((ss_header *)va)->id.instance_id, ch->seg.id.instance_id, 16) != 0) {
    munmap(va, total);
    return ESTALE;
  }
  ss_segment_unmap(&ch->seg); /* the fd and its lease stay */
  ch->seg.base = va;
  ch->seg.hdr = (ss_header *)va;
  ch->seg.map_bytes = total;
  ss_guard_attach(&ch->seg);
  ch->ctl = (ss_ring_control *)(va + SS_RING_CONTROL_OFFSET);
  ch->ring = va + SS_HEADER_BYTES;
  ch->capacity = cap;
  return SS_OK;
}

/* ---- ownership ------------------------------------------------------------ */

/* Whether the owner an end's word names is alive: by lease, from any PID
 * namespace; one that cannot be tested counts as alive. */
static int word_alive(const ss_segment *seg, uint64_t word) {
  return word && ss_lease_alive(seg, word) != 0;
}

static int claim(ss_channel *ch, int role) {
  ss_ring_end_line *e = own_end(ch, role);
  uint64_t mine = ss_lease_self(&ch->seg);
  if (!mine) return EINVAL; /* no lease: ss_lease_take was not called */
  uint64_t cur = atomic_load_explicit(&e->owner, memory_order_acquire);
  int takeover;
  do {
    takeover = cur != 0;
    if (takeover && word_alive(&ch->seg, cur)) return SS_EATTACHED;
    /* SYNC POINT (o1): the claim is one CAS on the owner word, so of two
     * processes claiming (or taking over) at once exactly one wins; acquire
     * pairs with the previous owner's release in ss_channel_detach. */
  } while (!atomic_compare_exchange_strong_explicit(&e->owner, &cur, mine, memory_order_acq_rel,
                                                    memory_order_acquire));
  atomic_fetch_add_explicit(&e->attaches, 1, memory_order_relaxed);
  {
    /* For humans only (stat, messages): nothing decides by them. */
    uint32_t dev;
    uint64_t ino;
    ss_pidns_self(&dev, &ino);
    atomic_store_explicit(&e->pid, ss_self_pid(), memory_order_relaxed);
    atomic_store_explicit(&e->pidns_ino, ino, memory_order_relaxed);
  }
  if (takeover) {
    atomic_fetch_add_explicit(&e->takeovers, 1, memory_order_relaxed);
    /* The dead owner may have died asleep, still counted on the line this
     * end sleeps on; it was the only sleeper there, and we do not sleep yet. */
    SS_ATOMIC(uint32_t) *line = role == SS_ROLE_PRODUCER ? &ch->ctl->space.waiters
                                                         : &ch->seg.hdr->notify.waiters;
    atomic_store_explicit(line, 0, memory_order_relaxed);
  }
  atomic_store_explicit(&e->state, SS_END_ATTACHED, memory_order_release);
  ch->role = role;
  ch->owner_word = mine;
  /* SYNC POINT (o2): acquire loads of both indices: a new producer continues at
   * the published head (a dead one's unpublished records are dropped), a new
   * consumer at the released tail (a dead one's unreleased messages are
   * delivered again). */
  uint64_t head = atomic_load_explicit(&ch->ctl->head.pos, memory_order_acquire);
  uint64_t tail = atomic_load_explicit(&ch->ctl->tail.pos, memory_order_acquire);
  ch->head = ch->head_pub = ch->head_cache = head;
  ch->tail = ch->rd = ch->tail_cache = tail;
  return SS_OK;
}

/* The peer end: closed is two loads; dead needs /proc, so only when `deep`. */
static int peer_check(ss_channel *ch, int deep, int32_t *peer_pid) {
  ss_ring_end_line *e = own_end(ch,
                                ch->role == SS_ROLE_PRODUCER ? SS_ROLE_CONSUMER : SS_ROLE_PRODUCER);
  /* SYNC POINT (o4): owner then state, both acquire; detach stores state before
   * clearing the owner, so an empty owner with CLOSED means a clean close. */
  uint64_t o = atomic_load_explicit(&e->owner, memory_order_acquire);
  if (peer_pid) *peer_pid = atomic_load_explicit(&e->pid, memory_order_relaxed);
  if (o) {
    if (o == ch->peer_dead) return SS_EPEERDEAD;
    if (!deep || word_alive(&ch->seg, o)) return SS_OK;
    ch->peer_dead = o;
    return SS_EPEERDEAD;
  }
  uint32_t st = atomic_load_explicit(&e->state, memory_order_acquire);
  return st == SS_END_CLOSED ? SS_EPEERCLOSED : SS_OK;
}

int ss_channel_peer_status(const ss_channel *ch, int32_t *peer_pid) {
  ss_channel tmp = *ch; /* the caller's rate-limit state stays as it was */
  return peer_check(&tmp, 1, peer_pid);
}

/* ---- waiting -------------------------------------------------------------- */

/* Wake the sleepers of a line if any. `index` is the value just stored;
 * with `want` (the producer's space line) a sleeper whose target is not
 * reached yet is left asleep: no syscall per released message. */
/* A line's sleeper count stays > 0 if its only possible sleeper (the end
 * that sleeps there) died asleep, and every publish would then make a
 * FUTEX_WAKE for nobody. When a wake woke nobody, the waker checks that
 * end's owner and, if it is dead, takes the count back to 0 (a CAS, so a
 * new owner's own count is never lost). A takeover also resets it. */
static void heal_line(ss_channel *ch, SS_ATOMIC(uint32_t) *waiters, ss_ring_end_line *sleeper) {
  int64_t now = ss_monotonic_ns();
  if (now < ch->next_heal_ns) return;
  ch->next_heal_ns = now + SS_HEAL_INTERVAL_NS;
  uint32_t w = atomic_load_explicit(waiters, memory_order_relaxed);
  uint64_t o = atomic_load_explicit(&sleeper->owner, memory_order_acquire);
  if (w && (o == 0 || !word_alive(&ch->seg, o)))
    atomic_compare_exchange_strong_explicit(waiters, &w, 0, memory_order_relaxed,
                                            memory_order_relaxed);
}

/* Wake the sleepers of a line if any (`force`: whether or not any is
 * counted). `sleeper` is the end that sleeps on the line. */
static void wake_line(ss_channel *ch, SS_ATOMIC(uint32_t) *wake_seq, SS_ATOMIC(uint32_t) *waiters,
                      ss_ring_end_line *sleeper, int force) {
  /* SYNC POINT (k1): pairs with the waiter's fence in wait_index (k2): either we see
   * its waiters count, or it sees the index we stored before this fence. */
  atomic_thread_fence(memory_order_seq_cst);
  uint32_t counted = atomic_load_explicit(waiters, memory_order_relaxed);
  if (force || counted > 0) {
    atomic_fetch_add_explicit(wake_seq, 1, memory_order_release);
    if (ss_futex_wake(wake_seq) == 0 && counted > 0) heal_line(ch, waiters, sleeper);
  }
}

static int cancelled(ss_channel *ch) {
  return atomic_load_explicit(&ch->seg.cancelled, memory_order_acquire);
}

/* Sleep on wake_seq until *word >= target (SS_OK, *out set) or `until`
 * (SS_ETIMEDOUT); every 100 ms (and before giving up) check the peer. */
static int sleep_index(ss_channel *ch, SS_ATOMIC(uint64_t) *word, uint64_t target,
                       SS_ATOMIC(uint32_t) *wake_seq, SS_ATOMIC(uint32_t) *waiters, int64_t until,
                       uint64_t *out) {
  uint64_t v;
  for (;;) {
    int64_t now = ss_monotonic_ns();
    int deep = now >= ch->next_peer_check;
    if (deep) ch->next_peer_check = now + SS_PEER_CHECK_NS;
    {
      int rc = peer_check(ch, deep, NULL);
      if (rc != SS_OK) {
        /* What the peer published before it left is still delivered. */
        v = atomic_load_explicit(word, memory_order_acquire);
        if (v >= target) {
          *out = v;
          return SS_OK;
        }
        return rc;
      }
    }
    if (cancelled(ch)) return SS_ECANCELLED;
    if (now >= until) return SS_ETIMEDOUT;
    /* SYNC POINT (k2): read wake_seq, announce ourselves, fence, re-check the
     * index: either the waker (store index; fence; read waiters) sees us
     * and bumps wake_seq, or we see its index, or wake_seq has moved and
     * FUTEX_WAIT returns at once. No lost wake-up. */
    uint32_t w = atomic_load_explicit(wake_seq, memory_order_acquire);
    atomic_fetch_add_explicit(waiters, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
    v = atomic_load_explicit(word, memory_order_acquire);
    if (v >= target) {
      atomic_fetch_sub_explicit(waiters, 1, memory_order_relaxed);
      *out = v;
      return SS_OK;
    }
    int64_t end = until < ch->next_peer_check ? until : ch->next_peer_check;
    int64_t left = end - now;
    ss_futex_wait(wake_seq, w, left < 0 ? 0 : left);
    atomic_fetch_sub_explicit(waiters, 1, memory_order_relaxed);
    v = atomic_load_explicit(word, memory_order_acquire);
    if (v >= target) {
      *out = v;
      return SS_OK;
    }
  }
}

/* Wait until *word >= target: the policy's nap if it chose one, the spin,
 * then the sleep (sleep_index). */
static int wait_index(ss_channel *ch, SS_ATOMIC(uint64_t) *word, uint64_t target,
                      SS_ATOMIC(uint32_t) *wake_seq, SS_ATOMIC(uint32_t) *waiters,
                      int64_t timeout_ns, uint64_t *out) {
  uint64_t v;
  /* ch->spin_ns is the cap: the policy (docs/waiting.md) picks the budget. */
  ss_spin sp;
  ss_wait_stats *ws = &ch->seg.wait;
  ss_spin_begin(ws, ch->spin_ns, timeout_ns, ss_monotonic_ns(), &sp);
  int64_t now;
  if (sp.nap_end > sp.start) {
    int rc = sleep_index(ch, word, target, wake_seq, waiters, sp.nap_end, out);
    if (rc == SS_OK) ss_spin_end(ws, &sp, SS_WAIT_WOKEN, ss_monotonic_ns(), -1);
    if (rc != SS_ETIMEDOUT) return rc;
    ss_spin_nap_over(&sp, ss_monotonic_ns());
  }
  for (unsigned i = 1; sp.end > sp.start; i++) {
    ss_cpu_relax();
    v = atomic_load_explicit(word, memory_order_acquire);
    if (v >= target) {
      ss_spin_end(ws, &sp, SS_WAIT_CAUGHT, ss_monotonic_ns(), -1);
      *out = v;
      return SS_OK;
    }
    if ((i & 15) == 0) {
      if (cancelled(ch)) return SS_ECANCELLED;
      now = ss_monotonic_ns();
      if (now >= sp.end || ss_spin_preempted(ws, &sp, now)) break;
    }
  }
  int rc = sleep_index(ch, word, target, wake_seq, waiters, sp.deadline, out);
  if (rc == SS_OK || rc == SS_ETIMEDOUT)
    ss_spin_end(ws, &sp, rc == SS_OK ? SS_WAIT_WOKEN : SS_WAIT_TIMED_OUT, ss_monotonic_ns(), -1);
  return rc;
}

/* ---- lifecycle ------------------------------------------------------------ */

static void init_local(ss_channel *ch) {
  ch->spin_ns = ss_default_spin_ns();
  ch->batch = 1;
}

int ss_channel_create(ss_channel *ch, const char *name, uint64_t capacity, int role,
                      uint32_t mode) {
  memset(ch, 0, sizeof *ch);
  if (role != SS_ROLE_PRODUCER && role != SS_ROLE_CONSUMER) return SS_EROLE;
  if (capacity < SS_CHANNEL_MIN_CAPACITY || capacity > SS_CHANNEL_MAX_CAPACITY ||
      (capacity & (capacity - 1)) != 0)
    return EINVAL;
  ss_create_args a;
  memset(&a, 0, sizeof a);
  a.name = name;
  a.kind = SS_KIND_CHANNEL;
  a.dtype = "";
  a.payload_bytes = capacity;
  a.mode = mode;
  a.slots = 1; /* the ring is the one payload; mapped twice back to back */
  int rc = ss_segment_create(&ch->seg, &a);
  if (rc) return rc;
  init_local(ch);
  if ((rc = map_mirror(ch)) != SS_OK || (rc = claim(ch, role)) != SS_OK) {
    ss_segment_unlink_segname(ch->seg.segname);
    ss_segment_close(&ch->seg);
    return rc;
  }
  return SS_OK;
}

int ss_channel_open(ss_channel *ch, const char *name, size_t len, int role) {
  return ss_channel_open_ex(ch, name, len, role, NULL);
}

int ss_channel_open_ex(ss_channel *ch, const char *name, size_t len, int role,
                       const ss_open_opts *opts) {
  memset(ch, 0, sizeof *ch);
  if (role != SS_ROLE_PRODUCER && role != SS_ROLE_CONSUMER) return SS_EROLE;
  int rc = ss_segment_open_ex(&ch->seg, name, len, SS_KIND_CHANNEL, 0, opts);
  if (rc) return rc;
  init_local(ch);
  if ((rc = validate_channel(&ch->seg)) != SS_OK || (rc = map_mirror(ch)) != SS_OK ||
      (rc = claim(ch, role)) != SS_OK) {
    ss_segment_close(&ch->seg);
    return rc;
  }
  return SS_OK;
}

void ss_channel_detach(ss_channel *ch) {
  if (!ch->role || !ch->ctl) return;
  int role = ch->role;
  ss_ring_end_line *e = own_end(ch, role);
  if (role == SS_ROLE_PRODUCER) {
    ss_channel_rollback_tx(ch);
    ss_channel_flush(ch);
  }
  /* Bytes still pinned by views (skip_rx without release_rx) stay unreleased:
   * the next consumer receives those messages again. */
  /* SYNC POINT (o3): state CLOSED, then the owner word cleared, both release:
   * a peer that acquire-loads an empty owner sees CLOSED and (producer)
   * every head published before. Only our own claim is cleared. */
  uint64_t mine = ch->owner_word;
  if (atomic_load_explicit(&e->owner, memory_order_relaxed) == mine) {
    atomic_store_explicit(&e->state, SS_END_CLOSED, memory_order_release);
    SS_CRASH_POINT("ring.detach");
    atomic_compare_exchange_strong_explicit(&e->owner, &mine, 0, memory_order_release,
                                            memory_order_relaxed);
  }
  ch->role = 0;
  /* Wake the peer if it sleeps, so it learns at once. */
  if (role == SS_ROLE_PRODUCER)
    wake_line(ch, &ch->seg.hdr->notify.wake_seq, &ch->seg.hdr->notify.waiters, &ch->ctl->consumer,
              1);
  else
    wake_line(ch, &ch->ctl->space.wake_seq, &ch->ctl->space.waiters, &ch->ctl->producer, 1);
}

void ss_channel_close(ss_channel *ch) {
  ss_channel_detach(ch);
  /* The zero-copy holds (rx_holds.c) name bytes of the ring unmapped now. */
  free(ch->holds);
  ch->holds = NULL;
  ch->holds_cap = ch->holds_first = ch->holds_n = 0;
  ss_segment_close(&ch->seg);
  ch->ctl = NULL;
  ch->ring = NULL;
}

int ss_channel_unlink(const char *name, size_t len) { return ss_segment_unlink(name, len); }

uint64_t ss_channel_max_message(const ss_channel *ch, uint32_t meta_len) {
  if (meta_len > SS_MSG_MAX_META) return 0;
  return ch->capacity - payload_off(meta_len);
}

void ss_channel_cancel(ss_channel *ch) {
  atomic_store_explicit(&ch->seg.cancelled, 1, memory_order_release);
  if (!ch->ctl) return;
  wake_line(ch, &ch->seg.hdr->notify.wake_seq, &ch->seg.hdr->notify.waiters, &ch->ctl->consumer, 1);
  wake_line(ch, &ch->ctl->space.wake_seq, &ch->ctl->space.waiters, &ch->ctl->producer, 1);
}

/* ---- producer ------------------------------------------------------------- */

void ss_channel_set_batch(ss_channel *ch, uint32_t batch) { ch->batch = batch ? batch : 1; }

void ss_channel_flush(ss_channel *ch) {
  if (ch->role != SS_ROLE_PRODUCER || ch->head == ch->head_pub) return;
  SS_CRASH_POINT("ring.record");
  /* SYNC POINT (rh1): the release store of head publishes every record byte
   * written before it; pairs with the consumer's acquire load of head. */
  atomic_store_explicit(&ch->ctl->head.pos, ch->head, memory_order_release);
  SS_CRASH_POINT("ring.head");
  ch->head_pub = ch->head;
  ch->pending = 0;
  wake_line(ch, &ch->seg.hdr->notify.wake_seq, &ch->seg.hdr->notify.waiters, &ch->ctl->consumer, 0);
}

static int consumer_closed(const ss_channel *ch) {
  const ss_ring_end_line *e = &ch->ctl->consumer;
  /* Two loads of a line the consumer writes only when it attaches or
   * leaves: cheap enough for every send. Death is noticed while waiting. */
  return atomic_load_explicit(&((ss_ring_end_line *)e)->state, memory_order_relaxed) ==
             SS_END_CLOSED &&
         atomic_load_explicit(&((ss_ring_end_line *)e)->owner, memory_order_relaxed) == 0;
}

int ss_channel_acquire_tx(ss_channel *ch, size_t size, uint32_t meta_len, int64_t timeout_ns,
                          void **payload, void **meta) {
  if (ch->role != SS_ROLE_PRODUCER || ch->tx_open) return SS_EROLE;
  if (ss_mapping_lost(&ch->seg)) return SS_ECORRUPT;
  if (meta_len > SS_MSG_MAX_META || size > UINT32_MAX) return SS_ETOOBIG;
  uint32_t off = payload_off(meta_len);
  uint64_t len = record_len(off, size);
  if (len > ch->capacity) return SS_ETOOBIG;
  /* head came from the shared index word (claim): off the record grid it is
   * corrupt, and a record header written there would be misaligned. */
  if (ch->head % SS_MSG_ALIGN) return SS_ECORRUPT;
  if (consumer_closed(ch)) return SS_EPEERCLOSED;
  if (ch->head + len - ch->tail_cache > ch->capacity) {
    /* SYNC POINT (t2): acquire load of tail: the consumer's reads of the bytes
     * it released happen before we overwrite them. */
    ch->tail_cache = atomic_load_explicit(&ch->ctl->tail.pos, memory_order_acquire);
    if (ch->head + len - ch->tail_cache > ch->capacity) {
      /* The consumer cannot free room for messages it cannot see. */
      ss_channel_flush(ch);
      uint64_t t;
      /* SYNC POINT (rw1): want is stored (relaxed) before waiting; the
       * waiter's seq_cst fence in wait_index (k2) orders it before the
       * consumer's check (k3) (one producer, so one want). */
      atomic_store_explicit(&ch->ctl->space.want, ch->head + len - ch->capacity,
                            memory_order_relaxed);
      int rc = wait_index(ch, &ch->ctl->tail.pos, ch->head + len - ch->capacity,
                          &ch->ctl->space.wake_seq, &ch->ctl->space.waiters, timeout_ns, &t);
      if (rc) return rc;
      ch->tail_cache = t;
    }
  }
  ss_msg_header *h = (ss_msg_header *)(ch->ring + (ch->head & (ch->capacity - 1)));
  h->meta_len = (uint16_t)meta_len;
  h->payload_off = (uint16_t)off;
  if (meta) *meta = (uint8_t *)h + SS_MSG_HEADER_BYTES;
  *payload = (uint8_t *)h + off;
  ch->tx_open = 1;
  ch->tx_cap = size;
  ch->tx_meta = meta_len;
  return SS_OK;
}

void ss_channel_commit_tx(ss_channel *ch, size_t size, uint32_t type_id, uint32_t flags) {
  if (!ch->tx_open) return;
  if (size > ch->tx_cap) size = ch->tx_cap;
  ss_msg_header *h = (ss_msg_header *)(ch->ring + (ch->head & (ch->capacity - 1)));
  h->size = (uint32_t)size;
  h->type_id = type_id;
  h->flags = flags;
  ch->head += record_len(h->payload_off, size);
  ch->tx_open = 0;
  if (++ch->pending >= ch->batch) ss_channel_flush(ch);
}

void ss_channel_rollback_tx(ss_channel *ch) { ch->tx_open = 0; }

/* ---- consumer ------------------------------------------------------------- */

int ss_channel_acquire_rx(ss_channel *ch, int64_t timeout_ns, ss_msg *m) {
  if (ch->role != SS_ROLE_CONSUMER) return SS_EROLE;
  if (ss_mapping_lost(&ch->seg)) return SS_ECORRUPT;
  if (ch->rd == ch->head_cache) {
    /* SYNC POINT (rh2): acquire load of head pairs with the producer's release
     * store: every byte of the records before head is visible. */
    ch->head_cache = atomic_load_explicit(&ch->ctl->head.pos, memory_order_acquire);
    if (ch->rd == ch->head_cache) {
      uint64_t v;
      int rc = wait_index(ch, &ch->ctl->head.pos, ch->rd + 1, &ch->seg.hdr->notify.wake_seq,
                          &ch->seg.hdr->notify.waiters, timeout_ns, &v);
      if (rc) return rc;
      ch->head_cache = v;
    }
  }
  /* The record header is input from another process: read each field once
   * and check it before it sizes any view. A cursor off the 64-byte record
   * grid came from a corrupt tail word (claim): no header starts there. */
  if (ch->rd % SS_MSG_ALIGN) return SS_ECORRUPT;
  const ss_msg_header *h = (const ss_msg_header *)(ch->ring + (ch->rd & (ch->capacity - 1)));
  uint32_t size = h->size, off = h->payload_off, meta_len = h->meta_len;
  uint64_t avail = ch->head_cache - ch->rd;
  if (off < SS_MSG_HEADER_BYTES || off % 16 || SS_MSG_HEADER_BYTES + meta_len > off ||
      record_len(off, size) > avail || avail > ch->capacity)
    return SS_ECORRUPT;
  m->type_id = h->type_id;
  m->flags = h->flags;
  m->size = size;
  m->meta_len = meta_len;
  m->meta = (const uint8_t *)h + SS_MSG_HEADER_BYTES;
  m->data = (const uint8_t *)h + off;
  m->pos = ch->rd;
  m->end = ch->rd + record_len(off, size);
  ch->rx_len = m->end - m->pos;
  return SS_OK;
}

void ss_channel_skip_rx(ss_channel *ch) {
  ch->rd += ch->rx_len;
  ch->rx_len = 0;
  SS_CRASH_POINT("ring.read"); /* read, not yet released */
}

void ss_channel_release_rx(ss_channel *ch, uint64_t upto) {
  if (ch->role != SS_ROLE_CONSUMER || upto <= ch->tail || upto > ch->rd) return;
  ch->tail = upto;
  SS_CRASH_POINT("ring.release");
  /* SYNC POINT (t1): the release store of tail orders our reads of the
   * released bytes before the producer's reuse (it acquire-loads tail). */
  atomic_store_explicit(&ch->ctl->tail.pos, upto, memory_order_release);
  SS_CRASH_POINT("ring.tail");
  /* SYNC POINT (k3): the fence in wake_line orders the tail store before the
   * loads of waiters and want (the producer stores want, then waiters, then
   * fences, then re-reads tail). */
  atomic_thread_fence(memory_order_seq_cst);
  ss_ring_sleep_line *sl = &ch->ctl->space;
  if (atomic_load_explicit(&sl->waiters, memory_order_relaxed) > 0 &&
      upto >= atomic_load_explicit(&sl->want, memory_order_relaxed))
    wake_line(ch, &sl->wake_seq, &sl->waiters, &ch->ctl->producer, 1);
}

void ss_channel_commit_rx(ss_channel *ch) {
  ss_channel_skip_rx(ch);
  ss_channel_release_rx(ch, ch->rd);
}

/* ---- the opaque handle's allocation (include/shmstream_channel.h) -------- */

ss_channel *ss_channel_new(void) { return calloc(1, sizeof(ss_channel)); }

/* ---- the handle's state, for the binding (include/shmstream_unstable.h) - */

int ss_channel_attached(const ss_channel *ch) { return ch->role != 0 && ch->ctl != NULL; }
const ss_segment *ss_channel_segment(const ss_channel *ch) { return &ch->seg; }
uint64_t ss_channel_capacity(const ss_channel *ch) { return ch->capacity; }
int ss_channel_role(const ss_channel *ch) { return ch->role; }
int ss_channel_tx_open(const ss_channel *ch) { return ch->tx_open; }
uint32_t ss_channel_batch(const ss_channel *ch) { return ch->batch; }
uint32_t ss_channel_pending(const ss_channel *ch) { return ch->pending; }
int64_t ss_channel_spin_ns(const ss_channel *ch) { return ch->spin_ns; }
void ss_channel_set_spin_ns(ss_channel *ch, int64_t spin_ns) {
  ch->spin_ns = spin_ns < 0 ? ss_default_spin_ns() : spin_ns;
}
uint64_t ss_channel_rx_cursor(const ss_channel *ch) { return ch->rd; }
uint64_t ss_channel_rx_released(const ss_channel *ch) { return ch->tail; }

static void end_words(const ss_segment *seg, const ss_ring_end_line *e, ss_ring_end_words *out) {
  uint64_t o = atomic_load_explicit(&e->owner, memory_order_acquire);
  out->pid = o ? atomic_load_explicit(&e->pid, memory_order_relaxed) : 0;
  out->pidns_ino = o ? atomic_load_explicit(&e->pidns_ino, memory_order_relaxed) : 0;
  out->owner = o;
  out->alive = word_alive(seg, o);
  out->state = atomic_load_explicit(&e->state, memory_order_relaxed);
  out->attaches = atomic_load_explicit(&e->attaches, memory_order_relaxed);
  out->takeovers = atomic_load_explicit(&e->takeovers, memory_order_relaxed);
}

void ss_ring_words_get(const ss_segment *seg, ss_ring_words *out) {
  const ss_ring_control *ctl = (const ss_ring_control *)((const uint8_t *)seg->hdr +
                                                         SS_RING_CONTROL_OFFSET);
  out->head = atomic_load_explicit(&ctl->head.pos, memory_order_relaxed);
  out->tail = atomic_load_explicit(&ctl->tail.pos, memory_order_relaxed);
  end_words(seg, &ctl->producer, &out->producer);
  end_words(seg, &ctl->consumer, &out->consumer);
}

void ss_channel_free(ss_channel *ch) {
  if (!ch) return;
  if (ch->seg.base) ss_channel_close(ch);
  free(ch);
}
