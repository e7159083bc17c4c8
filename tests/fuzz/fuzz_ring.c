/* libFuzzer harness: a channel consumer draining a ring whose records and
 * index words are the input.
 *
 * Input: [capacity byte][tail u64][head - tail u64][space.want u64]
 * [space.waiters u32][mode byte][ring bytes...]. A valid channel of 4..32
 * KiB is created (producer attached), its index words, the producer's
 * sleep line and ring bytes are overwritten with the input, then a
 * consumer attaches (it starts at the fuzzed tail) and drains with
 * timeout 0: commit, or skip and release later (mode bits). Every record
 * handed out is touched whole under ASan; a bad record must be an error
 * status, and the loop is bounded by what a ring can hold. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_RING_FIXED (1 + 8 + 8 + 8 + 4 + 1)

static uint64_t u64_at(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < FZ_RING_FIXED) return 0;
  const char *name = fz_name("ring");
  uint64_t cap = (uint64_t)SS_CHANNEL_MIN_CAPACITY << (data[0] & 3);
  uint64_t tail = u64_at(data + 1), head = tail + u64_at(data + 9), want = u64_at(data + 17);
  uint32_t waiters;
  memcpy(&waiters, data + 25, 4);
  unsigned mode = data[29];
  data += FZ_RING_FIXED;
  size -= FZ_RING_FIXED;

  ss_channel prod, cons;
  if (ss_channel_create(&prod, name, cap, SS_ROLE_PRODUCER, 0) != SS_OK) {
    fz_unlink(name); /* a leftover of a killed run: next time */
    return 0;
  }
  atomic_store(&prod.ctl->head.pos, head);
  atomic_store(&prod.ctl->tail.pos, tail);
  atomic_store(&prod.ctl->space.want, want);
  atomic_store(&prod.ctl->space.waiters, waiters);
  memcpy(prod.ring, data, size < cap ? size : cap);
  if (ss_channel_open(&cons, name, strlen(name), SS_ROLE_CONSUMER) == SS_OK) {
    ss_msg m;
    uint64_t held = 0; /* skipped, not yet released */
    for (uint64_t i = 0; i <= cap / SS_MSG_ALIGN; i++) {
      if (ss_channel_acquire_rx(&cons, 0, &m) != SS_OK) break;
      FZ_CHECK(m.end - m.pos <= cap && m.size <= cap && m.meta_len <= cap);
      fz_touch(m.meta, m.meta_len);
      fz_touch(m.data, m.size);
      if ((mode >> (i & 7)) & 1) {
        ss_channel_skip_rx(&cons);
        held = m.end;
      } else {
        ss_channel_commit_rx(&cons);
      }
    }
    if (held) ss_channel_release_rx(&cons, held);
    ss_channel_close(&cons);
  }
  ss_channel_close(&prod);
  fz_unlink(name);
  return 0;
}
