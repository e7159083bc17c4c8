/* A channel message's array metadata (docs/ABI.md, "Channels"): the one
 * encoder and parser, for the bindings, the bridge and C programs. */
#include "core_helpers.h"

/* Header words and shape: the metadata before its dtype text. */
static size_t head_bytes(uint32_t ndim) { return 8 + 8 * (size_t)ndim; }

size_t ss_msg_meta_encode(const ss_msg_meta *m, void *out, size_t cap) {
  if (m->ndim > SS_MAX_NDIM) return 0;
  size_t n = head_bytes(m->ndim) + m->dtype_len;
  if (n > SS_MSG_MAX_META || n > cap) return 0;
  uint8_t *p = (uint8_t *)out;
  memcpy(p, &m->ndim, 4); /* native order: the ABI is little-endian (docs/ABI.md) */
  memcpy(p + 4, &m->dtype_len, 4);
  memcpy(p + 8, m->shape, 8 * (size_t)m->ndim);
  memcpy(p + head_bytes(m->ndim), m->dtype, m->dtype_len);
  return n;
}

int ss_msg_meta_parse(const void *meta, size_t len, ss_msg_meta *out) {
  const uint8_t *p = (const uint8_t *)meta;
  memset(out, 0, sizeof *out);
  if (len < 8) return SS_ECORRUPT;
  uint32_t ndim, dtype_len;
  memcpy(&ndim, p, 4);
  memcpy(&dtype_len, p + 4, 4);
  /* The producer's word: every count is checked before it sizes a copy. */
  if (ndim > SS_MAX_NDIM || head_bytes(ndim) + (uint64_t)dtype_len > len) return SS_ECORRUPT;
  out->ndim = ndim;
  out->dtype_len = dtype_len;
  memcpy(out->shape, p + 8, 8 * (size_t)ndim);
  out->dtype = (const char *)p + head_bytes(ndim);
  return SS_OK;
}
