/* Replays inputs through one libFuzzer harness without libFuzzer, so a
 * compiler without -fsanitize=fuzzer (gcc, in CI) runs the corpora:
 *
 *   cc -fsanitize=address,undefined replay_main.c fuzz_x.c <core> -o replay
 *   replay FILE...
 *
 * Calls LLVMFuzzerTestOneInput once per file, in order; a crash or a
 * sanitizer report ends the run with the file's name on stderr. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, len = 0;
  uint8_t *buf = malloc(cap);
  size_t got;
  while (buf && (got = fread(buf + len, 1, cap - len, f)) > 0) {
    len += got;
    if (len == cap) buf = realloc(buf, cap *= 2);
  }
  fclose(f);
  *n = len;
  return buf;
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    size_t n = 0;
    uint8_t *data = slurp(argv[i], &n);
    if (!data) {
      fprintf(stderr, "replay: cannot read %s\n", argv[i]);
      return 2;
    }
    fprintf(stderr, "replay: %s\n", argv[i]); /* the last name is the culprit */
    LLVMFuzzerTestOneInput(data, n);
    free(data);
  }
  printf("replayed %d inputs\n", argc - 1);
  return 0;
}
