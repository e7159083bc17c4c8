/* shmstream channels: a bounded lock-free single-producer single-consumer
 * ring of variable-size messages in one named shared-memory segment.
 *
 * Included from the end of shmstream.h; a C producer or consumer includes
 * shmstream.h and links the core (the C files in src/core). docs/ABI.md ("Channels")
 * describes the layout and the protocol; src/core/ring.c implements it and
 * pins every offset below with static_assert.
 *
 * Layout of a channel segment (kind SS_KIND_CHANNEL):
 *   0     the common 4096-byte header; identity block as for streams, with
 *         payload_bytes = slot_stride = capacity (a power of two >= 4096),
 *         slot_count 1, ndim 0, dtype "".
 *   2176  notify line: the consumer sleeps here waiting for data
 *   2240  ss_ring_control: five 64-byte lines in the kind-specific area
 *   4096  the ring: capacity bytes of records
 * The ring is mapped twice back to back in each process, so a record that
 * runs past the end of the ring is contiguous in memory.
 */
#ifndef SHMSTREAM_CHANNEL_H
#define SHMSTREAM_CHANNEL_H

#include "shmstream.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SS_CHANNEL_MIN_CAPACITY 4096u
#define SS_CHANNEL_MAX_CAPACITY (1ull << 40)
#define SS_RING_CONTROL_OFFSET 2240u
#define SS_MSG_HEADER_BYTES 16u  /* record header */
#define SS_MSG_ALIGN 64u         /* records start on 64-byte boundaries */
#define SS_MSG_MAX_META 4000u    /* array metadata bytes per message */

/* Channel status codes (SS_EPEERDEAD ... SS_EROLE) are in enum ss_status
 * (shmstream.h). */

enum ss_role { SS_ROLE_PRODUCER = 1, SS_ROLE_CONSUMER = 2 };

/* ss_ring_end_line.state */
enum ss_end_state {
  SS_END_NONE = 0,     /* never attached */
  SS_END_ATTACHED = 1, /* attached (the owner word says by whom) */
  SS_END_CLOSED = 2    /* detached cleanly: end of stream / broken pipe */
};

/* Record flags. */
enum ss_msg_flags {
  SS_MSG_ARRAY = 1u << 0 /* meta holds dtype and shape (docs/ABI.md) */
};

/* ---- shared control words (ring control area at 2240) ----------------- */

typedef struct ss_ring_index_line {
  SS_ATOMIC(uint64_t) pos;         /* bytes ever published / released */
  uint8_t pad_[56];
} ss_ring_index_line;

typedef struct ss_ring_end_line {
  /* The owner handle's lease number (docs/ABI.md, "Liveness leases"), 0
   * when no process holds this end. One word, so a claim or takeover is a
   * single compare-and-swap. */
  SS_ATOMIC(uint64_t) owner;
  SS_ATOMIC(uint32_t) state;       /* enum ss_end_state */
  uint32_t pad0_;
  SS_ATOMIC(uint64_t) attaches;    /* claims, takeovers included */
  SS_ATOMIC(uint64_t) takeovers;   /* claims that replaced a dead owner */
  /* For humans only (stat, messages): the owner's pid in its own PID
   * namespace and that namespace's st_ino; liveness is by lease. */
  SS_ATOMIC(int32_t) pid;
  uint32_t pad1_;
  SS_ATOMIC(uint64_t) pidns_ino;
  uint8_t pad_[16];
} ss_ring_end_line;

typedef struct ss_ring_sleep_line {
  SS_ATOMIC(uint32_t) wake_seq;    /* futex word */
  SS_ATOMIC(uint32_t) waiters;     /* sleepers, or about to sleep */
  SS_ATOMIC(uint64_t) want;        /* the index value the sleeper waits for */
  uint8_t pad_[48];
} ss_ring_sleep_line;

typedef struct ss_ring_control {   /* at SS_RING_CONTROL_OFFSET */
  ss_ring_index_line head;         /* 2240 written by the producer only */
  ss_ring_index_line tail;         /* 2304 written by the consumer only */
  ss_ring_end_line producer;       /* 2368 */
  ss_ring_end_line consumer;       /* 2432 */
  ss_ring_sleep_line space;        /* 2496 the producer sleeps here */
} ss_ring_control;

/* Every record starts with this header, 64-byte aligned in the ring. */
typedef struct ss_msg_header {
  uint32_t size;        /* payload bytes */
  uint32_t type_id;     /* the application's message type */
  uint32_t flags;       /* enum ss_msg_flags */
  uint16_t meta_len;    /* metadata bytes at +16 */
  uint16_t payload_off; /* payload offset from the record start */
} ss_msg_header;
/* Record length: round_up(payload_off + size, SS_MSG_ALIGN). payload_off is
 * 16 when meta_len is 0, else round_up(16 + meta_len, 64). */

/* ---- handles (process-local) ------------------------------------------- */

/* One end of a channel: an opaque handle, local to one process.
 * ss_channel_new allocates one (closed); ss_channel_create or _open fill
 * it; ss_channel_close detaches it, ss_channel_free releases it. */
typedef struct ss_channel ss_channel;
SS_API ss_channel *ss_channel_new(void); /* NULL: out of memory */
SS_API void ss_channel_free(ss_channel *ch); /* closes it first if open */

/* A received message; the pointers stay valid until it is released. */
typedef struct ss_msg {
  uint32_t type_id;
  uint32_t flags;
  size_t size;
  const void *data;
  const void *meta;
  uint32_t meta_len;
  uint64_t pos;             /* ring position of the record */
  uint64_t end;             /* position just past it */
} ss_msg;

/* ---- lifecycle (src/core/ring.c) ---------------------------------------- */

/* Create a channel of `capacity` bytes (a power of two >= 4096) and attach
 * as `role`. mode 0 means 0600. Returns 0, a positive errno (EEXIST, ...)
 * or a negative status. */
SS_API int ss_channel_create(ss_channel *ch, const char *name, uint64_t capacity, int role,
                             uint32_t mode);
/* Attach to an existing channel as `role`. SS_EATTACHED if a live process
 * holds that end; a dead holder is replaced (ch->... takeovers counts it). */
SS_API int ss_channel_open(ss_channel *ch, const char *name, size_t len, int role);
/* ss_channel_open with the options of ss_segment_open_ex (owners allowed
 * besides the caller's euid; opts may be NULL): SS_EOWNER, SS_EPIDNS. */
SS_API int ss_channel_open_ex(ss_channel *ch, const char *name, size_t len, int role,
                              const ss_open_opts *opts);
/* Publish what is pending, give up the role (the peer sees SS_END_CLOSED),
 * wake the peer. The mapping stays; ss_channel_close unmaps. */
SS_API void ss_channel_detach(ss_channel *ch);
/* Detach (if attached) and unmap. */
SS_API void ss_channel_close(ss_channel *ch);
SS_API int ss_channel_unlink(const char *name, size_t len);

/* Largest payload one message can carry with meta_len metadata bytes. */
SS_API uint64_t ss_channel_max_message(const ss_channel *ch, uint32_t meta_len);

/* ---- producer ------------------------------------------------------------ */

/* Loan room for one message of up to `size` payload bytes and meta_len
 * metadata bytes. timeout_ns: 0 tries once, < 0 waits forever. While it
 * waits it publishes what is pending, spins, sleeps on the futex and checks
 * every 100 ms that the consumer is alive. Returns SS_OK, SS_ETIMEDOUT,
 * SS_ETOOBIG, SS_EPEERDEAD, SS_EPEERCLOSED, SS_ECANCELLED, SS_EROLE or
 * SS_ECORRUPT (the shared head word is not on a record boundary). */
SS_API int ss_channel_acquire_tx(ss_channel *ch, size_t size, uint32_t meta_len, int64_t timeout_ns,
                                 void **payload, void **meta);
/* Finish the loan with the payload bytes actually written (<= the loan). The
 * message is published now if `batch` messages are pending, else on a later
 * commit, on flush, or before the producer waits. */
SS_API void ss_channel_commit_tx(ss_channel *ch, size_t size, uint32_t type_id, uint32_t flags);
SS_API void ss_channel_rollback_tx(ss_channel *ch);
/* Publish every committed message and wake a sleeping consumer. */
SS_API void ss_channel_flush(ss_channel *ch);
/* Publish every `batch` messages (1: each message; the default). */
SS_API void ss_channel_set_batch(ss_channel *ch, uint32_t batch);

/* ---- consumer ------------------------------------------------------------ */

/* The next message, without releasing it. timeout_ns as for acquire_tx.
 * Returns SS_OK, SS_ETIMEDOUT, SS_EPEERDEAD / SS_EPEERCLOSED (the producer
 * is gone and everything it published has been received), SS_ECORRUPT (a
 * record header is impossible) or SS_ECANCELLED. */
SS_API int ss_channel_acquire_rx(ss_channel *ch, int64_t timeout_ns, ss_msg *msg);
/* Release the acquired message: its bytes may be reused by the producer. */
SS_API void ss_channel_commit_rx(ss_channel *ch);
/* Move past the acquired message but keep its bytes (and every later
 * message's) from reuse until ss_channel_release_rx(ch, end). */
SS_API void ss_channel_skip_rx(ss_channel *ch);
/* Release everything before ring position `upto` (<= the read cursor). */
SS_API void ss_channel_release_rx(ss_channel *ch, uint64_t upto);

/* Messages released out of order (src/core/rx_holds.c): a consumer that
 * keeps several zero-copy messages gives each back when it is done with
 * it, and the ring is freed in order, over the longest prefix of records
 * no one holds (docs/ABI.md, "Consume"). One thread at a time per handle,
 * as every consumer call.
 * hold_rx: move past the acquired message, holding its bytes (and every
 *   later message's) until ss_channel_unhold_rx(ch, msg.end); SS_OK or
 *   ENOMEM (then the message is released at once).
 * done_rx: everything read up to the read cursor (skipped messages, a
 *   copied one) is done: released now if nothing earlier is held, else when
 *   the holds before it end.
 * unhold_rx: the message that ends at `end` is done. The tail is published
 *   when nothing is held any more, or an eighth of the ring is free to give
 *   back: not once per message, as each publication may wake the producer.
 * flush_rx: publish now every byte the holds gave back (before a wait,
 *   at close). */
SS_API int ss_channel_hold_rx(ss_channel *ch);
SS_API void ss_channel_done_rx(ss_channel *ch);
SS_API void ss_channel_unhold_rx(ss_channel *ch, uint64_t end);
SS_API void ss_channel_flush_rx(ss_channel *ch);

/* ---- array metadata (src/core/msg_meta.c; docs/ABI.md, "Channels") ------ */

/* An array message's metadata: u32 ndim, u32 dtype_len, u64 shape[ndim],
 * then the dtype text, little-endian. Encoded and parsed here once, for
 * the bindings, the bridge and C programs. */
typedef struct ss_msg_meta {
  uint32_t ndim;               /* 0..SS_MAX_NDIM */
  uint32_t dtype_len;          /* bytes of dtype */
  uint64_t shape[SS_MAX_NDIM]; /* entries past ndim are 0 */
  const char *dtype;           /* the dtype text, inside the parsed bytes (no NUL) */
} ss_msg_meta;
/* Write m's metadata into out (cap bytes); the bytes written, or 0 if
 * ndim > SS_MAX_NDIM, or it would exceed SS_MSG_MAX_META or cap. */
SS_API size_t ss_msg_meta_encode(const ss_msg_meta *m, void *out, size_t cap);
/* Parse len bytes of metadata (another process wrote them: input) into
 * out, whose dtype points into meta. SS_OK, or SS_ECORRUPT if ndim >
 * SS_MAX_NDIM or the shape and text do not fit in len. */
SS_API int ss_msg_meta_parse(const void *meta, size_t len, ss_msg_meta *out);

/* ---- both ends -------------------------------------------------------------- */

/* The other end: SS_OK (attached and alive, or never attached yet),
 * SS_EPEERDEAD or SS_EPEERCLOSED. Reads /proc: not for the hot path. */
SS_API int ss_channel_peer_status(const ss_channel *ch, int32_t *peer_pid);
/* Make this handle's waits return SS_ECANCELLED (from another thread). */
SS_API void ss_channel_cancel(ss_channel *ch);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SHMSTREAM_CHANNEL_H */
