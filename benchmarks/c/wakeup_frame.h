/* What the two C wake-up readers of `python -m benchmarks milk`
 * (milk_peer.c's wakeup, milk_core_reader.c) share, so that their rows
 * measure and check a frame the same way. A benchmark frame is float32: its
 * first 8 bytes the writer's CLOCK_MONOTONIC stamp (an int64), every other
 * element the frame number. */
#ifndef SHMSTREAM_BENCH_WAKEUP_FRAME_H
#define SHMSTREAM_BENCH_WAKEUP_FRAME_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Print "LATENCY_NS TORN" for a copied frame of `count` floats: now minus
 * its stamp, and 1 if any element past the stamp differs from the first
 * (the copy mixes two frames). */
static void report_frame(const float *copy, size_t count) {
  int64_t lat = mono_ns() - *(const int64_t *)copy;
  int torn = 0;
  for (size_t i = 3; i < count; i++)
    if (copy[i] != copy[2]) {
      torn = 1;
      break;
    }
  printf("%lld %d\n", (long long)lat, torn);
}

#endif
