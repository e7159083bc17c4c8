/* shmstream public C API and on-memory ABI (one layout version per kind).
 *
 * This header is the ABI: docs/ABI.md describes every field below, and the
 * static_asserts at the end pin the documented offsets. A C or C++ process
 * that includes this header and links the core can create, open, write and
 * read streams that Python processes use at the same time.
 *
 * Every shared word is a fixed-width integer accessed with C11 atomics;
 * "SYNC POINT" comments in src/core/ mark each ordering decision.
 */
#ifndef SHMSTREAM_H
#define SHMSTREAM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#include <atomic>
#define SS_ATOMIC(t) std::atomic<t>
extern "C" {
#else
#include <stdatomic.h>
#define SS_ATOMIC(t) _Atomic(t)
#endif

#if defined(__GNUC__)
#define SS_API __attribute__((visibility("default")))
#else
#define SS_API
#endif

/* ---- constants --------------------------------------------------------- */

#define SS_MAGIC 0x314D5254534D4853ULL /* "SHMSTRM1" little-endian */
/* The one layout version of each kind (docs/ABI.md, "Layout versions"):
 * an opener refuses any other with SS_EVERSION. The numbers differ between
 * kinds; 2 was a pre-release stream layout and is never used again. */
#define SS_LAYOUT_VERSION_ARRAY 1u       /* a shared array */
#define SS_LAYOUT_VERSION_CHANNEL 3u     /* ends judged by leases */
#define SS_LAYOUT_VERSION_STREAM 4u      /* CPU or GPU, history or not: locked by lease */
#define SS_LAYOUT_VERSION_LOADER_POOL 5u /* an array with SS_FLAG_LOADER_POOL, locked by lease */
#define SS_HEADER_BYTES 4096u
#define SS_IDENTITY_BYTES 2048u /* checksummed, immutable after create */
#define SS_PAYLOAD_ALIGN 4096u
#define SS_MAX_NDIM 8u
#define SS_MAX_SLOTS 8u
#define SS_DEFAULT_SLOTS 2u
#define SS_MAX_HISTORY (1u << 20) /* publications a history stream keeps */
/* The largest count a write may set explicitly (a mirror's or a replay's
 * count, ss_publish_meta.count): 2^63 - 1, so that the count still grows
 * for 2^63 more writes. The count never wraps: it stops at UINT64_MAX
 * (docs/ABI.md, "Publish"). */
#define SS_MAX_COUNT (UINT64_MAX >> 1)
#define SS_SLOT_RECORD_BYTES 64u  /* one slot record (history streams) */
#define SS_MAX_NAME_BYTES 255u  /* user-visible name, UTF-8, no NUL */
#define SS_MAX_DTYPE_BYTES 1023u /* NumPy dtype description text */
#define SS_SEGMENT_PREFIX "/shmstream-"
#define SS_SEGMENT_NAME_MAX 64u /* incl. the leading '/' and the NUL */

enum ss_kind { SS_KIND_STREAM = 1, SS_KIND_CHANNEL = 2, SS_KIND_ARRAY = 3 };

enum ss_flags {
  SS_FLAG_NOTIFY = 1u << 0,    /* pyshmem's notify intent, kept for stat() */
  SS_FLAG_GPU = 1u << 1,       /* payload lives on a CUDA device */
  SS_FLAG_CPU_MIRROR = 1u << 2, /* GPU stream keeps a CPU copy in the slot */
  SS_FLAG_LOADER_POOL = 1u << 3 /* an array that is a DataLoader slot pool's root */
};

/* Frame state, published inside the seqlock window with the payload. */
enum ss_state {
  SS_STATE_VALID = 0,     /* empty (count 0) or last write completed */
  SS_STATE_ABORTED = 1,   /* a write_view block raised: payload undefined */
  SS_STATE_ABANDONED = 2  /* the writer died mid-write: payload undefined */
};

/* Status codes returned by the core: one enum for every part, so no two
 * codes collide (0 is success, errno values are > 0). The bindings turn
 * each into an exception through one table (src/bindings/_binding.h). */
enum ss_status {
  SS_OK = 0,
  /* streams and segments */
  SS_ETIMEDOUT = -1,    /* the deadline passed */
  SS_ECANCELLED = -2,   /* ss_cancel() was called on this handle */
  SS_EINCONSISTENT = -3,/* the published frame is aborted or abandoned */
  SS_ECORRUPT = -4,     /* header magic/checksum/size check failed */
  SS_EVERSION = -5,     /* a layout version this build does not read */
  SS_EKIND = -6,        /* segment is of another kind (channel vs stream) */
  SS_EOWNERDEAD = -7,   /* lock taken over from a dead owner (lock: success) */
  SS_EDEADLK = -8,      /* this thread already holds the lock */
  SS_ENOTOWNER = -9,    /* unlock by a thread that does not hold the lock */
  SS_EBUSY = -10,       /* the segment is still being initialised */
  SS_ENAME = -11,       /* name empty, too long or containing NUL */
  /* channels (include/shmstream_channel.h) */
  SS_EPEERDEAD = -12,   /* the other end's process died */
  SS_EPEERCLOSED = -13, /* the other end closed the channel */
  SS_EATTACHED = -14,   /* this end is held by another live process */
  SS_ETOOBIG = -15,     /* the message can never fit in the ring */
  SS_EROLE = -16,       /* producer call on a consumer handle, etc. */
  /* GPU streams (include/shmstream_cuda.h) */
  SS_ECUDA = -17,       /* a CUDA driver call failed: ss_cuda_error() says which */
  SS_ENOCUDA = -18,     /* libcuda.so.1 cannot be loaded, or cuInit failed */
  SS_EGPUGONE = -19,    /* the stream's creator exited: its device buffer went with it */
  SS_EPOISONED = -20,   /* device work of a writer that died never completed */
  SS_EFORK = -21,       /* CUDA state inherited through fork() cannot be used */
  SS_ENOTGPU = -22,     /* the segment is not a GPU stream, or its GPU area is bad */
  /* the direct-I/O reader (include/shmstream_direct.h) */
  SS_DIRECT_ESHORT = -23,     /* file shorter than offset + nbytes (open) */
  SS_DIRECT_ECLOSED = -24,    /* the reader was closed */
  SS_DIRECT_ERANGE = -25,     /* a requested row lies outside the array */
  SS_DIRECT_ETRUNCATED = -26, /* the file shrank under a read */
  SS_DIRECT_ENOTREG = -27,    /* path is not a regular file */
  /* who may open a segment (src/core/owner.c; docs/ABI.md, "Owner and PID namespace") */
  SS_EOWNER =
      -28, /* the file belongs to another uid, not allowed (ss_open_opts, SHMSTREAM_ALLOW_OWNERS) */
  SS_EPIDNS = -29 /* a GPU stream's creator is in another PID namespace (its buffer) */
};

/* A sentence for a status code: an ss_status (0 included), or a positive
 * errno value (its C library description). Never NULL: an unknown code
 * gets "unknown shmstream status" ("unknown system error" if positive).
 * The string is static; do not free it. */
SS_API const char *ss_strerror(int status);

/* ---- the on-memory header (4096 bytes at offset 0 of every segment) ---- */

typedef struct ss_identity {
  SS_ATOMIC(uint64_t) magic; /* 0    stored last at create (release) */
  uint32_t layout_version; /* 8 */
  uint32_t kind; /* 12   enum ss_kind */
  uint32_t header_bytes; /* 16   SS_HEADER_BYTES */
  uint32_t flags; /* 20   enum ss_flags */
  uint64_t payload_offset; /* 24   first slot, from segment start */
  uint64_t payload_bytes; /* 32   bytes of one slot's payload */
  uint64_t slot_stride; /* 40   distance between slots */
  uint32_t slot_count; /* 48   payload slots, 1..SS_MAX_SLOTS */
  uint32_t ndim; /* 52 */
  uint64_t shape[SS_MAX_NDIM]; /* 56 */
  uint64_t itemsize; /* 120 */
  int32_t creator_pid; /* 128 */
  uint32_t mode; /* 132  permission bits it was made with */
  uint64_t creator_start_ticks; /* 136  /proc/<pid>/stat starttime, or 0 */
  uint8_t instance_id[16]; /* 144  random per create: the generation */
  uint64_t created_ns; /* 160  CLOCK_REALTIME at create */
  uint32_t name_len; /* 168 */
  uint32_t dtype_len; /* 172 */
  char name[SS_MAX_NAME_BYTES + 1]; /* 176  user name, NUL-terminated */
  char dtype[SS_MAX_DTYPE_BYTES + 1]; /* 432  dtype text, NUL-terminated */
  uint8_t gpu[512]; /* 1456 GPU area (IPC handles), zero on CPU */
  uint32_t history; /* 1968 publications kept (slot_count - 1); 0 = none */
  uint32_t
      pidns_dev; /* 1972 creator's PID namespace: st_dev of /proc/self/ns/pid (0: unknown or > 32 bits) */
  uint64_t pidns_ino; /* 1976 and its st_ino; 0: unknown (no /proc) */
  uint64_t creator_lease; /* 1984 streams, loader pools: the creator handle's lease; else 0 */
  uint8_t reserved[48]; /* 1992 */
  uint64_t checksum; /* 2040 FNV-1a 64 of bytes 0..2039, magic as 0 */
} ss_identity;

typedef struct ss_lock_line { /* 2048: touched by lock holders */
  uint8_t reserved[48]; /* 2048 zero: the lock is the stream area's lock_lease */
  SS_ATOMIC(int32_t) owner_pid; /* 2096 0 when free; informational */
  SS_ATOMIC(int32_t) owner_tid; /* 2100 */
  SS_ATOMIC(uint64_t) acquisitions; /* 2104 lock takeovers count too */
} ss_lock_line;

typedef struct ss_publish_line { /* 2112: written by the writer only */
  SS_ATOMIC(uint64_t) seq; /* 2112 odd while a write is in progress */
  SS_ATOMIC(uint64_t) count; /* 2120 completed writes */
  SS_ATOMIC(uint64_t) frame_id; /* 2128 of the published frame */
  SS_ATOMIC(uint64_t) write_time_ns; /* 2136 CLOCK_REALTIME of the publish */
  SS_ATOMIC(uint32_t) state; /* 2144 enum ss_state */
  SS_ATOMIC(int32_t) writer_pid; /* 2148 pid of the last/current writer */
  SS_ATOMIC(uint64_t) aborted; /* 2152 writes aborted or abandoned */
  SS_ATOMIC(uint32_t) slot; /* 2160 slot of the published frame */
  uint32_t pad_;
  SS_ATOMIC(uint64_t) writer_start_ticks; /* 2168 with writer_pid: who wrote */
} ss_publish_line;

typedef struct ss_notify_line { /* 2176: the futex readers sleep on */
  SS_ATOMIC(uint32_t) wake_seq; /* 2176 bumped after every publish */
  SS_ATOMIC(uint32_t) waiters; /* 2180 sleepers without a slot (streams) */
  SS_ATOMIC(uint32_t) lock_readers; /* 2184 readers falling back to the lock */
  uint32_t pad0_;
  SS_ATOMIC(uint64_t) sleepers; /* 2192 bit i: sleeper slot i is taken */
  uint8_t pad_[40];
} ss_notify_line;

typedef struct ss_slot_line { /* 2240: per-slot seqlocks, writer only */
  SS_ATOMIC(uint64_t) seq[SS_MAX_SLOTS]; /* odd while that slot is written */
} ss_slot_line;

/* 2304: the publish line as it was before the publish seqlock last went
 * odd. Lock holders only; lets the takeover after a writer's death roll the
 * metadata back exactly (docs/ABI.md, "Repair after a death"). */
typedef struct ss_undo_line {
  SS_ATOMIC(uint64_t) count; /* 2304 */
  SS_ATOMIC(uint64_t) frame_id; /* 2312 */
  SS_ATOMIC(uint64_t) write_time_ns; /* 2320 */
  SS_ATOMIC(uint64_t) aborted; /* 2328 */
  SS_ATOMIC(uint32_t) slot; /* 2336 */
  SS_ATOMIC(uint32_t) state; /* 2340 */
  uint8_t pad_[24];
} ss_undo_line;

#define SS_SLEEPER_SLOTS 64u

typedef struct ss_stream_area { /* 2240: the stream kind's control lines */
  ss_slot_line slots; /* 2240 */
  ss_undo_line undo; /* 2304 */
  /* 2368: the stream's lock (docs/ABI.md, "Stream lock by lease"). */
  SS_ATOMIC(uint64_t) lock_lease; /* 2368 holder's lease | bit 63 waiters; 0 free */
  SS_ATOMIC(uint32_t) lock_wake; /* 2376 the futex waiters for the lock sleep on */
  uint32_t reserved_0; /* 2380 */
  /* 2384: a reader's turn: its lease | bit 63 waiters; 0 none (docs/ABI.md,
   * "Reader's turn"). */
  SS_ATOMIC(uint64_t) read_pending;
  uint8_t reserved_[40]; /* 2392 */
  /* 2432: who sleeps on the stream: pid | start-time low 32 bits << 32,
   * 0 = free (docs/ABI.md, "Sleeper table"). */
  SS_ATOMIC(uint64_t) sleeper[SS_SLEEPER_SLOTS];
} ss_stream_area;

typedef struct ss_header {
  ss_identity id; /* 0 */
  ss_lock_line lock; /* 2048 */
  ss_publish_line pub; /* 2112 */
  ss_notify_line notify; /* 2176 */
  union { /* 2240: kind-specific control words */
    ss_stream_area stream; /* streams: slot seqlocks, undo line */
    uint8_t kind_area[SS_HEADER_BYTES - 2240]; /* channels: ss_ring_control */
  };
} ss_header;

/* ---- the documented offsets (docs/ABI.md), pinned --------------------- */
#ifdef __cplusplus
#define SS_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#define SS_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif
#define SS_PIN(field, off) \
  SS_STATIC_ASSERT(offsetof(ss_header, field) == (off), "ABI offset of " #field)
SS_PIN(id.magic, 0);
SS_PIN(id.layout_version, 8);
SS_PIN(id.kind, 12);
SS_PIN(id.header_bytes, 16);
SS_PIN(id.flags, 20);
SS_PIN(id.payload_offset, 24);
SS_PIN(id.payload_bytes, 32);
SS_PIN(id.slot_stride, 40);
SS_PIN(id.slot_count, 48);
SS_PIN(id.ndim, 52);
SS_PIN(id.shape, 56);
SS_PIN(id.itemsize, 120);
SS_PIN(id.creator_pid, 128);
SS_PIN(id.mode, 132);
SS_PIN(id.creator_start_ticks, 136);
SS_PIN(id.instance_id, 144);
SS_PIN(id.created_ns, 160);
SS_PIN(id.name_len, 168);
SS_PIN(id.dtype_len, 172);
SS_PIN(id.name, 176);
SS_PIN(id.dtype, 432);
SS_PIN(id.gpu, 1456);
SS_PIN(id.history, 1968);
SS_PIN(id.pidns_dev, 1972);
SS_PIN(id.pidns_ino, 1976);
SS_PIN(id.creator_lease, 1984);
SS_PIN(id.reserved, 1992);
SS_PIN(id.checksum, 2040);
SS_PIN(lock.reserved, 2048);
SS_PIN(lock.owner_pid, 2096);
SS_PIN(lock.owner_tid, 2100);
SS_PIN(lock.acquisitions, 2104);
SS_PIN(pub.seq, 2112);
SS_PIN(pub.count, 2120);
SS_PIN(pub.frame_id, 2128);
SS_PIN(pub.write_time_ns, 2136);
SS_PIN(pub.state, 2144);
SS_PIN(pub.writer_pid, 2148);
SS_PIN(pub.aborted, 2152);
SS_PIN(pub.slot, 2160);
SS_PIN(pub.writer_start_ticks, 2168);
SS_PIN(notify.wake_seq, 2176);
SS_PIN(notify.waiters, 2180);
SS_PIN(notify.lock_readers, 2184);
SS_PIN(notify.sleepers, 2192);
SS_PIN(stream.slots.seq, 2240);
SS_PIN(stream.undo.count, 2304);
SS_PIN(stream.undo.frame_id, 2312);
SS_PIN(stream.undo.write_time_ns, 2320);
SS_PIN(stream.undo.aborted, 2328);
SS_PIN(stream.undo.slot, 2336);
SS_PIN(stream.undo.state, 2340);
SS_STATIC_ASSERT(sizeof(ss_undo_line) == 64, "the undo line is one cache line");
SS_PIN(stream.lock_lease, 2368);
SS_PIN(stream.lock_wake, 2376);
SS_PIN(stream.read_pending, 2384);
SS_PIN(stream.sleeper, 2432);
SS_STATIC_ASSERT(sizeof(ss_notify_line) == 64, "the notify line is one cache line");
SS_PIN(kind_area, 2240);
SS_STATIC_ASSERT(sizeof(ss_header) == SS_HEADER_BYTES, "header is 4096 bytes");
#undef SS_PIN

/* ---- slot records (history streams; docs/ABI.md, "History") ------------- */

/* One per slot, after the last payload slot (4096 + slot_stride *
 * slot_count): the slot's seqlock and the publication it holds. The record
 * fields are written inside the slot's seqlock window. */
typedef struct ss_slot_record {
  SS_ATOMIC(uint64_t) seq; /* +0  the slot's seqlock */
  SS_ATOMIC(uint64_t) count; /* +8  0: holds no publication */
  SS_ATOMIC(uint64_t) frame_id; /* +16 */
  SS_ATOMIC(uint64_t) write_time_ns; /* +24 */
  uint8_t reserved_[32]; /* +32 */
} ss_slot_record;
SS_STATIC_ASSERT(sizeof(ss_slot_record) == SS_SLOT_RECORD_BYTES, "a slot record is one line");
SS_STATIC_ASSERT(offsetof(ss_slot_record, count) == 8, "ABI offset of record count");
SS_STATIC_ASSERT(offsetof(ss_slot_record, frame_id) == 16, "ABI offset of record frame_id");
SS_STATIC_ASSERT(offsetof(ss_slot_record, write_time_ns) == 24, "ABI offset of record time");

/* ---- handles ----------------------------------------------------------- */

/* A mapped segment: an opaque handle, local to one process, never placed in
 * shared memory. ss_segment_new allocates one (closed); ss_segment_create,
 * _open or _peek fill it; ss_segment_close unmaps it, ss_segment_free
 * releases it. Its fields are the core's (src/core/internal_api.h):
 * read them through the accessors below. */
typedef struct ss_segment ss_segment;

typedef struct ss_create_args {
  const char *name; /* user name, UTF-8 */
  uint32_t kind;
  uint32_t flags;
  uint32_t ndim;
  const uint64_t *shape;
  uint64_t itemsize;
  const char *dtype; /* NumPy dtype text, e.g. "<f4" */
  uint64_t payload_bytes; /* 0: product(shape) * itemsize */
  uint32_t mode; /* 0: 0600 */
  uint32_t slots; /* 0: SS_DEFAULT_SLOTS; a writer fills one slot while
                             readers copy the last published one */
  /* GPU streams (include/shmstream_cuda.h): 512 bytes copied into id.gpu
   * before the checksum, or NULL for a zero GPU area. A stream created
   * with SS_FLAG_GPU and without SS_FLAG_CPU_MIRROR has no CPU payload
   * slot (slot_stride 0): its payload lives on the device only. */
  const void *gpu_area;
  /* Streams: keep the last `history` publications (1..SS_MAX_HISTORY) in
   * history + 1 slots with slot records; `slots` is then ignored. 0: none. */
  uint32_t history;
} ss_create_args;

/* Snapshot of a publication's metadata, read in the same seqlock window as
 * the payload. */
typedef struct ss_pubinfo {
  uint64_t count;
  uint64_t frame_id;
  uint64_t write_time_ns;
  uint32_t state;
} ss_pubinfo;

/* ---- names ------------------------------------------------------------- */

/* Map a user name to its segment name ("/shmstream-<readable>-<hash>").
 * Deterministic, never contains '/' after the first character. */
SS_API int ss_segment_name(const char *name, size_t len, char out[SS_SEGMENT_NAME_MAX]);

/* ---- segments (src/core/segment.c) ------------------------------------- */

/* The one layout version a segment of this kind (enum ss_kind) and these
 * flags has (SS_LAYOUT_VERSION_*), or 0 for an unknown kind. */
SS_API uint32_t ss_layout_version(uint32_t kind, uint32_t flags);
/* Returns 0 or a positive errno (EEXIST, ENOSPC, ...) or a negative ss_status. */
SS_API int ss_segment_create(ss_segment *seg, const ss_create_args *args);
/* expected_kind 0 accepts any kind. */
SS_API int ss_segment_open(ss_segment *seg, const char *name, size_t len, uint32_t expected_kind,
                           int readonly);
/* ss_segment_open with options. ss_segment_open(...) is
 * ss_segment_open_ex(..., NULL). */
typedef struct ss_open_opts {
  /* Owners (uids) whose segments may be opened besides the caller's
   * effective uid; the uids and user names listed in the environment
   * variable SHMSTREAM_ALLOW_OWNERS ("1000,alice") are allowed too. */
  const uint32_t *allow_owners;
  size_t n_allow_owners;
} ss_open_opts;
/* Refuses with SS_EOWNER a file whose owner is not the caller's effective
 * uid nor allowed (seg->owner_uid says who owns it; docs/ABI.md, "Owner and
 * PID namespace"), and with SS_EVERSION a segment of another layout
 * version than its kind's (ss_segment_identity(seg) then holds what was
 * found). opts may be NULL. */
SS_API int ss_segment_open_ex(ss_segment *seg, const char *name, size_t len, uint32_t expected_kind,
                              int readonly, const ss_open_opts *opts);
/* Map the header only (for stat/list): payload bytes are not mapped. Does
 * not wait for an unfinished creator: SS_EBUSY at once. Never blocks and
 * never follows a link: ELOOP for a symlink, ENODEV for anything else that
 * is not a regular file (FIFO, directory, socket, device). */
SS_API int ss_segment_peek(ss_segment *seg, const char *segname);
SS_API void ss_segment_close(ss_segment *seg);
/* The size of a segment with `slots` slots of `payload` bytes each (with
 * `history` > 0: history + 1 slots and their slot records), as
 * ss_segment_create makes it: the header, each slot rounded up to
 * SS_PAYLOAD_ALIGN, the records rounded up too. 0 if it overflows. */
SS_API uint64_t ss_segment_bytes(uint64_t payload, uint32_t slots, uint32_t history);
SS_API int ss_segment_unlink(const char *name, size_t len);
SS_API int ss_segment_unlink_segname(const char *segname);
SS_API uint64_t ss_identity_checksum(const ss_identity *id);
/* Validate a mapped header against the bytes actually mapped. */
SS_API int ss_header_validate(const ss_header *hdr, size_t file_bytes);
/* Copy a header's identity out of shared memory (magic with acquire order,
 * then the rest) and validate the copy: what ss_segment_open keeps. */
SS_API int ss_identity_snapshot(ss_identity *out, const ss_header *hdr, size_t file_bytes);
/* SS_OK, or SS_ECORRUPT once the segment's file shrank under this mapping
 * (a bus error was caught there: see src/core/guard.c); every later call on
 * the handle fails the same way. */
SS_API int ss_segment_status(const ss_segment *seg);

/* ---- plain files mapped under the bus-error guard (src/core/guard.c) ---- */

/* A file that is not a segment (a DataLoader pool's slot, a recording's
 * frames) mapped shared, read-write if fd was opened for writing and
 * read-only otherwise (ss_file_map_writable says which), with the guard that turns a SIGBUS after another
 * process truncated it into zero pages (docs/ABI.md, "The header is trusted
 * once"). ss_file_map_open returns 0 or an errno; populate maps every page
 * now. ss_file_map_lost: a bus error was caught in the mapping (its pages
 * from there on are private zeros, no longer the file's). ss_file_map_close
 * unmaps it (after every user of its bytes is done). */
typedef struct ss_file_map ss_file_map;
SS_API int ss_file_map_open(int fd, size_t bytes, int populate, ss_file_map **out);
SS_API void *ss_file_map_base(const ss_file_map *m);
SS_API size_t ss_file_map_bytes(const ss_file_map *m);
SS_API int ss_file_map_writable(const ss_file_map *m);
SS_API int ss_file_map_lost(const ss_file_map *m);
SS_API void ss_file_map_close(ss_file_map *m);
/* The first field that sizes or locates memory whose shared value differs
 * from the handle's copy (another process rewrote the header after open),
 * or NULL. The handle goes on using its copy; writers refuse (ss_lock). */
SS_API const char *ss_identity_changed(const ss_segment *seg);

/* ---- the cross-process lock (src/core/stream_lock.c) ------------------- */

/* timeout_ns < 0 waits forever. Returns SS_OK, SS_EOWNERDEAD (acquired;
 * the dead owner's half-written frame has been marked abandoned),
 * SS_ETIMEDOUT, SS_EDEADLK or a positive errno. The lock is judged by
 * lease (docs/ABI.md, "Stream lock by lease"): a dead owner is taken over
 * within 10 ms, from any PID namespace. */
SS_API int ss_lock(ss_segment *seg, int64_t timeout_ns);
SS_API int ss_unlock(ss_segment *seg);
/* The frame state (enum ss_state) a read finds now, for stat and list: the
 * published state, or SS_STATE_ABANDONED while a write is in flight and the
 * lock's owner died (the next lock or read takes the lock over and marks
 * the frame so). Reads the header only: never waits, changes nothing. */
SS_API uint32_t ss_read_state(const ss_segment *seg);

/* ---- streams (src/core/publish.c, snapshot.c) -------------------------- */

/* All write calls require the caller to hold the lock. frame_id points at
 * the frame id to publish (any uint64); NULL keeps the previous one (sticky).
 * On a segment without a CPU payload slot (a GPU stream without CPU mirror)
 * ss_write_locked and ss_clear_locked do nothing and ss_read returns
 * SS_EKIND: its payload is reached through include/shmstream_cuda.h. */
SS_API void ss_write_locked(ss_segment *seg, const void *src, size_t n, const uint64_t *frame_id);
SS_API void ss_clear_locked(ss_segment *seg);

/* Consistent snapshot copy of the payload into dst (n bytes). Retries a
 * torn copy a bounded number of times, then takes the lock (unless the
 * caller already holds it: pass holds_lock=1). */
SS_API int ss_read(ss_segment *seg, void *dst, size_t n, int64_t timeout_ns, int holds_lock,
                   ss_pubinfo *info);

/* Zero-copy read: locate the published frame (same freshness rule and
 * fallback as ss_read) without copying it. The caller reads
 * ss_view_data(seg, frame) (below) in place, then asks ss_view_valid whether the
 * writer started overwriting that slot meanwhile (it can only after
 * slot_count - 1 newer publications, or at once with one slot). */
typedef struct ss_frame {
  uint32_t slot;
  uint64_t slot_seq;
} ss_frame;
SS_API int ss_view_begin(ss_segment *seg, int64_t timeout_ns, int holds_lock, ss_pubinfo *info,
                         ss_frame *frame);
SS_API int ss_view_valid(const ss_segment *seg, const ss_frame *frame);

/* The published frame's metadata without its payload (count, frame id,
 * write time, state), read in one closed publish window; while a write is
 * in flight, the values as read. Never waits. */
SS_API void ss_publication(const ss_segment *seg, ss_pubinfo *info);

/* ---- the handle (src/core/segment.c) ------------------------------------ */

/* A closed handle (NULL: out of memory), and its release (closes it first
 * if it is open). */
SS_API ss_segment *ss_segment_new(void);
SS_API void ss_segment_free(ss_segment *seg);
/* What the handle validated at open or wrote at create (never re-read from
 * shared memory): the whole identity, and the fields a program needs. */
SS_API const ss_identity *ss_segment_identity(const ss_segment *seg);
SS_API const char *ss_segment_user_name(const ss_segment *seg);
SS_API const char *ss_segment_dtype(const ss_segment *seg);
SS_API uint32_t ss_segment_ndim(const ss_segment *seg);
SS_API const uint64_t *ss_segment_shape(const ss_segment *seg);
SS_API uint64_t ss_segment_payload_bytes(const ss_segment *seg);
SS_API uint32_t ss_segment_slot_count(const ss_segment *seg);
/* The segment's name in /dev/shm ("/shmstream-..."). */
SS_API const char *ss_segment_segname(const ss_segment *seg);
/* The file's owner (after SS_EOWNER: the owner that was refused). */
SS_API uint32_t ss_segment_owner_uid(const ss_segment *seg);
/* Completed writes (the publish line's count, acquire). */
SS_API uint64_t ss_segment_count(const ss_segment *seg);
/* Where a frame located by ss_view_begin, ss_read_new_view or
 * ss_history_locate lies, to read in place until ss_view_valid. */
SS_API const void *ss_view_data(const ss_segment *seg, const ss_frame *frame);

/* The last complete publication, whatever the state says: copies the
 * published slot under the lock (taking it over from a dead writer first,
 * which repairs the stream) with its metadata; info->state tells whether a
 * later write was aborted or abandoned. With one slot a failed write
 * overwrote the only frame: SS_EINCONSISTENT then. */
SS_API int ss_read_last_complete(ss_segment *seg, void *dst, size_t n, int64_t timeout_ns,
                                 int holds_lock, ss_pubinfo *info);

/* ---- history (src/core/history.c; docs/ABI.md, "History") --------------- */

/* A located publication: its slot (with the slot's seq when located) and
 * its metadata. */
typedef struct ss_history_frame {
  ss_frame at;
  uint64_t count;
  uint64_t frame_id;
  uint64_t write_time_ns;
} ss_history_frame;

/* Publications a history stream keeps (id.history); 0 for other streams. */
SS_API uint32_t ss_history_depth(const ss_segment *seg);
/* Wait until count > after (an aborted or abandoned write does not end
 * the wait), then locate the publications newer than `after` that the
 * stream still holds, oldest first, at most max_frames (0: no limit) of
 * them: frames[] needs room for ss_history_depth(seg) + 1 entries (1 on a
 * stream without history, where the newest complete publication is the
 * only one located). *n: frames located; *last: the count the caller has
 * been served up to (its next `after`): the newest located, or the
 * published count if every newer publication is gone. Missed publications
 * are (*last - after) - frames kept. SS_OK, SS_ETIMEDOUT, SS_ECANCELLED,
 * SS_EKIND (no CPU slot) or SS_EINCONSISTENT (one slot, failed write).
 * Frames are read in place (then checked with ss_view_valid(&f.at)) or
 * copied with ss_history_copy. */
SS_API int ss_history_locate(ss_segment *seg, uint64_t after, uint32_t max_frames,
                             int64_t timeout_ns, int64_t spin_ns, ss_history_frame *frames,
                             uint32_t *n, uint64_t *last);
/* Copy located frames, oldest first, into dst (frame k at dst + k *
 * payload_bytes), checking each slot's seq after its copy; frames the
 * writer overwrote meanwhile are dropped and the rest moved up (frames[]
 * and dst alike). Returns the frames kept. */
SS_API uint32_t ss_history_copy(const ss_segment *seg, ss_history_frame *frames, uint32_t n,
                                void *dst);
/* Locate (waiting up to timeout_ns, as ss_history_locate) and copy in one
 * call: dst_for(ctx, n) gives room for the n frames located (n *
 * payload_bytes; NULL: fail with ENOMEM), then they are copied. When the
 * writer overwrote every located frame first, it goes on from there, a few
 * rounds without waiting. *n: frames copied (at dst from the last dst_for);
 * *last: the caller's next `after`. SS_OK (also when a retry finds nothing
 * newer: *n 0), SS_ETIMEDOUT (nothing newer within timeout_ns), or an
 * error of ss_history_locate, SS_ECORRUPT, ENOMEM. */
typedef void *(*ss_history_dst_fn)(void *ctx, uint32_t n);
SS_API int ss_history_read(ss_segment *seg, uint64_t after, uint32_t max_frames, int64_t timeout_ns,
                           int64_t spin_ns, ss_history_frame *frames, ss_history_dst_fn dst_for,
                           void *ctx, uint32_t *n, uint64_t *last);
/* read_new for a stream without history, as a recorder needs it: waits
 * past aborted and abandoned writes (they are not publications) and copies
 * the newest complete publication newer than `after`. */
SS_API int ss_read_new_complete(ss_segment *seg, void *dst, size_t n, uint64_t after,
                                int64_t timeout_ns, int64_t spin_ns, ss_pubinfo *info);

/* ---- waiting (src/core/wait.c) ----------------------------------------- */

/* Wait until count > after. Spins for spin_ns, then sleeps on the futex.
 * Returns SS_OK (and *count_out), SS_ETIMEDOUT, SS_ECANCELLED, or
 * SS_EINCONSISTENT when the last write was aborted or abandoned. The
 * caller bounds timeout_ns (e.g. 100 ms) to check for signals. */
SS_API int ss_wait_count(ss_segment *seg, uint64_t after, int64_t timeout_ns, int64_t spin_ns,
                         uint64_t *count_out);
SS_API void ss_wake_all(ss_segment *seg);

/* read_new: wait until a publication newer than `after` (a count) exists,
 * then copy it into dst (n bytes) like ss_read, with its metadata; the
 * first publication after `after` is never missed (level-triggered), and a
 * writer that races the copy makes it wait again. A writer that died
 * mid-write ends the wait with SS_EINCONSISTENT at the next 100 ms chunk.
 * Returns SS_OK, SS_ETIMEDOUT, SS_ECANCELLED or SS_EINCONSISTENT. A caller
 * that must react to signals passes timeouts of <= 100 ms and loops. */
SS_API int ss_read_new(ss_segment *seg, void *dst, size_t n, uint64_t after, int64_t timeout_ns,
                       int64_t spin_ns, ss_pubinfo *info);
/* The zero-copy form: locates the new publication (see ss_view_begin). */
SS_API int ss_read_new_view(ss_segment *seg, uint64_t after, int64_t timeout_ns, int64_t spin_ns,
                            ss_pubinfo *info, ss_frame *frame);
/* Between waits: SS_EINCONSISTENT if the last write was aborted, or its
 * writer died mid-write (detected by a trylock that takes the dead owner's
 * lock over and marks the frame abandoned); SS_OK otherwise. */
SS_API int ss_check_writer(ss_segment *seg);
SS_API void ss_cancel(ss_segment *seg);
/* The spin cap (ns) of waits passed spin_ns < 0: SHMSTREAM_SPIN_US if set
 * (read once), else -1, the wait policy's own cap (docs/waiting.md). A
 * wait's spin_ns is a cap: the policy spins at most that long, 0 never. */
SS_API int64_t ss_default_spin_ns(void);

/* ---- processes (src/core/proc.c) -------------------------------------- */

/* Is pid alive and (when start_ticks is nonzero) the same process? Zombies
 * count as dead. The one liveness check of the core and the bindings. */
SS_API int ss_proc_alive(int32_t pid, uint64_t start_ticks);
/* Start time of pid (/proc/<pid>/stat field 22), 0 if unknown. */
SS_API uint64_t ss_proc_start_ticks(int32_t pid);

/* ---- owners and PID namespaces (src/core/owner.c) ----------------------- */

/* This process's PID namespace: st_dev (0 if it does not fit 32 bits) and
 * st_ino of /proc/self/ns/pid. 0 or a positive errno (then both are 0). */
SS_API int ss_pidns_self(uint32_t *dev, uint64_t *ino);
/* Was the segment made in this process's PID namespace? 1 yes, 0 no (its
 * pids mean nothing here: liveness cannot be judged), -1 unknown (the
 * creator had no /proc, or this process has none). */
SS_API int ss_pidns_match(const ss_identity *id);

/* ---- clocks (src/core/clock.c) ----------------------------------------- */
SS_API int64_t ss_monotonic_ns(void);
SS_API uint64_t ss_realtime_ns(void);
/* The monotonic time timeout_ns from now; INT64_MAX (never) for a negative
 * timeout or one so long that the sum would overflow. */
SS_API int64_t ss_deadline_ns(int64_t timeout_ns);

#ifdef __cplusplus
} /* extern "C" */
#endif

#include "shmstream_channel.h"

#endif /* SHMSTREAM_H */
