/* A native producer: opens (or creates) a float32 stream and publishes
 * frames that any Python process reads with shmstream.open(name).
 *
 * Build from the repository root (the core is plain C11, no Python):
 *   cc -O2 -I include examples/c_stream_writer.c src/core/[a-z]*.c -o c_stream_writer -lpthread -ldl
 *   ./c_stream_writer cam/left 1000        # name, frames
 *
 * Frame k is filled with the value k and carries frame_id k, so a reader
 * can check that what it got is whole.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shmstream.h"

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s NAME FRAMES [ROWS COLS]\n", argv[0]);
    return 2;
  }
  const char *name = argv[1];
  long frames = atol(argv[2]);
  uint64_t shape[2] = {argc > 4 ? strtoull(argv[3], NULL, 10) : 4,
                       argc > 4 ? strtoull(argv[4], NULL, 10) : 4};

  ss_segment *seg = ss_segment_new();
  if (!seg) return 1;
  int rc = ss_segment_open(seg, name, strlen(name), SS_KIND_STREAM, 0);
  if (rc == ENOENT) {
    ss_create_args a = {0};
    a.name = name;
    a.kind = SS_KIND_STREAM;
    a.ndim = 2;
    a.shape = shape;
    a.itemsize = sizeof(float);
    a.dtype = "<f4";
    rc = ss_segment_create(seg, &a);
  }
  if (rc != SS_OK) {
    fprintf(stderr, "cannot open or create '%s': %s (status %d)\n", name, ss_strerror(rc), rc);
    return 1;
  }
  if (strcmp(ss_segment_dtype(seg), "<f4") != 0) {
    fprintf(stderr, "'%s' holds %s, not float32\n", name, ss_segment_dtype(seg));
    ss_segment_free(seg);
    return 1;
  }
  size_t n = ss_segment_payload_bytes(seg) / sizeof(float);
  float *frame = malloc(n * sizeof(float));
  for (uint64_t k = 1; k <= (uint64_t)frames; k++) {
    for (size_t i = 0; i < n; i++) frame[i] = (float)k;
    rc = ss_lock(seg, -1);
    if (rc != SS_OK && rc != SS_EOWNERDEAD) {
      fprintf(stderr, "lock failed: %s (status %d)\n", ss_strerror(rc), rc);
      break;
    }
    ss_write_locked(seg, frame, n * sizeof(float), &k);
    ss_unlock(seg);
  }
  printf("wrote %ld frames to '%s' (count %llu)\n", frames, name,
         (unsigned long long)ss_segment_count(seg));
  free(frame);
  ss_segment_free(seg);
  return 0;
}
