/* shmstream's C core as a milk reader, the C counterpart of `python -m
 * benchmarks milk`'s shmstream.milk row: the same call (ss_milk_read_new:
 * claim a semaphore, the wait policy's nap or spin on cnt0, sem_clockwait, then the
 * checked copy) without Python, so that row's distance from milk's C
 * reader splits into the core's and the Python layer's. Built by benchmarks/milk.py from the
 * checkout's sources (no library needed):
 *
 *   cc -O2 -std=c11 -Iinclude benchmarks/c/milk_core_reader.c src/core/\*.c \
 *      -o milk_core_reader -lpthread -ldl
 *
 *   milk_core_reader PATH FRAMES
 *       Print "ready" once the semaphore is claimed, then for each new
 *       frame until cnt0 reaches FRAMES (10 s without one ends it) a line
 *       "LATENCY_NS TORN" as milk_peer.c's wakeup does: CLOCK_MONOTONIC now
 *       minus the int64 stamp in the frame's first 8 bytes, and 1 if the
 *       copy is not whole. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "shmstream_milk.h"
#include "wakeup_frame.h"

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: milk_core_reader PATH FRAMES\n");
    return 2;
  }
  ss_milk *m;
  ss_milk_layout l;
  if (ss_milk_open(argv[1], &m, &l) != SS_OK || l.datatype != 9) {
    fprintf(stderr, "milk_core_reader: cannot open a float32 milk stream at %s\n", argv[1]);
    return 1;
  }
  uint64_t frames = strtoull(argv[2], 0, 10);
  size_t count = l.frame_bytes / sizeof(float);
  float *copy = malloc(l.frame_bytes);
  if (ss_milk_claim(m, -1) < 0) return 1;
  printf("ready\n");
  fflush(stdout);
  uint64_t last = ss_milk_count(m);
  while (last < frames) {
    ss_milk_pubinfo info;
    if (ss_milk_read_new(m, last, 10000000000LL, -1, copy, l.frame_bytes, 100000000LL, &info) !=
        SS_OK)
      break;
    last = info.cnt0;
    report_frame(copy, count);
  }
  free(copy);
  ss_milk_close(m);
  return 0;
}
