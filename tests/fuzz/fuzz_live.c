/* libFuzzer harness: a header that changes after open (docs/ABI.md, "The
 * header is trusted once").
 *
 * A valid stream is created (a history stream when the first byte's low
 * bit is set, else 2 slots; 64-byte frames), opened a second time, and
 * written once. The rest of the input is a program of steps; each step
 * first overwrites bytes of the shared header, slot records or file size,
 * as another process may at any moment, then makes one call on the opened
 * handle:
 *
 *   [op u8][offset u16][len u8][len bytes]
 *
 * The bytes go to header offset `offset` (0..4095; past the header, the
 * slot records of a history stream); `op` % 8 picks the call: read into a
 * buffer of exactly payload_bytes (ASan reports a byte written past it),
 * read_new (timeout 0), a view whose payload bytes are all touched, a
 * write under the lock, a history locate + copy, wait_count (timeout 0),
 * last complete, or truncating the file to (offset % 8) pages. Whatever
 * the bytes say, no call may write outside the caller's buffer, read
 * outside the mapping or die by a signal, and once the file shrank under
 * the handle (a bus error was caught in its mapping) every call reports
 * SS_ECORRUPT. */
#include <sys/stat.h>

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_FRAME_BYTES 64
#define FZ_MAX_STEPS 32

static void write_once(ss_segment *seg, uint8_t fill) {
  uint8_t frame[FZ_FRAME_BYTES];
  memset(frame, fill, sizeof frame);
  if (ss_lock(seg, 0) != SS_OK && ss_lock(seg, 0) != SS_EOWNERDEAD) return;
  ss_write_locked(seg, frame, sizeof frame, NULL);
  ss_unlock(seg);
}

static void shrink(const ss_segment *seg, size_t pages) {
  int fd = shm_open(seg->segname, O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) return;
  if (ftruncate(fd, (off_t)(pages * 4096)) != 0) { /* nothing to undo */
  }
  close(fd);
}

static void call(ss_segment *seg, uint8_t op, uint16_t offset) {
  int dead = ss_segment_status(seg) != SS_OK; /* a bus error was caught before */
  size_t n = (size_t)seg->id.payload_bytes; /* the private copy: 64 */
  FZ_CHECK(n == FZ_FRAME_BYTES);
  uint8_t *dst = malloc(n); /* exactly: ASan reports a byte past it */
  ss_pubinfo info;
  ss_frame frame;
  int rc = SS_OK;
  switch (op % 8) {
    case 0: rc = ss_read(seg, dst, n, 0, 0, &info); break;
    case 1: rc = ss_read_new(seg, dst, n, 0, 0, 0, &info); break;
    case 2:
      rc = ss_view_begin(seg, 0, 0, &info, &frame);
      if (rc == SS_OK) {
        FZ_CHECK(frame.slot < seg->id.slot_count);
        fz_touch(ss_slot(seg, frame.slot), n);
        ss_view_valid(seg, &frame);
      }
      break;
    case 3: {
      uint8_t src[FZ_FRAME_BYTES] = {7};
      rc = ss_lock(seg, 0);
      if (rc == SS_OK || rc == SS_EOWNERDEAD) {
        ss_write_locked(seg, src, sizeof src, NULL);
        rc = ss_unlock(seg);
      }
      break;
    }
    case 4: {
      ss_history_frame frames[SS_MAX_SLOTS + 2];
      uint8_t copies[(SS_MAX_SLOTS + 2) * FZ_FRAME_BYTES];
      uint32_t got = 0;
      uint64_t last = 0;
      rc = ss_history_locate(seg, 0, 0, 0, 0, frames, &got, &last);
      if (rc == SS_OK) {
        FZ_CHECK(got <= seg->id.slot_count);
        for (uint32_t i = 0; i < got; i++) FZ_CHECK(frames[i].at.slot < seg->id.slot_count);
        ss_history_copy(seg, frames, got, copies);
      }
      break;
    }
    case 5: {
      uint64_t c;
      rc = ss_wait_count(seg, 0, 0, 0, &c);
      break;
    }
    case 6: rc = ss_read_last_complete(seg, dst, n, 0, 0, &info); break;
    case 7: shrink(seg, offset % 8); break;
  }
  free(dst);
  if (dead && op % 8 != 7) FZ_CHECK(rc == SS_ECORRUPT);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const char *name = fz_name("live");
  int history = data[0] & 1;
  data++;
  size--;

  uint64_t shape[1];
  ss_create_args a = fz_float_stream(name, shape, FZ_FRAME_BYTES / 4, history ? 2 : 0);
  ss_segment owner, seg;
  if (ss_segment_create(&owner, &a) != SS_OK) {
    fz_unlink(name); /* a leftover of a killed run: next time */
    return 0;
  }
  write_once(&owner, 1);
  if (ss_segment_open(&seg, name, strlen(name), SS_KIND_STREAM, 0) != SS_OK) abort();
  size_t writable = owner.map_bytes; /* the creator's mapping: header + slots + records */
  for (int step = 0; step < FZ_MAX_STEPS && size >= 4; step++) {
    uint8_t op = data[0];
    uint16_t offset;
    memcpy(&offset, data + 1, 2);
    size_t len = data[3];
    data += 4;
    size -= 4;
    if (len > size) len = size;
    /* Past the header: the slot records (or slots) at the end of the file. */
    size_t at = offset < SS_HEADER_BYTES ? offset : writable - 4096 + offset % 4096;
    /* After a truncation these stores may fault too: the guard gives the
     * creator's mapping zero pages there. */
    if (at + len <= writable) memcpy(owner.base + at, data, len);
    data += len;
    size -= len;
    call(&seg, op, offset);
  }
  ss_segment_close(&seg);
  ss_segment_close(&owner);
  fz_unlink(name);
  return 0;
}
