/* milk/CACAO ImageStreamIO streams (include/shmstream_milk.h, docs/milk.md).
 *
 * The file is milk's: a 384-byte metadata block, then (each part rounded up
 * to 8 bytes, as ImageStreamIO_image_sizing lays it out) the pixels, the
 * keywords, one sem_t per reader semaphore, the log semaphore, the reader
 * and writer PID tables, semctrl, semstatus, the process trace, the
 * per-slice arrays of a temporal circular buffer, the fast circular
 * buffer's frame records and frames. Everything that sizes or places
 * memory is copied out of the block once, at open, checked, and never read
 * again from the file; the file size must be the computed one (milk's own
 * readers insist on that too). The mapping is under the bus-error guard
 * (src/core/guard.c), so a file truncated later is SS_ECORRUPT, not SIGBUS.
 *
 * milk has no seqlock. Its writers raise `write` before the pixels and
 * drop it after cnt0 goes up (ImageStreamIO_UpdateIm); a read here copies
 * between two looks at (cnt0, write) and retries a copy that overlapped a
 * write (docs/milk.md, "Reading and publishing"). Our writer stores those
 * words with C11 atomics in that order. */
#define _GNU_SOURCE
#include "shmstream_milk.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core_helpers.h"

/* ---- the layout, pinned (docs/milk.md's table says the same) ------------- */

_Static_assert(sizeof(ss_milk_md) == SS_MILK_MD_BYTES, "IMAGE_METADATA is 384 bytes");
_Static_assert(offsetof(ss_milk_md, name) == 32, "name");
_Static_assert(offsetof(ss_milk_md, naxis) == 112, "naxis");
_Static_assert(offsetof(ss_milk_md, size) == 116, "size");
_Static_assert(offsetof(ss_milk_md, nelement) == 128, "nelement");
_Static_assert(offsetof(ss_milk_md, datatype) == 136, "datatype");
_Static_assert(offsetof(ss_milk_md, imagetype) == 144, "imagetype");
_Static_assert(offsetof(ss_milk_md, creationtime) == 152, "creationtime");
_Static_assert(offsetof(ss_milk_md, lastaccesstime) == 168, "lastaccesstime");
_Static_assert(offsetof(ss_milk_md, atime) == 184, "atime");
_Static_assert(offsetof(ss_milk_md, writetime) == 200, "writetime");
_Static_assert(offsetof(ss_milk_md, creatorPID) == 216, "creatorPID");
_Static_assert(offsetof(ss_milk_md, ownerPID) == 220, "ownerPID");
_Static_assert(offsetof(ss_milk_md, shared) == 224, "shared");
_Static_assert(offsetof(ss_milk_md, inode) == 232, "inode");
_Static_assert(offsetof(ss_milk_md, location) == 240, "location");
_Static_assert(offsetof(ss_milk_md, status) == 241, "status");
_Static_assert(offsetof(ss_milk_md, flag) == 248, "flag");
_Static_assert(offsetof(ss_milk_md, logflag) == 256, "logflag");
_Static_assert(offsetof(ss_milk_md, sem) == 258, "sem");
_Static_assert(offsetof(ss_milk_md, NBproctrace) == 260, "NBproctrace");
_Static_assert(offsetof(ss_milk_md, cnt0) == 264, "cnt0");
_Static_assert(offsetof(ss_milk_md, cnt1) == 272, "cnt1");
_Static_assert(offsetof(ss_milk_md, cnt2) == 280, "cnt2");
_Static_assert(offsetof(ss_milk_md, write) == 288, "write");
_Static_assert(offsetof(ss_milk_md, NBkw) == 290, "NBkw");
_Static_assert(offsetof(ss_milk_md, CBsize) == 292, "CBsize");
_Static_assert(offsetof(ss_milk_md, CBindex) == 296, "CBindex");
_Static_assert(offsetof(ss_milk_md, CBcycle) == 304, "CBcycle");
_Static_assert(offsetof(ss_milk_md, imdatamemsize) == 312, "imdatamemsize");
_Static_assert(offsetof(ss_milk_md, cudaMemHandle) == 320, "cudaMemHandle");
_Static_assert(sizeof(ss_milk_kw) == SS_MILK_KW_BYTES, "IMAGE_KEYWORD is 128 bytes");
_Static_assert(offsetof(ss_milk_kw, type) == 16, "kw type");
_Static_assert(offsetof(ss_milk_kw, value) == 24, "kw value");
_Static_assert(offsetof(ss_milk_kw, cnt) == 40, "kw cnt");
_Static_assert(offsetof(ss_milk_kw, comment) == 48, "kw comment");
_Static_assert(sizeof(sem_t) == SS_MILK_SEM_BYTES, "milk's files hold glibc's 32-byte sem_t");

#define ROUND8(x) (((x) + 7u) & ~(uint64_t)7u)
#define TRACE_TRIGSEM_OFF 48u /* STREAM_PROC_TRACE.trigsemindex */

uint32_t ss_milk_itemsize(uint8_t dt) {
  /* milk's _DATATYPE_* codes 1..13 (ImageStruct.h); the event type (20)
   * is refused by milk's own sizing too. */
  static const uint8_t bytes[14] = {0, 1, 1, 2, 2, 4, 4, 8, 8, 4, 8, 8, 16, 2};
  return dt < 14 ? bytes[dt] : 0;
}

/* off += ROUND8(n * each) with overflow checks; the part starts at *at. */
static int place(uint64_t *off, uint64_t *at, uint64_t n, uint64_t each) {
  uint64_t bytes;
  if (__builtin_mul_overflow(n, each, &bytes) || bytes > UINT64_MAX - 7) return EOVERFLOW;
  if (at) *at = *off;
  if (__builtin_add_overflow(*off, ROUND8(bytes), off)) return EOVERFLOW;
  return SS_OK;
}

int ss_milk_layout_compute(ss_milk_layout *l) {
  if (l->naxis < 1 || l->naxis > 3) return EINVAL;
  l->itemsize = ss_milk_itemsize(l->datatype);
  if (!l->itemsize) return EINVAL;
  if (l->location != -1) return SS_EKIND;
  uint64_t n = 1;
  for (unsigned i = 0; i < 3; i++) {
    if (i >= l->naxis) {
      l->size[i] = 0;
      continue;
    }
    if (l->size[i] < 1) return EINVAL;
    if (__builtin_mul_overflow(n, (uint64_t)l->size[i], &n)) return EOVERFLOW;
  }
  if (n > SS_MILK_MAX_ELEMENTS) return EOVERFLOW;
  l->nelement = n;
  l->frame_bytes = n * l->itemsize;
  int temporal = (l->imagetype & 0xF000Fu) == (SS_MILK_CIRCULAR_BUFFER | SS_MILK_ZAXIS_TEMPORAL);
  if ((l->imagetype & 0xF000Fu) == SS_MILK_CIRCULAR_BUFFER && l->naxis != 3) return EINVAL;
  uint64_t off = ROUND8(SS_MILK_MD_BYTES);
  int rc = place(&off, &l->off_data, 1, l->frame_bytes);
  rc = rc ? rc : place(&off, &l->off_kw, l->nkw, SS_MILK_KW_BYTES);
  rc = rc ? rc : place(&off, &l->off_sem, l->nsem, SS_MILK_SEM_BYTES);
  rc = rc ? rc : place(&off, &l->off_semlog, 1, SS_MILK_SEM_BYTES);
  rc = rc ? rc : place(&off, &l->off_readpid, l->nsem, 4);
  rc = rc ? rc : place(&off, &l->off_writepid, l->nsem, 4);
  rc = rc ? rc : place(&off, &l->off_semctrl, l->nsem, 4);
  rc = rc ? rc : place(&off, &l->off_semstatus, l->nsem, 4);
  rc = rc ? rc : place(&off, &l->off_trace, l->nproctrace, SS_MILK_TRACE_BYTES);
  uint64_t slices = temporal ? l->size[2] : 0;
  rc = rc ? rc : place(&off, &l->off_atimes, slices, 16);
  rc = rc ? rc : place(&off, &l->off_wtimes, slices, 16);
  rc = rc ? rc : place(&off, &l->off_cnts, slices, 8);
  rc = rc ? rc : place(&off, &l->off_cbmd, l->cbsize, SS_MILK_CBMD_BYTES);
  rc = rc ? rc : place(&off, &l->off_cbdata, l->cbsize, l->frame_bytes);
  if (rc) return rc;
  l->total_bytes = off;
  return SS_OK;
}

int ss_milk_layout_parse(const void *md, size_t md_bytes, uint64_t file_bytes,
                         ss_milk_layout *out) {
  memset(out, 0, sizeof *out);
  if (md_bytes < SS_MILK_MD_BYTES || file_bytes <= SS_MILK_MD_BYTES) return SS_ECORRUPT;
  ss_milk_md h;
  memcpy(&h, md, sizeof h); /* a private copy: the file may change under us */
  memcpy(out->version, h.version, 32);
  memcpy(out->name, h.name, 80);
  if (strcmp(out->version, SS_MILK_VERSION) != 0) return SS_EVERSION;
  out->naxis = h.naxis;
  out->datatype = h.datatype;
  out->location = h.location;
  memcpy(out->size, h.size, sizeof out->size);
  out->nsem = h.sem;
  out->nkw = h.NBkw;
  out->nproctrace = h.NBproctrace;
  out->cbsize = h.CBsize;
  out->imagetype = h.imagetype;
  if (h.shared != 1) return SS_ECORRUPT;
  int rc = ss_milk_layout_compute(out);
  if (rc == SS_EKIND) return rc;
  if (rc) return SS_ECORRUPT;
  if (h.nelement != out->nelement || h.imdatamemsize != out->frame_bytes) return SS_ECORRUPT;
  if (out->total_bytes != file_bytes) return EMSGSIZE;
  return SS_OK;
}

/* ---- handles -------------------------------------------------------------- */

struct ss_milk {
  ss_file_map *map;
  uint8_t *base;
  ss_milk_layout l;
  int claimed; /* semaphore index held in the reader PID table, -1: none */
  uint64_t ino; /* the file's inode at open: with creationtime, which file this is */
  ss_wait_stats wait; /* this handle's waits, for the spin policy (docs/waiting.md) */
};

#define MD(m) ((ss_milk_md *)(m)->base)
#define A64(p) ((_Atomic uint64_t *)(void *)(p))
#define A32(p) ((_Atomic int32_t *)(void *)(p))
#define A8(p) ((_Atomic uint8_t *)(void *)(p))

static int32_t *read_pids(const ss_milk *m) { return (int32_t *)(m->base + m->l.off_readpid); }
static int32_t *write_pids(const ss_milk *m) { return (int32_t *)(m->base + m->l.off_writepid); }
static sem_t *sem_at(const ss_milk *m, unsigned i) {
  return (sem_t *)(m->base + m->l.off_sem + (uint64_t)i * SS_MILK_SEM_BYTES);
}

static int attach(int fd, const ss_milk_layout *l, ss_milk **out) {
  ss_milk *m = calloc(1, sizeof *m);
  if (!m) return ENOMEM;
  int rc = ss_file_map_open(fd, (size_t)l->total_bytes, 0, &m->map);
  if (rc) {
    free(m);
    return rc;
  }
  if (!ss_file_map_writable(m->map)) {
    ss_file_map_close(m->map);
    free(m);
    return EACCES;
  }
  m->base = ss_file_map_base(m->map);
  m->l = *l;
  m->claimed = -1;
  struct stat st;
  m->ino = fstat(fd, &st) == 0 ? (uint64_t)st.st_ino : 0;
  *out = m;
  return SS_OK;
}

/* The checks every reader of a milk file makes before it trusts the file:
 * a regular file (not a FIFO or directory planted under the name), longer
 * than the metadata block, whose metadata (copied into *md) parses into a
 * layout that matches the file's size. *st is the file's. */
static int read_layout(int fd, struct stat *st, ss_milk_md *md, ss_milk_layout *layout) {
  if (fstat(fd, st) != 0) return errno;
  if (!S_ISREG(st->st_mode)) return ENODEV;
  if ((uint64_t)st->st_size <= SS_MILK_MD_BYTES ||
      pread(fd, md, sizeof *md, 0) != (ssize_t)sizeof *md)
    return EMSGSIZE;
  return ss_milk_layout_parse(md, sizeof *md, (uint64_t)st->st_size, layout);
}

int ss_milk_open(const char *path, ss_milk **out, ss_milk_layout *layout) {
  *out = NULL;
  /* O_NONBLOCK: a FIFO planted under the name must not block the open. */
  int fd = open(path, O_RDWR | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return errno;
  struct stat st;
  ss_milk_md md;
  int rc = read_layout(fd, &st, &md, layout);
  if (!rc) rc = attach(fd, layout, out);
  close(fd);
  return rc;
}

static void put_time(int64_t *ts, int64_t ns) {
  ts[0] = ns / SS_NS_PER_S;
  ts[1] = ns % SS_NS_PER_S;
}

static int64_t milk_clock_ns(void) {
  /* CLOCK_ISIO: CLOCK_TAI where the headers define it, as milk's. */
  struct timespec ts;
  clock_gettime(CLOCK_TAI, &ts);
  return (int64_t)ts.tv_sec * SS_NS_PER_S + ts.tv_nsec;
}

int ss_milk_create(const char *path, const char *name, unsigned mode, ss_milk_layout *l,
                   ss_milk **out) {
  *out = NULL;
  l->location = -1;
  if (l->nproctrace == 0) l->nproctrace = SS_MILK_NB_PROCTRACE;
  int rc = ss_milk_layout_compute(l);
  if (rc) return rc;
  size_t nlen = strlen(name);
  if (nlen == 0 || nlen > SS_MILK_MAX_NAME) return SS_ENAME;
  char tmp[PATH_MAX];
  if (snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid()) >= (int)sizeof tmp)
    return ENAMETOOLONG;
  int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, (mode_t)mode);
  if (fd < 0) return errno;
  if (fchmod(fd, (mode_t)mode) != 0 || ftruncate(fd, (off_t)l->total_bytes) != 0) {
    rc = errno;
    goto fail;
  }
  rc = attach(fd, l, out);
  if (rc) goto fail;
  ss_milk *m = *out;
  ss_milk_md *h = MD(m);
  struct stat st;
  fstat(fd, &st);
  memcpy(h->name, name, nlen);
  h->naxis = l->naxis;
  memcpy(h->size, l->size, sizeof h->size);
  h->nelement = l->nelement;
  h->datatype = l->datatype;
  h->imagetype = l->imagetype;
  int64_t now = milk_clock_ns();
  put_time(h->creationtime, now);
  put_time(h->lastaccesstime, now);
  h->creatorPID = (int32_t)getpid();
  h->ownerPID = 0;
  h->shared = 1;
  h->inode = (uint64_t)st.st_ino;
  h->location = -1;
  h->status = 0;
  h->sem = l->nsem;
  h->NBproctrace = l->nproctrace;
  h->NBkw = l->nkw;
  h->CBsize = l->cbsize;
  h->imdatamemsize = l->frame_bytes;
  for (unsigned i = 0; i < l->nsem; i++) {
    sem_init(sem_at(m, i), 1, 0);
    read_pids(m)[i] = -1;
    write_pids(m)[i] = -1;
  }
  sem_init((sem_t *)(m->base + l->off_semlog), 1, 0);
  for (unsigned i = 0; i < l->nproctrace; i++)
    *(int32_t *)(m->base + l->off_trace + (uint64_t)i * SS_MILK_TRACE_BYTES +
                 TRACE_TRIGSEM_OFF) = -1;
  /* Our frame records name the count of the frame in their slot (milk's
   * writer leaves them 0): all ones until a frame is there. */
  for (unsigned i = 0; i < l->cbsize; i++)
    *(uint64_t *)(m->base + l->off_cbmd + (uint64_t)i * SS_MILK_CBMD_BYTES) = UINT64_MAX;
  for (unsigned i = 0; i < l->nkw; i++)
    m->base[l->off_kw + (uint64_t)i * SS_MILK_KW_BYTES + offsetof(ss_milk_kw, type)] = 'N';
  /* The version last, as milk's creator does: a reader that checks it sees
   * a finished block. Nobody can open the file yet anyway (temporary name). */
  atomic_thread_fence(memory_order_release);
  memcpy(h->version, SS_MILK_VERSION, sizeof SS_MILK_VERSION);
  if (link(tmp, path) != 0) {
    rc = errno;
    ss_milk_close(m);
    *out = NULL;
    goto fail;
  }
  unlink(tmp);
  close(fd);
  strncpy(l->version, SS_MILK_VERSION, sizeof l->version - 1);
  strncpy(l->name, name, sizeof l->name - 1);
  return SS_OK;
fail:
  unlink(tmp);
  close(fd);
  return rc;
}

void ss_milk_close(ss_milk *m) {
  if (!m) return;
  ss_milk_release(m);
  ss_file_map_close(m->map);
  free(m);
}

int ss_milk_status(const ss_milk *m) { return ss_file_map_lost(m->map) ? SS_ECORRUPT : SS_OK; }

/* ---- reading and publishing ------------------------------------------------- */

static void pubinfo(const ss_milk *m, ss_milk_pubinfo *info, uint64_t cnt0) {
  const ss_milk_md *h = MD(m);
  info->cnt0 = cnt0;
  info->cnt1 = atomic_load_explicit(A64(&h->cnt1), memory_order_relaxed);
  info->writetime_ns = h->writetime[0] * SS_NS_PER_S + h->writetime[1];
  info->atime_ns = h->atime[0] * SS_NS_PER_S + h->atime[1];
}

/* The stable-frame loop of a read (dst: the pixels are copied) and of a
 * view's start (dst NULL: the metadata only; the caller reads the pixels
 * and ss_milk_view_valid checks them). */
static int stable_frame(ss_milk *m, void *dst, int64_t budget_ns, ss_milk_pubinfo *info) {
  ss_milk_md *h = MD(m);
  int64_t start = ss_monotonic_ns();
  for (;;) {
    /* SYNC POINT (milk r1): cnt0 and write before the copy (acquire), the
     * same after it (acquire fence); pairs with (milk w1). */
    uint64_t c1 = atomic_load_explicit(A64(&h->cnt0), memory_order_acquire);
    uint8_t w1 = atomic_load_explicit(A8(&h->write), memory_order_acquire);
    if (!w1) {
      if (dst) memcpy(dst, m->base + m->l.off_data, m->l.frame_bytes);
      ss_milk_pubinfo tmp;
      pubinfo(m, &tmp, c1);
      atomic_thread_fence(memory_order_acquire);
      uint8_t w2 = atomic_load_explicit(A8(&h->write), memory_order_relaxed);
      uint64_t c2 = atomic_load_explicit(A64(&h->cnt0), memory_order_relaxed);
      if (!w2 && c1 == c2) {
        if (info) *info = tmp;
        return ss_milk_status(m);
      }
    }
    int64_t now = ss_monotonic_ns();
    if (ss_file_map_lost(m->map)) return SS_ECORRUPT;
    if (now - start > budget_ns) return SS_EINCONSISTENT;
    ss_backoff(start, now);
  }
}

int ss_milk_read(ss_milk *m, void *dst, size_t n, int64_t budget_ns, ss_milk_pubinfo *info) {
  if (n != m->l.frame_bytes) return EINVAL;
  return stable_frame(m, dst, budget_ns, info);
}

int ss_milk_write(ss_milk *m, const void *src, size_t n, int64_t atime_ns) {
  if (n != m->l.frame_bytes) return EINVAL;
  ss_milk_md *h = MD(m);
  /* SYNC POINT (milk w1): write = 1 before the pixels (release fence),
   * cnt0 + 1 then write = 0 after them (release), then the posts. milk's
   * own writers do the same with plain stores (ImageStreamIO_UpdateIm). */
  atomic_store_explicit(A8(&h->write), 1, memory_order_relaxed);
  atomic_thread_fence(memory_order_release);
  memcpy(m->base + m->l.off_data, src, n);
  int64_t now = milk_clock_ns();
  int64_t atime = atime_ns < 0 ? now : atime_ns;
  uint64_t c = atomic_load_explicit(A64(&h->cnt0), memory_order_relaxed) + 1;
  if (m->l.cbsize > 0) {
    uint32_t idx = atomic_load_explicit((_Atomic uint32_t *)(void *)&h->CBindex,
                                        memory_order_relaxed) +
                   1;
    int cycled = 0;
    if (idx >= m->l.cbsize) { /* a hostile CBindex lands in range too */
      idx = 0;
      cycled = 1;
    }
    memcpy(m->base + m->l.off_cbdata + (uint64_t)idx * m->l.frame_bytes, src, n);
    /* The frame's record, inside the write window: read_since trusts a
     * slot only if its record names the count it expects (or is 0: a
     * milk writer's). */
    int64_t *rec = (int64_t *)(m->base + m->l.off_cbmd + (uint64_t)idx * SS_MILK_CBMD_BYTES);
    rec[0] = (int64_t)c;
    rec[1] = (int64_t)atomic_load_explicit(A64(&h->cnt1), memory_order_relaxed);
    put_time(rec + 2, atime);
    put_time(rec + 4, now);
    if (cycled) h->CBcycle++;
    atomic_store_explicit((_Atomic uint32_t *)(void *)&h->CBindex, idx, memory_order_relaxed);
  }
  put_time(h->writetime, now);
  put_time(h->atime, atime);
  atomic_store_explicit(A64(&h->cnt0), c, memory_order_release);
  atomic_store_explicit(A8(&h->write), 0, memory_order_release);
  int32_t self = (int32_t)getpid();
  for (unsigned i = 0; i < m->l.nsem; i++) {
    int v = 0;
    sem_getvalue(sem_at(m, i), &v);
    if (v < SS_MILK_SEM_MAXVAL) {
      sem_post(sem_at(m, i));
      atomic_store_explicit(A32(&write_pids(m)[i]), self, memory_order_relaxed);
    }
  }
  sem_t *log = (sem_t *)(m->base + m->l.off_semlog);
  int v = 0;
  sem_getvalue(log, &v);
  if (v < SS_MILK_SEM_MAXVAL) sem_post(log);
  return ss_milk_status(m);
}

int ss_milk_read_since(ss_milk *m, uint64_t after, uint32_t max, void *dst, uint64_t *counts,
                       uint32_t *n, uint64_t *last, int64_t budget_ns) {
  uint32_t size = m->l.cbsize;
  uint64_t fb = m->l.frame_bytes;
  *n = 0;
  if (size < 2) return EINVAL;
  ss_milk_md *h = MD(m);
  int64_t start = ss_monotonic_ns();
  for (;;) {
    /* SYNC POINT (milk r2): cnt0, write and CBindex of one published
     * frame, re-checked after the copies; pairs with (milk w1). */
    uint64_t c1 = atomic_load_explicit(A64(&h->cnt0), memory_order_acquire);
    uint8_t w1 = atomic_load_explicit(A8(&h->write), memory_order_acquire);
    uint32_t idx = atomic_load_explicit((_Atomic uint32_t *)(void *)&h->CBindex,
                                        memory_order_acquire);
    if (!w1 && idx < size) {
      uint64_t depth = c1 < size - 1 ? c1 : size - 1; /* the next write's slot is left out */
      uint64_t first = c1 - depth + 1;
      if (after + 1 > first) first = after + 1;
      uint32_t k = 0;
      for (uint64_t c = first; c <= c1 && k < max; c++, k++) {
        uint64_t slot = (idx + size - (c1 - c) % size) % size;
        memcpy((uint8_t *)dst + (uint64_t)k * fb, m->base + m->l.off_cbdata + slot * fb, fb);
        counts[k] = c;
      }
      atomic_thread_fence(memory_order_acquire);
      uint8_t w2 = atomic_load_explicit(A8(&h->write), memory_order_relaxed);
      uint64_t c2 = atomic_load_explicit(A64(&h->cnt0), memory_order_relaxed);
      if (!w2 && c2 == c1) { /* no write overlapped: CBindex and every copy are of c1 */
        /* A slot whose record names another count holds another frame
         * (a writer died inside the buffer copy and CBindex ran one ahead
         * of cnt0): left out, so the caller counts it missed. */
        uint32_t kept = 0;
        for (uint32_t j = 0; j < k; j++) {
          uint64_t slot = (idx + size - (c1 - counts[j]) % size) % size;
          uint64_t rec;
          memcpy(&rec, m->base + m->l.off_cbmd + slot * SS_MILK_CBMD_BYTES, sizeof rec);
          if (rec != 0 && rec != counts[j]) continue;
          if (kept != j)
            memcpy((uint8_t *)dst + (uint64_t)kept * fb, (uint8_t *)dst + (uint64_t)j * fb, fb);
          counts[kept++] = counts[j];
        }
        k = kept;
        *n = k;
        *last = c1;
        return ss_milk_status(m);
      }
      /* A write overlapped (milk's writer moves CBindex before cnt0, so
       * the slots may be off by one): again, with half as many frames so
       * a fast writer cannot starve a long copy; the caller asks for the
       * rest. */
      if (max > 1) max /= 2;
    }
    int64_t now = ss_monotonic_ns();
    if (ss_file_map_lost(m->map)) return SS_ECORRUPT;
    if (now - start > budget_ns) return SS_EINCONSISTENT;
    ss_backoff(start, now);
  }
}

uint64_t ss_milk_count(const ss_milk *m) {
  return atomic_load_explicit(A64(&MD(m)->cnt0), memory_order_acquire);
}

int ss_milk_writing(const ss_milk *m) {
  return atomic_load_explicit(A8(&MD(m)->write), memory_order_acquire);
}

static int64_t ts_ns(const int64_t ts[2]) {
  /* another process's words: saturate rather than overflow */
  int64_t ns;
  if (__builtin_mul_overflow(ts[0], (int64_t)SS_NS_PER_S, &ns) ||
      __builtin_add_overflow(ns, ts[1], &ns))
    return 0;
  return ns;
}

/* ---- zero-copy views ------------------------------------------------------ */

int ss_milk_view_begin(ss_milk *m, int64_t budget_ns, ss_milk_pubinfo *info) {
  /* SYNC POINT (milk r3): the loop of (milk r1) around the metadata copy
   * alone; ss_milk_view_valid re-reads cnt0 and write after the caller's
   * reads of the pixels. Pairs with (milk w1). */
  return stable_frame(m, NULL, budget_ns, info);
}

int ss_milk_view_valid(const ss_milk *m, uint64_t cnt0) {
  ss_milk_md *h = MD(m);
  atomic_thread_fence(memory_order_acquire); /* the caller's pixel reads come first */
  uint8_t w = atomic_load_explicit(A8(&h->write), memory_order_relaxed);
  uint64_t c = atomic_load_explicit(A64(&h->cnt0), memory_order_relaxed);
  return !w && c == cnt0 && !ss_file_map_lost(m->map);
}

void *ss_milk_data(const ss_milk *m) { return m->base + m->l.off_data; }

void ss_milk_identity(const ss_milk *m, uint64_t *ino, int64_t *creation_ns, int32_t *creator) {
  const ss_milk_md *h = MD(m);
  int64_t ts[2] = {h->creationtime[0], h->creationtime[1]};
  *ino = m->ino;
  *creation_ns = ts_ns(ts);
  *creator = atomic_load_explicit(A32(&h->creatorPID), memory_order_relaxed);
}

/* ---- peeking (list, stat) --------------------------------------------------- */

int ss_milk_peek(const char *path, ss_milk_layout *layout, ss_milk_peek_info *info, int32_t *pids,
                 uint32_t max_pids) {
  memset(info, 0, sizeof *info);
  memset(layout, 0, sizeof *layout);
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return errno;
  struct stat st;
  ss_milk_md h;
  int rc = read_layout(fd, &st, &h, layout);
  if (!rc) {
    info->npids = layout->nsem < max_pids ? layout->nsem : max_pids;
    size_t n = (size_t)info->npids * sizeof(int32_t);
    /* off_readpid + n lies inside the file: the layout's size is its size */
    if (n && pread(fd, pids, n, (off_t)layout->off_readpid) != (ssize_t)n) rc = EMSGSIZE;
  }
  close(fd);
  if (rc) return rc;
  info->cnt0 = h.cnt0;
  info->cnt1 = h.cnt1;
  info->cbindex = h.CBindex;
  info->cbcycle = h.CBcycle;
  info->inode = (uint64_t)st.st_ino; /* the file's, not the copy milk stored */
  info->creation_ns = ts_ns(h.creationtime);
  info->write_ns = ts_ns(h.writetime);
  info->atime_ns = ts_ns(h.atime);
  info->creator_pid = h.creatorPID;
  info->owner_pid = h.ownerPID;
  info->write = h.write;
  info->file_bytes = (uint64_t)st.st_size;
  info->file_mode = (uint32_t)st.st_mode;
  info->file_uid = (uint32_t)st.st_uid;
  return SS_OK;
}

/* ---- the reader PID table ------------------------------------------------- */

static int pid_free(int32_t pid) {
  /* milk: 0 or a pid getpgid() fails on; -1 is what milk's creator writes. */
  return pid <= 0 || !ss_proc_alive(pid, 0);
}

static int take(ss_milk *m, unsigned i, int32_t self) {
  int32_t seen = atomic_load_explicit(A32(&read_pids(m)[i]), memory_order_relaxed);
  if (seen == self) return 1;
  if (!pid_free(seen)) return 0;
  return atomic_compare_exchange_strong_explicit(A32(&read_pids(m)[i]), &seen, self,
                                                 memory_order_acq_rel, memory_order_relaxed);
}

int ss_milk_claim(ss_milk *m, int preferred) {
  if (m->claimed >= 0) return m->claimed;
  int32_t self = (int32_t)getpid();
  unsigned n = m->l.nsem;
  /* A handle of this process that holds one already: milk's rule is one
   * semaphore per pid, so a second handle shares it. */
  for (unsigned i = 0; i < n; i++)
    if (atomic_load_explicit(A32(&read_pids(m)[i]), memory_order_relaxed) == self)
      return m->claimed = (int)i;
  if (preferred >= 0 && (unsigned)preferred < n && take(m, (unsigned)preferred, self))
    return m->claimed = preferred;
  for (unsigned i = 0; i < n; i++)
    if (take(m, i, self)) return m->claimed = (int)i;
  return ss_file_map_lost(m->map) ? SS_ECORRUPT : SS_EBUSY;
}

int ss_milk_claimed(const ss_milk *m) { return m->claimed; }

void ss_milk_release(ss_milk *m) {
  if (m->claimed < 0) return;
  int32_t self = (int32_t)getpid();
  atomic_compare_exchange_strong_explicit(A32(&read_pids(m)[m->claimed]), &self, 0,
                                          memory_order_acq_rel, memory_order_relaxed);
  m->claimed = -1;
}

/* How long after milk's writetime of the frame now published (milk's
 * clock) this wait woke, if that frame came after the wait went to sleep
 * (asleep_at, milk's clock); -1 otherwise. Another process's words: only a
 * positive difference smaller than the wait itself is kept (ss_spin_end). */
static int64_t woke_after(const ss_milk *m, int64_t asleep_at) {
  int64_t ts[2] = {MD(m)->writetime[0], MD(m)->writetime[1]};
  int64_t at = ts_ns(ts), now = milk_clock_ns();
  return at > asleep_at && now > at ? now - at : -1;
}

/* Sleep on semaphore i until cnt0 passes last (SS_OK) or the deadline
 * (SS_ETIMEDOUT), or an errno: EINTR for a signal. The post comes after cnt0 goes up, so a frame published after
 * the caller's last check leaves a count on the semaphore; older counts
 * only make this loop go round once more. */
static int sleep_on_sem(ss_milk *m, unsigned i, uint64_t last, int64_t deadline) {
  for (;;) {
    if (ss_milk_count(m) > last) return SS_OK;
    if (ss_file_map_lost(m->map)) return SS_ECORRUPT;
    int64_t now = ss_monotonic_ns();
    if (deadline != INT64_MAX && now >= deadline) return SS_ETIMEDOUT;
    int64_t until = deadline == INT64_MAX ? now + SS_NS_PER_S : deadline;
    struct timespec ts = {.tv_sec = until / SS_NS_PER_S, .tv_nsec = until % SS_NS_PER_S};
    if (sem_clockwait(sem_at(m, i), CLOCK_MONOTONIC, &ts) != 0 && errno != ETIMEDOUT) return errno;
  }
}

int ss_milk_wait_newer(ss_milk *m, uint64_t last, int64_t timeout_ns, int64_t spin_ns) {
  /* Claim first, even when a frame is already there: a reader has its
   * semaphore from its first read_new on, as milk's readers do. */
  int i = ss_milk_claim(m, -1);
  if (i < 0) return i;
  if (ss_milk_count(m) > last) return SS_OK;
  /* The wait of docs/waiting.md on cnt0: a nap if the policy chose one,
   * the spin, then the sleep; milk's write flag is the write in flight that
   * may carry the spin to its cap. A frame caught in the spin leaves its
   * post on the semaphore: the next sleep takes it back at once (the sleep
   * looks at cnt0 again), as it does any left-over post. */
  if (spin_ns < 0) spin_ns = ss_default_spin_ns();
  ss_spin sp;
  ss_spin_begin(&m->wait, spin_ns, timeout_ns, ss_monotonic_ns(), &sp);
  int64_t asleep_at = 0;
  int rc = SS_ETIMEDOUT;
  if (sp.nap_end > sp.start) {
    asleep_at = milk_clock_ns();
    rc = sleep_on_sem(m, (unsigned)i, last, sp.nap_end);
    if (rc == EINTR) return SS_ETIMEDOUT; /* the caller checks for signals */
    if (rc != SS_OK && rc != SS_ETIMEDOUT) return rc;
    if (rc == SS_ETIMEDOUT) ss_spin_nap_over(&sp, ss_monotonic_ns());
  }
  int64_t now = sp.last;
  for (unsigned k = 1; rc != SS_OK && sp.end > sp.start; k++) {
    if (now >= sp.end && (now >= sp.cap_end || !ss_milk_writing(m))) break;
    ss_cpu_relax();
    if (ss_milk_count(m) > last) {
      ss_spin_end(&m->wait, &sp, SS_WAIT_CAUGHT, ss_monotonic_ns(), -1);
      return SS_OK;
    }
    if ((k & 15) == 0) {
      if (ss_file_map_lost(m->map)) return SS_ECORRUPT;
      now = ss_monotonic_ns();
      if (ss_spin_preempted(&m->wait, &sp, now)) break;
    }
  }
  if (rc != SS_OK) {
    asleep_at = milk_clock_ns();
    rc = sleep_on_sem(m, (unsigned)i, last, sp.deadline);
    if (rc == EINTR) return SS_ETIMEDOUT;
    if (rc != SS_OK && rc != SS_ETIMEDOUT) return rc;
  }
  ss_spin_end(&m->wait, &sp, rc == SS_OK ? SS_WAIT_WOKEN : SS_WAIT_TIMED_OUT, ss_monotonic_ns(),
              rc == SS_OK ? woke_after(m, asleep_at) : -1);
  return rc;
}

int ss_milk_read_new(ss_milk *m, uint64_t last, int64_t timeout_ns, int64_t spin_ns, void *dst,
                     size_t n, int64_t budget_ns, ss_milk_pubinfo *info) {
  if (n != m->l.frame_bytes) return EINVAL;
  int rc = ss_milk_wait_newer(m, last, timeout_ns, spin_ns);
  return rc ? rc : stable_frame(m, dst, budget_ns, info);
}

void ss_milk_spin_policy(const ss_milk *m, ss_wait_policy_info *out) {
  ss_wait_stats_info(&m->wait, out);
}

/* ---- keywords ------------------------------------------------------------ */

int ss_milk_kw_get(const ss_milk *m, uint32_t i, ss_milk_kw *out) {
  if (i >= m->l.nkw) return ERANGE;
  memcpy(out, m->base + m->l.off_kw + (uint64_t)i * SS_MILK_KW_BYTES, sizeof *out);
  return ss_milk_status(m);
}

int ss_milk_kw_set(ss_milk *m, uint32_t i, const ss_milk_kw *kw) {
  if (i >= m->l.nkw) return ERANGE;
  ss_milk_kw *dst = (ss_milk_kw *)(m->base + m->l.off_kw + (uint64_t)i * SS_MILK_KW_BYTES);
  uint64_t cnt = dst->cnt;
  memcpy(dst, kw, sizeof *dst);
  dst->cnt = cnt + 1;
  return ss_milk_status(m);
}
