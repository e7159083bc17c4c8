/* The direct reader: rows of a huge read-only array file, read cold with
 * O_DIRECT and warm from the page cache (docs/direct.md).
 *
 * A read request is a list of units (rows of the leading dimensions). It is
 * turned into extents (file offset, length, place in the destination),
 * consecutive units coalesced; extents are sorted by file offset and grown
 * to block boundaries; blocks that touch or overlap are merged into spans of
 * at most SS_DIRECT_SPAN_BYTES, gaps are never read. Each span is split by
 * block into three kinds: blocks in the reader's own block cache (copied
 * from it), blocks in the page cache (mincore(); copied from a read-only
 * mapping of the file), and cold blocks, read in runs with O_DIRECT through
 * the thread's io_uring in batches and then kept in the block cache.
 */
#define _GNU_SOURCE
#include "shmstream_direct.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "direct_cache.h"
#include "direct_io.h"
#include "platform.h"

/* Largest single read: big enough for full disk bandwidth, small enough that
 * a large request keeps several reads in flight. */
#define SS_DIRECT_SPAN_BYTES (1u << 20)
/* Units handled per planning round; bounds the extent list's memory. */
#define SS_DIRECT_CHUNK_UNITS 65536u

struct ss_direct {
  int fd;
  int mode;
  int use_cache;         /* consult the page cache through the mapping */
  uint32_t block;        /* O_DIRECT alignment, a multiple of the page */
  uint32_t page;
  uint64_t offset, nbytes, end, file_bytes;
  const char *map;       /* [map_off, map_off + map_len) of the file */
  uint64_t map_off;
  size_t map_len;
  pthread_mutex_t mu;
  pthread_cond_t idle;
  int users;             /* reads in flight */
  int closed;
  ss_dcache *cache;      /* blocks read with O_DIRECT; NULL: none */
  uint64_t cache_limit;  /* as asked at open */
  /* Counters (relaxed atomics), bytes of whole blocks. */
  uint64_t n_direct, n_cache_hit, n_page_cache;
};

typedef struct extent {
  uint64_t off, len, dst;
} extent;

static uint64_t align_down(uint64_t x, uint64_t a) { return x - x % a; }
static uint64_t align_up(uint64_t x, uint64_t a) { return align_down(x + a - 1, a); }
static uint64_t umin(uint64_t a, uint64_t b) { return a < b ? a : b; }
static uint64_t umax(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* ---- open / close ------------------------------------------------------ */

static int probe_read(int fd, uint32_t align, uint64_t file_bytes) {
  if (file_bytes == 0) return 1;
  void *buf;
  if (posix_memalign(&buf, align, align) != 0) return 1;
  ssize_t r;
  do r = pread(fd, buf, align, 0);
  while (r < 0 && errno == EINTR);
  int ok = !(r < 0 && errno == EINVAL);
  free(buf);
  return ok;
}

int ss_direct_open(ss_direct **out, const char *path, uint64_t offset, uint64_t nbytes,
                   int use_page_cache, uint64_t cache_bytes) {
  *out = NULL;
  if (offset + nbytes < offset) return EOVERFLOW;
  /* O_NONBLOCK: a FIFO or a device must not block the open before fstat
   * can refuse it; a regular file's reads ignore the flag, cleared below. */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return errno;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return e;
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return SS_DIRECT_ENOTREG;
  }
  fcntl(fd, F_SETFL, 0);
  if ((uint64_t)st.st_size < offset + nbytes) {
    close(fd);
    return SS_DIRECT_ESHORT;
  }

  ss_direct *d = calloc(1, sizeof *d);
  if (!d) {
    close(fd);
    return ENOMEM;
  }
  d->fd = fd;
  d->offset = offset;
  d->nbytes = nbytes;
  d->end = offset + nbytes;
  d->file_bytes = (uint64_t)st.st_size;
  pthread_mutex_init(&d->mu, NULL);
  pthread_cond_init(&d->idle, NULL);

  /* One descriptor: opened buffered, switched to O_DIRECT when it works. */
  d->mode = SS_DIRECT_MODE_BUFFERED;
  uint32_t align;
  if (ss_plat_direct_probe(fd, &align) && ss_plat_direct_set(fd, 1) == 0) {
    if (probe_read(fd, align, d->file_bytes)) {
      d->mode = SS_DIRECT_MODE_DIRECT;
    } else {
      ss_plat_direct_set(fd, 0);
    }
  }
  d->block = align;
  d->page = (uint32_t)sysconf(_SC_PAGESIZE);
  if (d->mode == SS_DIRECT_MODE_BUFFERED) {
    /* Random access: read-ahead would only waste I/O and cache. */
    ss_plat_advise_random(fd);
  } else if (use_page_cache && nbytes > 0) {
    d->map_off = align_down(offset, d->block);
    d->map_len = (size_t)(align_up(d->end, d->block) - d->map_off);
    void *m = mmap(NULL, d->map_len, PROT_READ, MAP_SHARED, fd, (off_t)d->map_off);
    if (m != MAP_FAILED) {
      /* A page evicted between mincore() and the copy faults in alone. */
      madvise(m, d->map_len, MADV_RANDOM);
      d->map = m;
      d->use_cache = 1;
    }
  }
  if (d->mode == SS_DIRECT_MODE_DIRECT && nbytes > 0) {
    /* Only what O_DIRECT reads is kept: buffered reads fill the page cache. */
    d->cache = ss_dcache_new(cache_bytes, d->block);
    d->cache_limit = d->cache ? ss_dcache_limit_bytes(d->cache) : 0;
  }
  *out = d;
  return 0;
}

void ss_direct_info_get(const ss_direct *d, ss_direct_info *info) {
  info->mode = d->mode;
  info->block_bytes = d->block;
  info->offset = d->offset;
  info->nbytes = d->nbytes;
  info->file_bytes = d->file_bytes;
}

void ss_direct_stats_get(ss_direct *d, ss_direct_stats *st) {
  st->direct_bytes = __atomic_load_n(&d->n_direct, __ATOMIC_RELAXED);
  st->cache_hit_bytes = __atomic_load_n(&d->n_cache_hit, __ATOMIC_RELAXED);
  st->page_cache_bytes = __atomic_load_n(&d->n_page_cache, __ATOMIC_RELAXED);
  st->cache_limit_bytes = d->cache_limit;
  pthread_mutex_lock(&d->mu);
  st->cache_used_bytes = d->cache ? ss_dcache_used_bytes(d->cache) : 0;
  pthread_mutex_unlock(&d->mu);
}

void ss_direct_close(ss_direct *d) {
  if (!d) return;
  pthread_mutex_lock(&d->mu);
  if (!d->closed) {
    d->closed = 1;
    while (d->users > 0) pthread_cond_wait(&d->idle, &d->mu);
    if (d->map) munmap((void *)d->map, d->map_len);
    d->map = NULL;
    ss_dcache_free(d->cache); /* no reader is inside: users == 0 */
    d->cache = NULL;
    close(d->fd);
    d->fd = -1;
  }
  pthread_mutex_unlock(&d->mu);
}

void ss_direct_free(ss_direct *d) {
  if (!d) return;
  ss_direct_close(d);
  pthread_cond_destroy(&d->idle);
  pthread_mutex_destroy(&d->mu);
  free(d);
}

static int enter(ss_direct *d) {
  pthread_mutex_lock(&d->mu);
  int rc = d->closed ? SS_DIRECT_ECLOSED : 0;
  if (!rc) d->users++;
  pthread_mutex_unlock(&d->mu);
  return rc;
}

static void leave(ss_direct *d) {
  pthread_mutex_lock(&d->mu);
  if (--d->users == 0 && d->closed) pthread_cond_broadcast(&d->idle);
  pthread_mutex_unlock(&d->mu);
}

const char *ss_direct_io_backend(void) { return ss_dio_backend(); }

/* ---- executing a sorted extent list ------------------------------------ */

typedef struct batch {
  ss_direct *d;
  ss_dio_ctx *ctx;
  char *arena;
  size_t used;
  size_t n;
  ss_dio_op ops[SS_DIO_WINDOW];
  const extent *ext;
  char *dst;
  uint64_t n_direct, n_cache_hit, n_page_cache;
} batch;

/* Copies the part of extents [lo, hi) that lies in [off, off + len). */
static void copy_out(const batch *b, size_t lo, size_t hi, uint64_t off, uint64_t len,
                     const char *src) {
  uint64_t end = off + len;
  for (size_t i = lo; i < hi && b->ext[i].off < end; i++) {
    const extent *e = &b->ext[i];
    uint64_t a = umax(e->off, off), z = umin(e->off + e->len, end);
    if (a < z) memcpy(b->dst + e->dst + (a - e->off), src + (a - off), z - a);
  }
}

static int pread_full(int fd, char *buf, uint64_t len, uint64_t off) {
  while (len > 0) {
    ssize_t r = pread(fd, buf, len, (off_t)off);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return errno;
    if (r == 0) return SS_DIRECT_ETRUNCATED;
    buf += r;
    off += (uint64_t)r;
    len -= (uint64_t)r;
  }
  return 0;
}

static int flush(batch *b) {
  if (b->n == 0) return 0;
  ss_direct *d = b->d;
  int rc = ss_dio_submit_wait(b->ctx, d->fd, b->ops, b->n);
  for (size_t i = 0; i < b->n && rc == 0; i++) {
    ss_dio_op *op = &b->ops[i];
    uint64_t need = umin(op->len, d->file_bytes - op->off); /* the last block ends at EOF */
    uint64_t got = op->res < 0 ? 0 : (uint64_t)op->res;
    if (got < need) {
      /* Short or failed: finish synchronously from an aligned point. */
      uint64_t from = align_down(got, d->block);
      rc = pread_full(d->fd, op->buf + from, need - from, op->off + from);
      if (rc == SS_DIRECT_ETRUNCATED || rc == EINVAL) {
        /* O_DIRECT wants whole blocks: ask for them, accept EOF inside. */
        ssize_t r = pread(d->fd, op->buf + from, align_up(need - from, d->block),
                          (off_t)(op->off + from));
        rc = r < 0 ? errno : ((uint64_t)r < need - from ? SS_DIRECT_ETRUNCATED : 0);
      }
    }
    if (rc == 0) {
      copy_out(b, op->lo, op->hi, op->off, need, op->buf);
      b->n_direct += op->len;
      /* Keep the blocks (the last may end at EOF; bytes past it are never
       * copied out, since every extent lies inside the file). */
      for (uint64_t k = 0; d->cache && k < need; k += d->block) {
        ss_dcache_put(d->cache, (op->off + k) / d->block, op->buf + k);
      }
    }
  }
  b->n = 0;
  b->used = 0;
  return rc;
}

static int queue_cold(batch *b, uint64_t off, uint64_t len, size_t lo, size_t hi) {
  if (b->n == SS_DIO_WINDOW || b->used + len > SS_DIO_ARENA_BYTES) {
    int rc = flush(b);
    if (rc) return rc;
  }
  ss_dio_op *op = &b->ops[b->n++];
  op->off = off;
  op->len = (uint32_t)len;
  op->buf = b->arena + b->used;
  op->lo = lo;
  op->hi = hi;
  b->used += len;
  return 0;
}

/* Copying one cached block out (under its shard's lock). */
typedef struct hit {
  const batch *b;
  size_t lo, hi;
  uint64_t off, len;
} hit;

static void copy_hit(void *arg, const char *data) {
  const hit *h = arg;
  copy_out(h->b, h->lo, h->hi, h->off, h->len, data);
}

enum { COLD = 0, PAGE_CACHED = 1, BLOCK_CACHED = 2 };
#define SPAN_BLOCKS (SS_DIRECT_SPAN_BYTES / 4096)

/* One span [s, e) (block aligned): blocks in the block cache copied from
 * it, runs of blocks in the page cache copied from the mapping, runs of
 * cold blocks queued for O_DIRECT. */
static int do_span(batch *b, uint64_t s, uint64_t e, size_t lo, size_t hi) {
  ss_direct *d = b->d;
  const uint64_t B = d->block, page = d->page, per_block = B / page;
  const size_t nblk = (size_t)((e - s) / B);
  if (nblk > SPAN_BLOCKS || (!d->cache && !d->use_cache)) return queue_cold(b, s, e - s, lo, hi);
  unsigned char kind[SPAN_BLOCKS];
  memset(kind, COLD, nblk);
  size_t left = nblk; /* blocks not yet served */
  if (d->cache) {
    hit h = {b, lo, hi, 0, B};
    for (size_t k = 0; k < nblk; k++) {
      h.off = s + k * B;
      uint64_t key = h.off / B;
      if (!ss_dcache_maybe(d->cache, key)) continue;
      while (h.lo < hi && b->ext[h.lo].off + b->ext[h.lo].len <= h.off) h.lo++;
      if (ss_dcache_get(d->cache, key, copy_hit, &h)) {
        kind[k] = BLOCK_CACHED;
        b->n_cache_hit += B;
        left--;
      }
    }
    if (left == 0) return 0;
  }
  unsigned char vec[SS_DIRECT_SPAN_BYTES / 4096];
  if (d->use_cache && (e - s) / page <= sizeof vec &&
      ss_plat_mincore((void *)(d->map + (s - d->map_off)), e - s, vec) == 0) {
    for (size_t k = 0; k < nblk; k++) {
      if (kind[k] != COLD) continue;
      int cached = 1;
      for (uint64_t p = 0; p < per_block; p++) cached &= vec[k * per_block + p] & 1;
      if (cached) kind[k] = PAGE_CACHED;
    }
  }
  /* Runs of equal kind; block-cached blocks are done already. */
  size_t k = 0;
  while (k < nblk) {
    size_t j = k + 1;
    while (j < nblk && kind[j] == kind[k]) j++;
    uint64_t a = s + k * B, z = s + j * B;
    while (lo < hi && b->ext[lo].off + b->ext[lo].len <= a) lo++;
    if (kind[k] == PAGE_CACHED) {
      copy_out(b, lo, hi, a, z - a, d->map + (a - d->map_off));
      b->n_page_cache += z - a;
    } else if (kind[k] == COLD) {
      int rc = queue_cold(b, a, z - a, lo, hi);
      if (rc) return rc;
    }
    k = j;
  }
  return 0;
}

static int exec_buffered(ss_direct *d, const extent *ext, size_t n, char *dst) {
  for (size_t i = 0; i < n; i++) {
    int rc = pread_full(d->fd, dst + ext[i].dst, ext[i].len, ext[i].off);
    if (rc) return rc;
  }
  return 0;
}

static void count(const batch *b) {
  ss_direct *d = b->d;
  if (b->n_direct) __atomic_fetch_add(&d->n_direct, b->n_direct, __ATOMIC_RELAXED);
  if (b->n_cache_hit) __atomic_fetch_add(&d->n_cache_hit, b->n_cache_hit, __ATOMIC_RELAXED);
  if (b->n_page_cache) __atomic_fetch_add(&d->n_page_cache, b->n_page_cache, __ATOMIC_RELAXED);
}

static int exec_direct(ss_direct *d, const extent *ext, size_t n, char *dst) {
  batch b;
  b.d = d;
  b.ctx = ss_dio_ctx_get();
  if (!b.ctx) return ENOMEM;
  b.arena = ss_dio_arena(b.ctx);
  if (!b.arena) return ENOMEM;
  b.used = b.n = 0;
  b.ext = ext;
  b.dst = dst;
  b.n_direct = b.n_cache_hit = b.n_page_cache = 0;
  const uint64_t B = d->block, span = umax(SS_DIRECT_SPAN_BYTES, B);
  size_t i = 0;
  while (i < n) {
    size_t lo = i;
    uint64_t s = align_down(ext[i].off, B), e = align_up(ext[i].off + ext[i].len, B);
    for (i++; i < n && align_down(ext[i].off, B) <= e; i++)
      e = umax(e, align_up(ext[i].off + ext[i].len, B));
    for (uint64_t a = s; a < e; a += span) {
      /* Skip the extents that end before this piece (starts are sorted). */
      while (lo < i && ext[lo].off + ext[lo].len <= a) lo++;
      int rc = do_span(&b, a, umin(e, a + span), lo, i);
      if (rc) {
        flush(&b);
        count(&b);
        return rc;
      }
    }
  }
  int rc = flush(&b);
  count(&b);
  return rc;
}

/* ---- building extents -------------------------------------------------- */

static int cmp_off(const void *x, const void *y) {
  const extent *a = x, *b = y;
  return a->off < b->off ? -1 : a->off > b->off;
}

static void sort_extents(extent *e, size_t n) {
  int up = 1, down = 1;
  for (size_t i = 1; i < n && (up || down); i++) {
    if (e[i].off < e[i - 1].off) up = 0;
    if (e[i].off > e[i - 1].off) down = 0;
  }
  if (up) return;
  if (down) {
    for (size_t i = 0, j = n - 1; i < j; i++, j--) {
      extent t = e[i];
      e[i] = e[j];
      e[j] = t;
    }
    return;
  }
  qsort(e, n, sizeof *e, cmp_off);
}

/* Reads units [i0, i1) of the request (units[] or first + k * step). */
static int read_chunk(ss_direct *d, uint64_t unit_bytes, const int64_t *units, int64_t first,
                      int64_t step, size_t i0, size_t i1, char *dst, extent *ext) {
  const uint64_t nunits = d->nbytes / unit_bytes;
  size_t ne = 0;
  int64_t prev = 0;
  for (size_t k = i0; k < i1; k++) {
    int64_t u = units ? units[k] : first + (int64_t)k * step;
    if (u < 0 || (uint64_t)u >= nunits) return SS_DIRECT_ERANGE;
    if (ne > 0 && u == prev + 1) {
      ext[ne - 1].len += unit_bytes; /* consecutive rows: one extent */
    } else {
      ext[ne].off = d->offset + (uint64_t)u * unit_bytes;
      ext[ne].len = unit_bytes;
      ext[ne].dst = (uint64_t)(k - i0) * unit_bytes;
      ne++;
    }
    prev = u;
  }
  char *out = dst + (uint64_t)i0 * unit_bytes;
  if (d->mode == SS_DIRECT_MODE_BUFFERED) return exec_buffered(d, ext, ne, out);
  sort_extents(ext, ne);
  return exec_direct(d, ext, ne, out);
}

static int read_any(ss_direct *d, uint64_t unit_bytes, const int64_t *units, int64_t first,
                    int64_t step, size_t n, void *dst, size_t dst_bytes) {
  if (n == 0) return dst_bytes == 0 ? 0 : EINVAL;
  if (unit_bytes == 0 || n > SIZE_MAX / unit_bytes || n * unit_bytes != dst_bytes) return EINVAL;
  if (!units) {
    /* The last unit must be representable; read_chunk checks the range. */
    __int128 last = (__int128)first + (__int128)(n - 1) * step;
    if (first < 0 || last < 0 || last > INT64_MAX) return SS_DIRECT_ERANGE;
  }
  int rc = enter(d);
  if (rc) return rc;
  size_t chunk = n < SS_DIRECT_CHUNK_UNITS ? n : SS_DIRECT_CHUNK_UNITS;
  extent *ext = malloc(chunk * sizeof *ext);
  if (!ext) rc = ENOMEM;
  for (size_t i = 0; i < n && rc == 0; i += chunk) {
    size_t j = n - i < chunk ? n : i + chunk;
    rc = read_chunk(d, unit_bytes, units, first, step, i, j, dst, ext);
  }
  free(ext);
  leave(d);
  return rc;
}

int ss_direct_read_units(ss_direct *d, uint64_t unit_bytes, const int64_t *units, size_t n,
                         void *dst, size_t dst_bytes) {
  return read_any(d, unit_bytes, units, 0, 0, n, dst, dst_bytes);
}

int ss_direct_read_strided(ss_direct *d, uint64_t unit_bytes, int64_t first, int64_t step, size_t n,
                           void *dst, size_t dst_bytes) {
  return read_any(d, unit_bytes, NULL, first, step, n, dst, dst_bytes);
}

/* ---- page-cache tools -------------------------------------------------- */

int ss_file_evict(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block */
  if (fd < 0) return errno;
  int rc = ss_plat_evict(fd);
  close(fd);
  return rc;
}

int ss_file_resident(const char *path, uint64_t *resident_pages, uint64_t *total_pages) {
  *resident_pages = *total_pages = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block */
  if (fd < 0) return errno;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return e;
  }
  const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  uint64_t pages = ((uint64_t)st.st_size + page - 1) / page;
  *total_pages = pages;
  if (pages == 0) {
    close(fd);
    return 0;
  }
  /* Mapping does not fault pages in; mincore only looks. */
  void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
  int rc = m == MAP_FAILED ? errno : 0;
  close(fd);
  if (rc) return rc;
  enum { STEP = 1 << 16 };
  unsigned char *vec = malloc(STEP);
  if (!vec) rc = ENOMEM;
  for (uint64_t p = 0; p < pages && rc == 0; p += STEP) {
    uint64_t k = umin(STEP, pages - p);
    if (ss_plat_mincore((char *)m + p * page, k * page, vec) != 0) {
      rc = errno;
      break;
    }
    for (uint64_t i = 0; i < k; i++) *resident_pages += vec[i] & 1;
  }
  free(vec);
  munmap(m, (size_t)st.st_size);
  return rc;
}
