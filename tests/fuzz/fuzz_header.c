/* libFuzzer harness: the segment header validators on arbitrary bytes.
 *
 * Input: [control byte][file size, u64 LE][header bytes...] (zero-padded to
 * 4096). ss_header_validate decides every kind (streams with and
 * without history, channels, arrays, loader pools, GPU streams); a header it accepts
 * must keep what the rest of the core relies on (the oracle below), and a
 * GPU stream's area then goes through ss_gpu_area_validate, the check
 * ss_gpu_attach makes before it imports any handle. */
#include "fuzz_common.h"
#include "shmstream_cuda.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_accepted(const ss_header *h, uint64_t file_bytes) {
  const ss_identity *id = &h->id;
  FZ_CHECK(id->slot_count >= 1);
  FZ_CHECK(id->payload_offset == SS_HEADER_BYTES);
  FZ_CHECK(id->slot_stride % 8 == 0); /* slot records and seqlocks are 8-aligned */
  FZ_CHECK(fz_claimed_bytes(id) <= file_bytes);
  FZ_CHECK(id->name_len >= 1 && id->name_len <= SS_MAX_NAME_BYTES);
  FZ_CHECK(id->ndim <= SS_MAX_NDIM);
  int slotless = (id->flags & SS_FLAG_GPU) && !(id->flags & SS_FLAG_CPU_MIRROR);
  if (!slotless || id->slot_stride) FZ_CHECK(id->payload_bytes <= id->slot_stride);
  /* One layout version per kind (docs/ABI.md, "Layout versions"). */
  if (id->kind == SS_KIND_STREAM) FZ_CHECK(id->layout_version == SS_LAYOUT_VERSION_STREAM);
  if (id->kind == SS_KIND_CHANNEL) FZ_CHECK(id->layout_version == SS_LAYOUT_VERSION_CHANNEL);
  if (id->kind == SS_KIND_ARRAY)
    FZ_CHECK(id->layout_version == (id->flags & SS_FLAG_LOADER_POOL ? SS_LAYOUT_VERSION_LOADER_POOL
                                                                    : SS_LAYOUT_VERSION_ARRAY));
  if (id->history) {
    FZ_CHECK(id->kind == SS_KIND_STREAM && !(id->flags & SS_FLAG_GPU));
    FZ_CHECK(id->slot_count == id->history + 1);
  }
  if (id->kind == SS_KIND_STREAM || id->kind == SS_KIND_ARRAY) {
    unsigned __int128 n = id->itemsize;
    for (uint32_t i = 0; i < id->ndim && n <= UINT64_MAX; i++) n *= id->shape[i];
    FZ_CHECK(n == id->payload_bytes);
  }
  if (id->flags & SS_FLAG_GPU) {
    ss_segment seg;
    memset(&seg, 0, sizeof seg);
    seg.hdr = (ss_header *)h;
    seg.base = (uint8_t *)h;
    if (ss_gpu_area_validate(&seg) == SS_OK) {
      const ss_gpu_area *a = (const ss_gpu_area *)id->gpu;
      /* device slot i is at base + i * slot_stride inside alloc_bytes */
      FZ_CHECK((unsigned __int128)a->slot_stride * SS_GPU_SLOTS == a->alloc_bytes);
      FZ_CHECK(a->slot_stride >= id->payload_bytes);
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static ss_header *h;
  if (!h && !(h = aligned_alloc(64, SS_HEADER_BYTES))) abort();
  if (size < 9) return 0;
  unsigned ctl = data[0];
  uint64_t file_bytes;
  memcpy(&file_bytes, data + 1, 8);
  data += 9;
  size -= 9;
  memset(h, 0, SS_HEADER_BYTES);
  memcpy(h, data, size < SS_HEADER_BYTES ? size : SS_HEADER_BYTES);
  fz_fix(h, ctl, "fuzz-header");
  if (ss_header_validate(h, (size_t)file_bytes) == SS_OK) check_accepted(h, file_bytes);
  return 0;
}
