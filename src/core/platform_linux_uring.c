/* Linux's queue of concurrent reads for the direct reader: an io_uring
 * (raw system calls; no liburing), one per thread, owned by direct_io.c's
 * per-thread context (docs/direct.md). Part of the platform seam
 * (src/core/platform.h). */
/* Compiled on Linux only, so every file of the core can be compiled on any system. */
#if defined(__linux__)
#define _GNU_SOURCE
#include <errno.h>
#include <linux/io_uring.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "direct_io.h"
#include "platform.h"

struct ss_plat_ring {
  int fd;
  void *sq_map, *cq_map;
  size_t sq_map_len, cq_map_len;
  struct io_uring_sqe *sqes;
  size_t sqes_len;
  unsigned *sq_tail, *sq_mask, *sq_array;
  unsigned *cq_head, *cq_tail, *cq_mask;
  struct io_uring_cqe *cqes;
};

void ss_plat_ring_close(ss_plat_ring *c) {
  if (!c) return;
  if (c->sqes) munmap(c->sqes, c->sqes_len);
  if (c->cq_map && c->cq_map != c->sq_map) munmap(c->cq_map, c->cq_map_len);
  if (c->sq_map) munmap(c->sq_map, c->sq_map_len);
  if (c->fd >= 0) close(c->fd);
  free(c);
}

ss_plat_ring *ss_plat_ring_open(unsigned depth) {
  struct io_uring_params p;
  memset(&p, 0, sizeof p);
  ss_plat_ring *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->fd = (int)syscall(__NR_io_uring_setup, depth, &p);
  if (c->fd < 0) {
    free(c);
    return NULL;
  }
  c->sq_map_len = p.sq_off.array + p.sq_entries * sizeof(unsigned);
  c->cq_map_len = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
  int single = (p.features & IORING_FEAT_SINGLE_MMAP) != 0;
  if (single && c->cq_map_len > c->sq_map_len) c->sq_map_len = c->cq_map_len;
  c->sq_map = mmap(NULL, c->sq_map_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, c->fd,
                   IORING_OFF_SQ_RING);
  if (c->sq_map == MAP_FAILED) {
    c->sq_map = NULL;
    goto fail;
  }
  if (single) {
    c->cq_map = c->sq_map;
  } else {
    c->cq_map = mmap(NULL, c->cq_map_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, c->fd,
                     IORING_OFF_CQ_RING);
    if (c->cq_map == MAP_FAILED) {
      c->cq_map = NULL;
      goto fail;
    }
  }
  c->sqes_len = p.sq_entries * sizeof(struct io_uring_sqe);
  c->sqes = mmap(NULL, c->sqes_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, c->fd,
                 IORING_OFF_SQES);
  if (c->sqes == MAP_FAILED) {
    c->sqes = NULL;
    goto fail;
  }
  char *sq = c->sq_map, *cq = c->cq_map;
  c->sq_tail = (unsigned *)(sq + p.sq_off.tail);
  c->sq_mask = (unsigned *)(sq + p.sq_off.ring_mask);
  c->sq_array = (unsigned *)(sq + p.sq_off.array);
  c->cq_head = (unsigned *)(cq + p.cq_off.head);
  c->cq_tail = (unsigned *)(cq + p.cq_off.tail);
  c->cq_mask = (unsigned *)(cq + p.cq_off.ring_mask);
  c->cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
  return c;
fail:
  ss_plat_ring_close(c);
  return NULL;
}

int ss_plat_ring_read(ss_plat_ring *c, int fd, struct ss_dio_op *ops, size_t n) {
  /* The ring is private to this thread and empty between calls, so the n
   * entries always fit (n <= SS_DIO_WINDOW = the ring size). */
  unsigned tail = *c->sq_tail;
  for (size_t i = 0; i < n; i++) {
    unsigned idx = (tail + (unsigned)i) & *c->sq_mask;
    struct io_uring_sqe *s = &c->sqes[idx];
    memset(s, 0, sizeof *s);
    s->opcode = IORING_OP_READ;
    s->fd = fd;
    s->addr = (uint64_t)(uintptr_t)ops[i].buf;
    s->len = ops[i].len;
    s->off = ops[i].off;
    s->user_data = i;
    c->sq_array[idx] = idx;
    ops[i].res = -EAGAIN;
  }
  /* SYNC POINT (io1): the kernel reads the entries after it sees the new tail. */
  __atomic_store_n(c->sq_tail, tail + (unsigned)n, __ATOMIC_RELEASE);
  size_t done = 0;
  unsigned to_submit = (unsigned)n;
  while (done < n) {
    long r = syscall(__NR_io_uring_enter, c->fd, to_submit, (unsigned)(n - done),
                     IORING_ENTER_GETEVENTS, NULL, 0);
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EBUSY) continue;
      if (to_submit) {
        /* Nothing went in: take the entries back and let pread do it. */
        __atomic_store_n(c->sq_tail, tail, __ATOMIC_RELEASE);
        return -1;
      }
      /* Reads are in flight and cannot be reaped: the ring stays mapped
       * (leaked) rather than let the kernel write into reused memory. */
      return errno;
    }
    if (to_submit) to_submit -= (unsigned)r > to_submit ? to_submit : (unsigned)r;
    /* SYNC POINT (io2): acquire the tail so the completion entries are visible. */
    unsigned head = *c->cq_head;
    unsigned ctail = __atomic_load_n(c->cq_tail, __ATOMIC_ACQUIRE);
    while (head != ctail) {
      struct io_uring_cqe *e = &c->cqes[head & *c->cq_mask];
      if (e->user_data < n) ops[e->user_data].res = e->res;
      head++;
      done++;
    }
    /* SYNC POINT (io3): release the slots back to the kernel. */
    __atomic_store_n(c->cq_head, head, __ATOMIC_RELEASE);
  }
  return 0;
}

#endif /* __linux__ */
