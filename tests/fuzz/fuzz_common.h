/* Shared by the libFuzzer harnesses (tests/fuzz/fuzz_*.c): the input's
 * control byte and the one fuzz-only segment each harness writes.
 *
 * A header carries an FNV checksum: random bytes never pass it, so the
 * control byte can ask the harness to store a matching checksum (and the
 * fuzz segment's own name) after the input is in place; the fuzzer then
 * reaches every check behind the checksum. */
#ifndef SS_FUZZ_COMMON_H
#define SS_FUZZ_COMMON_H

#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core_helpers.h" /* src/core: ss_slotless, the slot records */

enum {
  FZ_FIX_CHECKSUM = 1u << 0, /* store the checksum the identity block needs */
  FZ_SET_NAME = 1u << 1,     /* store the fuzz segment's name (open matches it) */
  FZ_EXTEND = 1u << 2,       /* grow the file to the size the header claims */
  FZ_READONLY = 1u << 3,     /* open read-only */
  FZ_SET_MAGIC = 1u << 4,    /* store the magic */
};

/* Files the header may claim with FZ_EXTEND; more is out of a fuzzer's
 * memory budget and adds nothing (the bytes are zero). */
#define FZ_MAX_FILE (4u << 20)

/* The fuzz-only user name of this process: "fuzz-<tag>-<harness>-<pid>",
 * so a campaign and the test suite's replay never share a segment, and
 * tests/fuzz/run.sh removes what a crashed run left by its tag
 * ($SS_FUZZ_TAG, default "x"). */
static inline const char *fz_name(const char *harness) {
  static char name[96];
  if (!name[0]) {
    const char *tag = getenv("SS_FUZZ_TAG");
    snprintf(name, sizeof name, "fuzz-%.32s-%s-%d", tag && *tag ? tag : "x", harness,
             (int)getpid());
  }
  return name;
}

/* The header's fix-ups the control byte asks for (in this order: the
 * checksum covers the name). */
static inline void fz_fix(ss_header *h, unsigned ctl, const char *name) {
  if (ctl & FZ_SET_NAME) {
    size_t n = strlen(name);
    memset(h->id.name, 0, sizeof h->id.name);
    memcpy(h->id.name, name, n);
    h->id.name_len = (uint32_t)n;
  }
  if (ctl & FZ_SET_MAGIC) h->id.magic = SS_MAGIC;
  if (ctl & FZ_FIX_CHECKSUM) h->id.checksum = ss_identity_checksum(&h->id);
}

/* Bytes the header claims (header + slots + records), saturated at
 * UINT64_MAX: the oracle the harnesses check the validator against. */
static inline unsigned __int128 fz_claimed_bytes(const ss_identity *id) {
  unsigned __int128 need = (unsigned __int128)SS_HEADER_BYTES +
                           (unsigned __int128)id->slot_stride * id->slot_count;
  if (id->history) {
    uint64_t rec = (uint64_t)SS_SLOT_RECORD_BYTES * id->slot_count;
    need += (rec + SS_PAYLOAD_ALIGN - 1) / SS_PAYLOAD_ALIGN * SS_PAYLOAD_ALIGN;
  }
  return need;
}

/* Write `bytes` as the segment of user name `name`, file size `file_bytes`
 * (>= n; the rest reads as zero). Returns 0 or -1. */
static inline int fz_write_segment(const char *name, const void *bytes, size_t n,
                                   size_t file_bytes) {
  char segname[SS_SEGMENT_NAME_MAX];
  if (ss_segment_name(name, strlen(name), segname) != SS_OK) return -1;
  int fd = shm_open(segname, O_CREAT | O_TRUNC | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  int ok = ftruncate(fd, (off_t)file_bytes) == 0 && pwrite(fd, bytes, n, 0) == (ssize_t)n;
  close(fd);
  return ok ? 0 : -1;
}

static inline void fz_unlink(const char *name) { ss_segment_unlink(name, strlen(name)); }

/* The create arguments of the harnesses' float32 stream of `n` items
 * (shape[0] must outlive the create) with `history` publications kept. */
static inline ss_create_args fz_float_stream(const char *name, uint64_t *shape, uint64_t n,
                                             uint32_t history) {
  ss_create_args a;
  memset(&a, 0, sizeof a);
  shape[0] = n;
  a.name = name;
  a.kind = SS_KIND_STREAM;
  a.ndim = 1;
  a.shape = shape;
  a.itemsize = 4;
  a.dtype = "<f4";
  a.history = history;
  return a;
}

/* Read every byte of [p, p + n): ASan reports a read outside the mapping. */
static inline uint8_t fz_touch(const void *p, size_t n) {
  const volatile uint8_t *b = (const volatile uint8_t *)p;
  uint8_t x = 0;
  for (size_t i = 0; i < n; i++) x ^= b[i];
  return x;
}

/* An invariant the library must keep on any input: a violation is a
 * finding, reported like a sanitizer error. */
#define FZ_CHECK(cond)                                                                  \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      abort();                                                                          \
    }                                                                                   \
  } while (0)

#endif
