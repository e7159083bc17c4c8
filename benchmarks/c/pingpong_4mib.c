/* The 4 MiB request/response of `python -m benchmarks stream` (b), copy rows, in
 * C only: where does a round trip's time go without Python?
 *
 *   cc -O2 -std=c11 -Iinclude benchmarks/c/pingpong_4mib.c src/core/\*.c \
 *      -o /tmp/pp4 -lpthread -ldl && /tmp/pp4 [ROUNDS] [BYTES]
 *
 * Modes, each a requester (parent) and a responder (fork), median and p99
 * of ROUNDS round trips:
 *   memcpy      one 4 MiB memcpy between two private buffers (no IPC): the
 *               copy's own cost, twice per round trip in the rows below.
 *   raw         a hand-written seq word + payload in a MAP_SHARED mapping:
 *               the requester copies in and bumps the word, the responder
 *               spins, copies out, answers with a 64 B message the same way.
 *   shmstream   the core's ss_write_locked under ss_lock / ss_read_new into
 *               a reused buffer, 64 B ack on a second stream.
 *   fresh-out   shmstream, but the responder reads into a newly malloc'd
 *               buffer each time (what read_new() without out= costs:
 *               page faults on every page of the fresh buffer). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shmstream.h"

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

static void report(const char *mode, int64_t *lat, int n, long faults) {
  qsort(lat, (size_t)n, sizeof *lat, cmp);
  printf(
      "%-10s p50 %7.1f us  p99 %7.1f us  (%d round trips, responder+requester minor faults/round "
      "trip %.1f)\n",
      mode, lat[n / 2] / 1e3, lat[n * 99 / 100] / 1e3, n, (double)faults / n);
}

static long minor_faults(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

/* ---- raw: one seq word and the payload, busy-polled ---------------------- */

struct raw_line {
  _Alignas(64) _Atomic uint64_t seq;
};

static void raw_mode(int rounds, size_t bytes) {
  size_t map = 4096 + bytes + 4096 + 64;
  uint8_t *m = mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  struct raw_line *req = (struct raw_line *)m, *ack = (struct raw_line *)(m + 64);
  uint8_t *req_data = m + 4096, *ack_data = m + 4096 + bytes;
  uint8_t *src = malloc(bytes), *out = malloc(bytes);
  memset(src, 1, bytes);
  memset(out, 0, bytes);
  memset(req_data, 0, bytes);
  pid_t pid = fork();
  if (pid == 0) {
    uint8_t a[64] = {0};
    for (uint64_t k = 1; k <= (uint64_t)rounds + 10; k++) {
      while (atomic_load_explicit(&req->seq, memory_order_acquire) < k) __builtin_ia32_pause();
      memcpy(out, req_data, bytes);
      memcpy(ack_data, a, 64);
      atomic_store_explicit(&ack->seq, k, memory_order_release);
    }
    _exit(0);
  }
  int64_t *lat = malloc(sizeof(int64_t) * (size_t)rounds);
  long f0 = 0;
  for (uint64_t k = 1; k <= (uint64_t)rounds + 10; k++) {
    if (k == 11) f0 = minor_faults();
    int64_t t = now_ns();
    memcpy(req_data, src, bytes);
    atomic_store_explicit(&req->seq, k, memory_order_release);
    while (atomic_load_explicit(&ack->seq, memory_order_acquire) < k) __builtin_ia32_pause();
    uint8_t a[64];
    memcpy(a, ack_data, 64);
    if (k > 10) lat[k - 11] = now_ns() - t;
  }
  waitpid(pid, NULL, 0);
  report("raw", lat, rounds, minor_faults() - f0);
  free(lat);
  munmap(m, map);
}

/* ---- shmstream's core ------------------------------------------------------- */

static void open_pair(const char *tag, size_t bytes, ss_segment *a, ss_segment *b) {
  char na[64], nb[64];
  snprintf(na, sizeof na, "pp4-%s-a-%d", tag, (int)getpid());
  snprintf(nb, sizeof nb, "pp4-%s-b-%d", tag, (int)getpid());
  uint64_t sa[1] = {bytes}, sb[1] = {64};
  ss_create_args x = {0};
  x.kind = SS_KIND_STREAM;
  x.ndim = 1;
  x.itemsize = 1;
  x.dtype = "|u1";
  x.name = na;
  x.shape = sa;
  if (ss_segment_create(a, &x)) {
    perror("create a");
    exit(1);
  }
  x.name = nb;
  x.shape = sb;
  if (ss_segment_create(b, &x)) {
    perror("create b");
    exit(1);
  }
  ss_segment_unlink_segname(a->segname); /* the mappings stay; nothing is left behind */
  ss_segment_unlink_segname(b->segname);
}

static void publish(ss_segment *s, const void *src, size_t n) {
  ss_lock(s, -1);
  ss_write_locked(s, src, n, NULL);
  ss_unlock(s);
}

static void shm_mode(const char *mode, int rounds, size_t bytes, int fresh) {
  ss_segment a, b;
  open_pair(mode, bytes, &a, &b);
  uint8_t *src = malloc(bytes), *out = malloc(bytes), ackbuf[64] = {0};
  memset(src, 1, bytes);
  memset(out, 0, bytes);
  pid_t pid = fork();
  if (pid == 0) {
    ss_pubinfo info;
    long f0 = 0;
    for (uint64_t k = 1; k <= (uint64_t)rounds + 10; k++) {
      if (k == 11) f0 = minor_faults();
      uint8_t *dst = out;
      if (fresh) dst = malloc(bytes);
      if (ss_read_new(&a, dst, bytes, k - 1, -1, -1, &info)) _exit(1);
      if (fresh) free(dst);
      publish(&b, ackbuf, 64);
    }
    fprintf(stderr, "%-10s responder minor faults/round trip %.1f\n", mode,
            (double)(minor_faults() - f0) / rounds);
    _exit(0);
  }
  int64_t *lat = malloc(sizeof(int64_t) * (size_t)rounds);
  ss_pubinfo info;
  long f0 = 0;
  for (uint64_t k = 1; k <= (uint64_t)rounds + 10; k++) {
    if (k == 11) f0 = minor_faults();
    int64_t t = now_ns();
    publish(&a, src, bytes);
    if (ss_read_new(&b, ackbuf, 64, k - 1, -1, -1, &info)) exit(1);
    if (k > 10) lat[k - 11] = now_ns() - t;
  }
  waitpid(pid, NULL, 0);
  printf("%-10s requester's ack handle: waits %llu, ended in the spin %llu\n", mode,
         (unsigned long long)atomic_load(&b.wait.waits),
         (unsigned long long)atomic_load(&b.wait.caught));
  report(mode, lat, rounds, minor_faults() - f0);
  free(lat);
  ss_segment_close(&a);
  ss_segment_close(&b);
}

static void memcpy_mode(int rounds, size_t bytes) {
  uint8_t *src = malloc(bytes), *dst = malloc(bytes);
  memset(src, 1, bytes);
  memset(dst, 0, bytes);
  int64_t *lat = malloc(sizeof(int64_t) * (size_t)rounds);
  for (int k = 0; k < rounds; k++) {
    int64_t t = now_ns();
    memcpy(dst, src, bytes);
    __asm__ volatile("" ::: "memory");
    lat[k] = now_ns() - t;
  }
  report("memcpy", lat, rounds, 0);
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 400;
  size_t bytes = argc > 2 ? strtoull(argv[2], NULL, 10) : 4u << 20;
  const char *only = argc > 3 ? argv[3] : "";
  for (int rep = 0; rep < 2; rep++) {
    if (!*only || strstr(only, "memcpy")) memcpy_mode(rounds, bytes);
    if (!*only || strstr(only, "raw")) raw_mode(rounds, bytes);
    if (!*only || strstr(only, "shmstream")) shm_mode("shmstream", rounds, bytes, 0);
    if (!*only || strstr(only, "fresh")) shm_mode("fresh-out", rounds, bytes, 1);
  }
  return 0;
}
