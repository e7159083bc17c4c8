/* A native consumer for a shmstream channel.
 *
 *   cc -O2 -I include examples/c_consumer.c src/core/[a-z]*.c -o c_consumer -lpthread -ldl
 *   ./c_consumer NAME
 *
 * Attaches to an existing channel as its consumer, receives until the
 * producer closes it (end of stream), checks that message i has type_id i
 * and bytes (i + j) & 255, and prints "received N messages, B bytes". */
#include <stdio.h>
#include <string.h>

#include "shmstream.h"

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s NAME\n", argv[0]);
    return 2;
  }
  ss_channel *ch = ss_channel_new();
  if (!ch) return 1;
  int rc = ss_channel_open(ch, argv[1], strlen(argv[1]), SS_ROLE_CONSUMER);
  if (rc) {
    fprintf(stderr, "c_consumer: ss_channel_open failed: %s (status %d)\n", ss_strerror(rc), rc);
    return 1;
  }
  printf("ready\n");
  fflush(stdout);
  unsigned long count = 0, bytes = 0;
  for (;;) {
    ss_msg m;
    rc = ss_channel_acquire_rx(ch, -1, &m);
    if (rc == SS_EPEERCLOSED) break; /* end of stream */
    if (rc) {
      fprintf(stderr, "c_consumer: ss_channel_acquire_rx failed: %s (status %d)\n", ss_strerror(rc),
              rc);
      return 1;
    }
    const uint8_t *b = (const uint8_t *)m.data;
    if (m.type_id != (uint32_t)count) {
      fprintf(stderr, "c_consumer: message %lu has type_id %u\n", count, m.type_id);
      return 1;
    }
    for (size_t j = 0; j < m.size; j++)
      if (b[j] != (uint8_t)(count + j)) {
        fprintf(stderr, "c_consumer: message %lu byte %zu is wrong\n", count, j);
        return 1;
      }
    bytes += m.size;
    count++;
    ss_channel_commit_rx(ch);
  }
  printf("received %lu messages, %lu bytes\n", count, bytes);
  ss_channel_free(ch);
  return 0;
}
