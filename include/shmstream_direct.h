/* shmstream direct reader: random row reads from a huge read-only array file.
 *
 * Cold data is read with O_DIRECT into aligned buffers (no read-ahead, no
 * page-cache pollution) and kept in the reader's bounded block cache; data
 * already in the page cache is copied from a read-only mapping of the file
 * instead, because an O_DIRECT read of cached data goes to the disk anyway.
 * docs/direct.md explains the scheme.
 *
 * A reader owns exactly one file descriptor. Reads from many threads at once
 * are safe; each thread submits its cold reads through its own io_uring (one
 * per thread, shared by every reader) or, where io_uring is unavailable,
 * with sequential pread.
 *
 * Return values follow the core: 0 is success, errno values are > 0, and the
 * SS_DIRECT_E* codes of enum ss_status (shmstream.h) are < 0.
 */
#ifndef SHMSTREAM_DIRECT_H
#define SHMSTREAM_DIRECT_H

#include <stddef.h>
#include <stdint.h>

#include "shmstream.h" /* SS_API */

#ifdef __cplusplus
extern "C" {
#endif

enum ss_direct_mode {
  SS_DIRECT_MODE_DIRECT = 1,  /* O_DIRECT for cold data, mapping for cached */
  SS_DIRECT_MODE_BUFFERED = 2 /* the filesystem has no O_DIRECT: buffered pread */
};

typedef struct ss_direct ss_direct;

typedef struct ss_direct_info {
  int mode;             /* enum ss_direct_mode */
  uint32_t block_bytes; /* alignment and unit of O_DIRECT reads */
  uint64_t offset;      /* first byte of the array in the file */
  uint64_t nbytes;      /* array bytes */
  uint64_t file_bytes;  /* file size at open */
} ss_direct_info;

/* Counters of one reader since open, in bytes of whole blocks. */
typedef struct ss_direct_stats {
  uint64_t direct_bytes;      /* read from the file with O_DIRECT */
  uint64_t cache_hit_bytes;   /* served from the reader's block cache */
  uint64_t page_cache_bytes;  /* served from the kernel's page cache */
  uint64_t cache_used_bytes;  /* block-cache memory holding blocks now */
  uint64_t cache_limit_bytes; /* its bound (0: no block cache) */
} ss_direct_stats;

/* The default cache_bytes of the Python binding: 256 MiB. */
#define SS_DIRECT_DEFAULT_CACHE_BYTES ((uint64_t)256 << 20)

/* Opens path read-only for an array of nbytes starting at offset.
 * use_page_cache = 0 never consults the page cache (every read is O_DIRECT).
 * cache_bytes bounds the reader's block cache: blocks read with O_DIRECT are
 * kept (least recently used dropped first) and served from memory when read
 * again; 0 turns it off. Its memory is taken as it fills and freed by close.
 * The block cache assumes the file does not change while the reader is open. */
SS_API int ss_direct_open(ss_direct **out, const char *path, uint64_t offset, uint64_t nbytes,
                          int use_page_cache, uint64_t cache_bytes);
SS_API void ss_direct_info_get(const ss_direct *d, ss_direct_info *info);
SS_API void ss_direct_stats_get(ss_direct *d, ss_direct_stats *stats);
/* Idempotent; waits for reads in flight on other threads, then frees. The
 * handle itself stays valid (reads return SS_DIRECT_ECLOSED) until free. */
SS_API void ss_direct_close(ss_direct *d);
SS_API void ss_direct_free(ss_direct *d);

/* Gather: dst receives, in order, the n units units[0], units[1], ... where
 * unit k is the unit_bytes bytes at offset + k * unit_bytes. dst_bytes must
 * equal n * unit_bytes. Consecutive units are coalesced, blocks shared by
 * neighbouring units are read once, gaps between them are not read. */
SS_API int ss_direct_read_units(ss_direct *d, uint64_t unit_bytes, const int64_t *units, size_t n,
                                void *dst, size_t dst_bytes);
/* The same for units first, first + step, ... (n of them; step may be < 0). */
SS_API int ss_direct_read_strided(ss_direct *d, uint64_t unit_bytes, int64_t first, int64_t step,
                                  size_t n, void *dst, size_t dst_bytes);

/* "io_uring" or "pread": how this process submits parallel cold reads. */
SS_API const char *ss_direct_io_backend(void);

/* Page-cache tools for tests and benchmarks. evict drops the file's clean
 * cached pages (posix_fadvise DONTNEED; pages mapped by a process stay);
 * resident counts cached pages with mincore. */
SS_API int ss_file_evict(const char *path);
SS_API int ss_file_resident(const char *path, uint64_t *resident_pages, uint64_t *total_pages);

#ifdef __cplusplus
}
#endif
#endif
