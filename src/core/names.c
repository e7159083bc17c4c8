/* User names -> segment names. A C producer computes the same name. */
#include <string.h>

#include "core_helpers.h"

uint64_t ss_fnv1a64(const void *data, size_t n, uint64_t h) {
  const uint8_t *p = (const uint8_t *)data;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

static int readable(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

/* "/shmstream-" + up to 32 readable characters + "-" + 16 hex digits. The
 * readable part helps `ls /dev/shm`; the hash of the whole name makes the
 * mapping injective in practice and keeps '/' and '..' out. */
int ss_segment_name(const char *name, size_t len, char out[SS_SEGMENT_NAME_MAX]) {
  if (len == 0 || len > SS_MAX_NAME_BYTES || memchr(name, '\0', len) != NULL) return SS_ENAME;
  static const char hex[] = "0123456789abcdef";
  size_t o = 0;
  for (const char *p = SS_SEGMENT_PREFIX; *p; p++) out[o++] = *p;
  for (size_t i = 0; i < len && i < 32; i++)
    out[o++] = readable((unsigned char)name[i]) ? name[i] : '_';
  out[o++] = '-';
  uint64_t h = ss_fnv1a64(name, len, SS_FNV_OFFSET);
  for (int i = 15; i >= 0; i--) out[o++] = hex[(h >> (4 * i)) & 0xf];
  out[o] = '\0';
  return SS_OK;
}
