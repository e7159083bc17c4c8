/* milk/CACAO ImageStreamIO streams (docs/milk.md): parse, create, read,
 * publish and wait on the files milk's library (milk-org/ImageStreamIO,
 * IMAGESTRUCT_VERSION "2.00") keeps in its shared-memory directory.
 *
 * The layout is milk's, not ours: the 384-byte IMAGE_METADATA block of a
 * 64-bit Linux build without DAO_COMPAT or IMAGESTRUCT_WRITEHISTORY, then
 * the pixels, keywords, semaphores and the arrays that follow. ss_milk_md
 * mirrors the block field by field; src/core/milk.c pins every offset with
 * static asserts, docs/milk.md lists them and tests/milk/test_milk_layout.py
 * compares the three. */
#ifndef SHMSTREAM_MILK_H
#define SHMSTREAM_MILK_H

#include <stddef.h>
#include <stdint.h>

#include "shmstream.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SS_MILK_VERSION "2.00"
#define SS_MILK_MD_BYTES 384u   /* sizeof(IMAGE_METADATA) */
#define SS_MILK_KW_BYTES 128u   /* sizeof(IMAGE_KEYWORD) */
#define SS_MILK_SEM_BYTES 32u   /* sizeof(sem_t), glibc 64-bit */
#define SS_MILK_TRACE_BYTES 64u /* sizeof(STREAM_PROC_TRACE) */
#define SS_MILK_CBMD_BYTES 48u  /* sizeof(CBFRAMEMD) */
#define SS_MILK_NB_PROCTRACE 10u
#define SS_MILK_SEM_MAXVAL 10 /* a post stops adding at this value */
#define SS_MILK_MAX_NAME 79u  /* name[80] with its NUL */
#define SS_MILK_MAX_ELEMENTS 10000000000ull /* milk's own "seems big" limit */

/* imagetype bits milk's sizing reads */
#define SS_MILK_CIRCULAR_BUFFER 0x1u
#define SS_MILK_MATH_DATA 0x2u
#define SS_MILK_ZAXIS_TEMPORAL 0x20000u

/* IMAGE_METADATA as milk's compiler lays it out. Used for offsetof only:
 * the shared bytes are read through atomics or copied. */
typedef struct ss_milk_md {
  char version[32];
  char name[80];
  uint8_t naxis;
  uint32_t size[3];
  uint64_t nelement;
  uint8_t datatype;
  uint64_t imagetype;
  int64_t creationtime[2]; /* struct timespec: tv_sec, tv_nsec */
  int64_t lastaccesstime[2];
  int64_t atime[2];
  int64_t writetime[2];
  int32_t creatorPID;
  int32_t ownerPID;
  uint8_t shared;
  uint64_t inode;
  int8_t location;
  uint8_t status;
  uint64_t flag;
  uint8_t logflag;
  uint16_t sem;
  uint16_t NBproctrace;
  uint64_t cnt0;
  uint64_t cnt1;
  uint64_t cnt2;
  uint8_t write;
  uint16_t NBkw;
  uint32_t CBsize;
  uint32_t CBindex;
  uint64_t CBcycle;
  uint64_t imdatamemsize;
  char cudaMemHandle[64];
} ss_milk_md;

/* IMAGE_KEYWORD */
typedef struct ss_milk_kw {
  char name[16];
  char type; /* 'N' unused, 'L' int64, 'D' double, 'S' 16-char string */
  union {
    int64_t numl;
    double numf;
    char valstr[16];
  } value;
  uint64_t cnt;
  char comment[80];
} ss_milk_kw;

/* What ss_milk_layout_parse copies out of a metadata block and computes
 * from it: every size and offset a handle uses, never read again from the
 * file. ss_milk_layout_compute fills the offsets from the first group. */
typedef struct ss_milk_layout {
  /* given (create) or copied (open) */
  uint8_t naxis;
  uint8_t datatype;
  int8_t location;
  uint32_t size[3]; /* milk's order: size[0] varies fastest */
  uint16_t nsem;
  uint16_t nkw;
  uint16_t nproctrace;
  uint32_t cbsize;
  uint64_t imagetype;
  /* computed */
  uint32_t itemsize;
  uint64_t nelement;
  uint64_t frame_bytes; /* imdatamemsize */
  uint64_t off_data, off_kw, off_sem, off_semlog, off_readpid, off_writepid, off_semctrl,
      off_semstatus, off_trace, off_atimes, off_wtimes, off_cnts, off_cbmd, off_cbdata;
  uint64_t total_bytes;
  char version[33]; /* the file's, NUL-terminated */
  char name[81];
} ss_milk_layout;

/* Bytes of one element of milk datatype code dt (1..13), 0 if unknown. */
SS_API uint32_t ss_milk_itemsize(uint8_t dt);
/* Fill the computed fields of l from its given ones, as milk's
 * ImageStreamIO_image_sizing does. SS_OK, EINVAL for a value milk refuses,
 * EOVERFLOW for sizes that do not fit 64 bits. */
SS_API int ss_milk_layout_compute(ss_milk_layout *l);
/* Parse a metadata block (md_bytes from the start of a file of file_bytes):
 * SS_OK; SS_EVERSION (out->version says which); SS_ECORRUPT for a block
 * too short, a size milk refuses or stored sizes that disagree with the
 * computed ones; EMSGSIZE for a file whose size is not the layout's;
 * SS_EKIND for a GPU-located stream (location >= 0). */
SS_API int ss_milk_layout_parse(const void *md, size_t md_bytes, uint64_t file_bytes,
                                ss_milk_layout *out);

typedef struct ss_milk ss_milk;

/* Open the file at path read-write (a reader's claim and wait write the
 * file too) under the bus-error guard. Statuses of ss_milk_layout_parse,
 * or an errno. The layout is copied into *layout. */
SS_API int ss_milk_open(const char *path, ss_milk **out, ss_milk_layout *layout);
/* Make a new file at path (O_EXCL; written under a temporary name and
 * linked into place, so nobody opens it half-made) with the layout l's
 * given fields describe, semaphores initialised, version written last. */
SS_API int ss_milk_create(const char *path, const char *name, unsigned mode, ss_milk_layout *l,
                          ss_milk **out);
/* Release the claim (if any) and unmap. */
SS_API void ss_milk_close(ss_milk *m);
/* SS_OK, or SS_ECORRUPT once the file shrank under the mapping. */
SS_API int ss_milk_status(const ss_milk *m);

typedef struct ss_milk_pubinfo {
  uint64_t cnt0;
  uint64_t cnt1;
  int64_t writetime_ns; /* milk's clock: CLOCK_TAI where defined */
  int64_t atime_ns;
} ss_milk_pubinfo;

/* Copy the frame into dst (frame_bytes) without tearing: the write flag
 * and cnt0 are read before and after the copy and a copy that overlapped a
 * write is retried, for at most about budget_ns; then SS_EINCONSISTENT
 * (the write flag stayed set: a writer is mid-frame, or died there). */
SS_API int ss_milk_read(ss_milk *m, void *dst, size_t n, int64_t budget_ns, ss_milk_pubinfo *info);
/* milk's publish sequence: write = 1, pixels, circular buffer, times,
 * cnt0 + 1, write = 0, then post every semaphore below its max value and
 * the log semaphore. atime_ns < 0: the write time. */
SS_API int ss_milk_write(ss_milk *m, const void *src, size_t n, int64_t atime_ns);
/* The circular buffer as history: the frames with counts after `after` it
 * still holds, oldest first, at most max, copied into dst (max *
 * frame_bytes) with their counts. The frame of count c is in slot
 * (CBindex - (cnt0 - c)) mod CBsize (milk's writer copies frame cnt0 + 1
 * into slot CBindex + 1 before cnt0 goes up); the slot the next write goes
 * to is never read, and a frame a writer reached during the copy is dropped
 * (the caller counts it missed). *last: the cnt0 the copy was made at.
 * EINVAL without a circular buffer of 2 frames or more; SS_EINCONSISTENT
 * as ss_milk_read. */
SS_API int ss_milk_read_since(ss_milk *m, uint64_t after, uint32_t max, void *dst, uint64_t *counts,
                              uint32_t *n, uint64_t *last, int64_t budget_ns);
SS_API uint64_t ss_milk_count(const ss_milk *m);
SS_API int ss_milk_writing(const ss_milk *m);

/* Claim a semaphore in the reader PID table as milk's readers do (this
 * pid's entry, else `preferred` if free, else the first free one; free is
 * 0, -1 or a pid that no longer exists), with a compare-and-swap. The index,
 * or SS_EBUSY when every one is held by a live process. */
SS_API int ss_milk_claim(ss_milk *m, int preferred);
SS_API int ss_milk_claimed(const ss_milk *m);
SS_API void ss_milk_release(ss_milk *m);
/* Wait until cnt0 > last (SS_OK), at most timeout_ns (SS_ETIMEDOUT; also
 * on a signal, so the caller can check for one), on the claimed
 * semaphore (claims one first). Before it sleeps it spins on cnt0 for the
 * budget the wait policy picks (docs/waiting.md) under spin_ns: < 0 the
 * policy's own cap (or SHMSTREAM_SPIN_US), 0 never. */
SS_API int ss_milk_wait_newer(ss_milk *m, uint64_t last, int64_t timeout_ns, int64_t spin_ns);
/* read_new in one call: ss_milk_wait_newer, then ss_milk_read of the frame
 * (n must be the frame's size; EINVAL otherwise). */
SS_API int ss_milk_read_new(ss_milk *m, uint64_t last, int64_t timeout_ns, int64_t spin_ns,
                            void *dst, size_t n, int64_t budget_ns, ss_milk_pubinfo *info);

/* A zero-copy look at the frame (read_view): waits up to about budget_ns
 * for the write flag to be down with cnt0 steady around the metadata copy
 * into *info; the pixels at ss_milk_data(m) are then that frame for as long
 * as ss_milk_view_valid(m, info->cnt0) says so afterwards (no write began
 * and cnt0 did not move). SS_EINCONSISTENT as ss_milk_read. */
SS_API int ss_milk_view_begin(ss_milk *m, int64_t budget_ns, ss_milk_pubinfo *info);
SS_API int ss_milk_view_valid(const ss_milk *m, uint64_t cnt0);
SS_API void *ss_milk_data(const ss_milk *m);
/* Which file the handle maps (its inode at open and its creationtime) and
 * the creatorPID it holds now. */
SS_API void ss_milk_identity(const ss_milk *m, uint64_t *ino, int64_t *creation_ns,
                             int32_t *creator);

/* What `shmstream list` and `stat` show of a milk file, read with pread
 * (never mapped, never written): its layout (as ss_milk_open checks it)
 * and the live words of the metadata block, copied once. */
typedef struct ss_milk_peek_info {
  uint64_t cnt0, cnt1, cbcycle, inode, file_bytes;
  int64_t creation_ns, write_ns, atime_ns; /* milk's clock (CLOCK_TAI) */
  int32_t creator_pid, owner_pid;
  uint32_t cbindex, file_mode, file_uid;
  uint8_t write;
  uint32_t npids; /* entries of the reader PID table copied into pids */
} ss_milk_peek_info;

/* Peek at the file at path: SS_OK with *layout and *info filled, and the
 * first min(nsem, max_pids) entries of semReadPID copied into pids; the
 * statuses of ss_milk_layout_parse, ENODEV for a file that is not a
 * regular one, or an errno. */
SS_API int ss_milk_peek(const char *path, ss_milk_layout *layout, ss_milk_peek_info *info,
                        int32_t *pids, uint32_t max_pids);

/* Keyword i (< nkw): copied out / written (the cnt word goes up). */
SS_API int ss_milk_kw_get(const ss_milk *m, uint32_t i, ss_milk_kw *out);
SS_API int ss_milk_kw_set(ss_milk *m, uint32_t i, const ss_milk_kw *kw);

#ifdef __cplusplus
}
#endif
#endif
