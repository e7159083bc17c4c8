/* A native reader: follows a float32 stream that any process writes (Python
 * or C) and checks that every frame it gets is whole, with the core's
 * read_new (wait for a publication newer than the last one seen, then take
 * a consistent snapshot) -- the same rule Python's read_new follows.
 *
 * Build from the repository root (the core is plain C11, no Python):
 *   cc -O2 -I include examples/c_stream_reader.c src/core/[a-z]*.c -o c_stream_reader -lpthread -ldl
 *   ./c_stream_reader cam/left 1000         # name, frames to read
 *
 * A frame k is expected to hold the value k everywhere with frame_id k (what
 * examples/c_stream_writer.c and the tests write). It prints how many frames
 * it read, how many writes it missed (it is a latest-value stream: a slow
 * reader skips, and says so) and the counts it started from and ended at,
 * then exits 0; a torn or mixed frame exits 3.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shmstream.h"

/* Waits come back at least this often, as the Python binding's do, so a
 * real program could check for a signal or a stop flag between them. */
#define CHUNK_NS 100000000LL

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s NAME FRAMES [TIMEOUT_S]\n", argv[0]);
    return 2;
  }
  const char *name = argv[1];
  long want = atol(argv[2]);
  double timeout_s = argc > 3 ? atof(argv[3]) : 30.0;

  ss_segment *seg = ss_segment_new();
  if (!seg) return 1;
  int rc = ss_segment_open(seg, name, strlen(name), SS_KIND_STREAM, 1 /* read-only use */);
  if (rc != SS_OK) {
    fprintf(stderr, "cannot open '%s': %s\n", name,
            rc == ENOENT ? "no such stream (create it first)" : ss_strerror(rc));
    return 1;
  }
  if (strcmp(ss_segment_dtype(seg), "<f4") != 0) {
    fprintf(stderr, "'%s' holds %s, not float32\n", name, ss_segment_dtype(seg));
    ss_segment_free(seg);
    return 1;
  }
  size_t n = ss_segment_payload_bytes(seg) / sizeof(float);
  float *frame = malloc(n * sizeof(float) + 1);
  /* The count when we opened: read_new returns the first publication after
   * it, and every later call the first one after the last we read. */
  uint64_t seen = ss_segment_count(seg);
  const uint64_t first = seen;
  long got = 0;
  uint64_t missed = 0;
  int failed = 0;
  int64_t deadline = ss_monotonic_ns() + (int64_t)(timeout_s * 1e9);
  while (got < want) {
    ss_pubinfo info;
    int64_t left = deadline - ss_monotonic_ns();
    if (left <= 0) {
      fprintf(stderr, "timed out after %ld frames\n", got);
      break;
    }
    rc = ss_read_new(seg, frame, n * sizeof(float), seen, left < CHUNK_NS ? left : CHUNK_NS,
                     -1 /* default spin */, &info);
    if (rc == SS_ETIMEDOUT) continue; /* a chunk passed: loop (check a stop flag here) */
    if (rc == SS_EINCONSISTENT) {
      /* The last write failed (aborted, or its writer died): no consistent
       * frame until the next good write. Say so once, then poll gently. */
      if (!failed++) fprintf(stderr, "the last write failed; waiting for the next good one\n");
      struct timespec ts = {0, 10000000};
      nanosleep(&ts, NULL);
      continue;
    }
    failed = 0;
    if (rc != SS_OK) {
      fprintf(stderr, "read failed: %s (status %d)\n", ss_strerror(rc), rc);
      break;
    }
    for (size_t i = 0; i < n; i++) {
      if (frame[i] != (float)info.frame_id) {
        fprintf(stderr, "frame %llu is not whole: element %zu is %g\n",
                (unsigned long long)info.frame_id, i, frame[i]);
        return 3;
      }
    }
    missed += info.count - seen - 1;
    seen = info.count;
    got++;
  }
  printf("read %ld frames from '%s', missed %llu writes, counts %llu..%llu\n", got, name,
         (unsigned long long)missed, (unsigned long long)first, (unsigned long long)seen);
  free(frame);
  ss_segment_free(seg);
  return got == want ? 0 : 1;
}
