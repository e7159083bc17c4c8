/* libFuzzer harness: the real open paths on a segment whose bytes are the
 * input, then a read of everything the header points at.
 *
 * Input: [control byte][segment bytes...]. The bytes become a /dev/shm
 * segment of a fuzz-only name (at least a header long; FZ_EXTEND grows it
 * to what the header claims, up to FZ_MAX_FILE), unlinked after each run.
 * A channel header goes through ss_channel_open (validation, the double
 * mapping, the claim) and is drained; any other kind through
 * ss_segment_open and every read: snapshot copy, view, last complete,
 * wait, and on a history stream the located frames and their copy. Under
 * ASan each byte a read returns is touched, so an offset the header
 * claims outside the mapping is a report. A magic of 0 is replaced:
 * open waits two seconds for an unfinished creator, a wait and not a parse. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void drain_channel(const char *name) {
  ss_channel ch;
  if (ss_channel_open(&ch, name, strlen(name), SS_ROLE_CONSUMER) != SS_OK) return;
  ss_msg m;
  /* every record is >= 64 bytes and a ring holds at most capacity bytes */
  for (uint64_t i = 0; i <= ch.capacity / SS_MSG_ALIGN; i++) {
    if (ss_channel_acquire_rx(&ch, 0, &m) != SS_OK) break;
    fz_touch(m.meta, m.meta_len);
    fz_touch(m.data, m.size);
    ss_channel_commit_rx(&ch);
  }
  ss_channel_close(&ch);
}

static void read_stream(const char *name, int readonly) {
  ss_segment seg;
  if (ss_segment_open(&seg, name, strlen(name), 0, readonly) != SS_OK) return;
  const ss_identity *id = &seg.id;
  /* A GPU stream without CPU mirror has no CPU slot: its payload_bytes
   * sizes device memory, and every CPU read refuses it (SS_EKIND). */
  size_t n = ss_slotless(&seg) ? 0 : (size_t)id->payload_bytes;
  uint8_t *buf = malloc(n ? n : 1);
  ss_pubinfo info;
  ss_frame f;
  uint64_t count;
  if (!ss_slotless(&seg))
    FZ_CHECK(ss_slot(&seg, id->slot_count - 1) + n <= seg.base + seg.map_bytes);
  ss_read(&seg, buf, n, 0, 0, &info);
  if (ss_view_begin(&seg, 0, 0, &info, &f) == SS_OK) {
    FZ_CHECK(f.slot < id->slot_count);
    fz_touch(ss_slot(&seg, f.slot), n);
  }
  ss_read_last_complete(&seg, buf, n, 0, 0, &info);
  ss_wait_count(&seg, 0, 0, 0, &count);
  uint32_t depth = ss_history_depth(&seg);
  ss_history_frame *frames = calloc((size_t)depth + 1, sizeof *frames);
  uint32_t got = 0;
  uint64_t last;
  if (!ss_slotless(&seg) && ss_history_locate(&seg, 0, 0, 0, 0, frames, &got, &last) == SS_OK &&
      got) {
    FZ_CHECK(got <= depth + 1);
    for (uint32_t i = 0; i < got; i++) FZ_CHECK(frames[i].at.slot < id->slot_count);
    uint8_t *dst = malloc((size_t)got * n + 1);
    ss_history_copy(&seg, frames, got, dst);
    free(dst);
  }
  free(frames);
  free(buf);
  ss_segment_close(&seg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const char *name = fz_name("open");
  unsigned ctl = data[0];
  data++;
  size--;
  size_t n = size < SS_HEADER_BYTES ? SS_HEADER_BYTES : size;
  uint8_t *bytes = calloc(n, 1);
  memcpy(bytes, data, size);
  ss_header *h = (ss_header *)bytes;
  if (h->id.magic == 0) h->id.magic = SS_MAGIC;
  fz_fix(h, ctl, name);
  size_t file_bytes = n;
  if (ctl & FZ_EXTEND) {
    unsigned __int128 claimed = fz_claimed_bytes(&h->id);
    if (h->id.kind == SS_KIND_CHANNEL)
      claimed = (unsigned __int128)SS_HEADER_BYTES + h->id.payload_bytes;
    if (claimed > file_bytes && claimed <= FZ_MAX_FILE) file_bytes = (size_t)claimed;
  }
  uint32_t kind = h->id.kind;
  if (fz_write_segment(name, bytes, n, file_bytes) == 0) {
    if (kind == SS_KIND_CHANNEL)
      drain_channel(name);
    else
      read_stream(name, !!(ctl & FZ_READONLY));
  }
  fz_unlink(name);
  free(bytes);
  return 0;
}
