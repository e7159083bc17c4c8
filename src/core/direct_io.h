/* Per-thread submission of batches of reads for the direct reader.
 * Not part of the public ABI. */
#ifndef SS_DIRECT_IO_H
#define SS_DIRECT_IO_H

#include <stddef.h>
#include <stdint.h>

/* Most reads one thread keeps in flight, and most bounce-buffer bytes. */
#define SS_DIO_WINDOW 64u
#define SS_DIO_ARENA_BYTES (8u << 20)

typedef struct ss_dio_op {
  uint64_t off;  /* file offset (aligned for O_DIRECT) */
  uint32_t len;  /* bytes to read (aligned for O_DIRECT) */
  int32_t res;   /* bytes read, or -errno */
  char *buf;     /* destination inside the thread's arena */
  size_t lo, hi; /* the caller's extents this read serves */
} ss_dio_op;

typedef struct ss_dio_ctx ss_dio_ctx;

/* The calling thread's context (created on first use, freed at thread exit,
 * recreated in a forked child). NULL when out of memory. */
ss_dio_ctx *ss_dio_ctx_get(void);
/* The thread's bounce buffer: SS_DIO_ARENA_BYTES, 4096-byte aligned. */
char *ss_dio_arena(ss_dio_ctx *ctx);
/* Reads every op (n <= SS_DIO_WINDOW) concurrently and waits for all; each
 * op's res says how it went. Returns 0, or an errno if submission failed
 * (the ops' res are then -EAGAIN, so the caller's pread retry covers them). */
int ss_dio_submit_wait(ss_dio_ctx *ctx, int fd, ss_dio_op *ops, size_t n);
const char *ss_dio_backend(void);

#endif
