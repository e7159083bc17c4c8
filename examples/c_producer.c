/* A native producer for a shmstream channel.
 *
 *   cc -O2 -I include examples/c_producer.c src/core/[a-z]*.c -o c_producer -lpthread -ldl
 *   ./c_producer NAME COUNT SIZE          bytes messages, type_id = i,
 *                                         byte j of message i = (i + j) & 255
 *   ./c_producer NAME COUNT --frames N    float32[N] array messages (Python
 *                                         receives ndarrays), element k = i + k
 *
 * The channel must exist (a Python consumer creates it with
 * shmstream.channel(NAME, capacity, role="consumer")); add --create CAPACITY
 * to create it here instead. Prints "sent COUNT in SECONDS s". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shmstream.h"

static void die(const char *what, int rc) {
  fprintf(stderr, "c_producer: %s failed: %s (status %d)\n", what, ss_strerror(rc), rc);
  exit(1);
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s NAME COUNT SIZE|--frames N [--create CAPACITY] [--batch K]\n",
            argv[0]);
    return 2;
  }
  const char *name = argv[1];
  long count = atol(argv[2]);
  int frames = strcmp(argv[3], "--frames") == 0;
  size_t size = (size_t)atol(argv[frames ? 4 : 3]);
  uint64_t create = 0;
  uint32_t batch = 1;
  for (int i = frames ? 5 : 4; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--create") == 0) create = strtoull(argv[i + 1], NULL, 0);
    if (strcmp(argv[i], "--batch") == 0) batch = (uint32_t)atol(argv[i + 1]);
  }

  ss_channel *ch = ss_channel_new();
  if (!ch) return 1;
  int rc = create ? ss_channel_create(ch, name, create, SS_ROLE_PRODUCER, 0600)
                  : ss_channel_open(ch, name, strlen(name), SS_ROLE_PRODUCER);
  if (rc) die(create ? "ss_channel_create" : "ss_channel_open", rc);
  ss_channel_set_batch(ch, batch);

  /* Array metadata (docs/ABI.md): u32 ndim, u32 dtype_len, u64 shape, "<f4". */
  uint8_t meta[8 + 8 + 3];
  uint32_t ndim = 1, dlen = 3;
  uint64_t n = size;
  memcpy(meta, &ndim, 4);
  memcpy(meta + 4, &dlen, 4);
  memcpy(meta + 8, &n, 8);
  memcpy(meta + 16, "<f4", 3);
  size_t nbytes = frames ? size * sizeof(float) : size;
  uint32_t meta_len = frames ? (uint32_t)sizeof meta : 0;

  int64_t t0 = ss_monotonic_ns();
  for (long i = 0; i < count; i++) {
    void *payload, *m;
    rc = ss_channel_acquire_tx(ch, nbytes, meta_len, -1, &payload, &m);
    if (rc) die("ss_channel_acquire_tx", rc);
    if (frames) {
      memcpy(m, meta, sizeof meta);
      float *f = (float *)payload;
      for (size_t k = 0; k < size; k++) f[k] = (float)(i + (long)k);
    } else {
      uint8_t *b = (uint8_t *)payload;
      for (size_t j = 0; j < size; j++) b[j] = (uint8_t)(i + (long)j);
    }
    ss_channel_commit_tx(ch, nbytes, (uint32_t)i, frames ? SS_MSG_ARRAY : 0);
  }
  ss_channel_flush(ch);
  double secs = (double)(ss_monotonic_ns() - t0) / 1e9;
  printf("sent %ld in %.6f s\n", count, secs);
  fflush(stdout);
  ss_channel_free(ch); /* the consumer sees end of stream after the last message */
  return 0;
}
