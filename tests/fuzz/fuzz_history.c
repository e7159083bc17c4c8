/* libFuzzer harness: history reads (src/core/history.c) over slot records
 * and a publish line that are the input.
 *
 * Input: [depth byte][after u64][max_frames byte][pub.seq u64][pub.count
 * u64][pub.slot u32][pub.state u32][slot records...]. A valid history
 * stream (history 1..8, 64-byte frames) is created and written twice,
 * then its publish line and its slot records (seqlock, count, frame id,
 * time per slot) are overwritten with the input, and read: located
 * (timeout 0), copied, and read as a plain stream. Located frames must
 * name real slots, at most depth + 1 of them, oldest first. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_HIST_FIXED (1 + 8 + 1 + 8 + 8 + 4 + 4)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < FZ_HIST_FIXED) return 0;
  const char *name = fz_name("history");
  uint32_t depth = 1 + (data[0] & 7);
  uint64_t after, seq, count;
  uint32_t slot, state;
  memcpy(&after, data + 1, 8);
  uint32_t max_frames = data[9];
  memcpy(&seq, data + 10, 8);
  memcpy(&count, data + 18, 8);
  memcpy(&slot, data + 26, 4);
  memcpy(&state, data + 30, 4);
  data += FZ_HIST_FIXED;
  size -= FZ_HIST_FIXED;

  uint64_t shape[1];
  ss_create_args a = fz_float_stream(name, shape, 16, depth);
  ss_segment seg;
  if (ss_segment_create(&seg, &a) != SS_OK) {
    fz_unlink(name); /* a leftover of a killed run: next time */
    return 0;
  }
  float frame[16] = {1};
  for (int i = 0; i < 2; i++) {
    if (ss_lock(&seg, -1) != SS_OK) abort();
    ss_write_locked(&seg, frame, sizeof frame, NULL);
    ss_unlock(&seg);
  }
  ss_publish_line *p = &seg.hdr->pub;
  atomic_store(&p->seq, seq);
  atomic_store(&p->count, count);
  atomic_store(&p->slot, slot);
  atomic_store(&p->state, state);
  uint32_t slots = seg.id.slot_count;
  size_t rec_bytes = (size_t)slots * SS_SLOT_RECORD_BYTES;
  memcpy(ss_slot_record_at(&seg, 0), data, size < rec_bytes ? size : rec_bytes);

  ss_history_frame frames[9];
  uint32_t got = 0;
  uint64_t last = 0;
  if (ss_history_locate(&seg, after, max_frames, 0, 0, frames, &got, &last) == SS_OK) {
    FZ_CHECK(got <= slots && (max_frames == 0 || got <= max_frames));
    for (uint32_t i = 0; i < got; i++) {
      FZ_CHECK(frames[i].at.slot < slots);
      FZ_CHECK(frames[i].count > after);
      if (i) FZ_CHECK(frames[i].count > frames[i - 1].count);
    }
    float dst[9][16];
    ss_history_copy(&seg, frames, got, dst);
  }
  ss_pubinfo info;
  ss_read(&seg, frame, sizeof frame, 0, 0, &info);
  ss_segment_close(&seg);
  fz_unlink(name);
  return 0;
}
