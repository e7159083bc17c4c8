/* milk's own C library (milk-org/ImageStreamIO) as a peer of
 * `python -m benchmarks milk`: a reader that waits as CACAO readers do
 * (ImageStreamIO_getsemwaitindex, then a semaphore wait) and a writer that
 * publishes as they do (write = 1, the pixels, ImageStreamIO_UpdateIm).
 * Built by benchmarks/milk.py only when it finds the library
 * ($MILK_IMAGESTREAMIO, its install prefix: $MILK_IMAGESTREAMIO/include/ImageStreamIO/
 * holds the headers, $MILK_IMAGESTREAMIO/lib the library):
 *
 *   cc -O2 -I$P/include/ImageStreamIO benchmarks/c/milk_peer.c \
 *      -L$P/lib -lImageStreamIO -Wl,-rpath,$P/lib -o milk_peer
 *
 * Streams are opened by name in $MILK_SHM_DIR, as milk does.
 *
 *   milk_peer wakeup NAME FRAMES
 *       Wait on a semaphore until cnt0 reaches FRAMES (10 s without a post
 *       ends it); after each wake that finds a new cnt0 (a post left over
 *       from a frame already read is skipped) copy the frame, then print
 *       one line "LATENCY_NS TORN": CLOCK_MONOTONIC now minus the int64 stamp in the
 *       frame's first 8 bytes, and 1 if the copy is not whole (every float
 *       from index 2 on equals element 2). The first line is "ready" once
 *       the semaphore is claimed.
 *   milk_peer follow NAME SECONDS
 *       Wake on every post for SECONDS after the first frame, copy each
 *       frame; print "woken copied missed seconds" (missed: cnt0 steps not
 *       seen). The first line is "ready".
 *   milk_peer write NAME HZ SECONDS
 *       Publish at HZ (absolute schedule) for SECONDS as milk's writers do:
 *       frame k has every float k and the CLOCK_MONOTONIC stamp in its first
 *       8 bytes; print the frames written.
 *   milk_peer dump NAME
 *       Print what milk's library sees of a stream: "md DATATYPE NAXIS S0
 *       S1 S2 CNT0 CBSIZE CBINDEX NSEM", "px HEX" (the pixels' bytes), "cb
 *       SLOT CNT0 HEX" per circular buffer frame, "kw NAME TYPE VALUE
 *       COMMENT" per keyword.
 *   milk_peer make NAME DATATYPE NAXIS S0 S1 S2 CBSIZE FRAMES
 *       Create the stream with milk's ImageStreamIO_createIm_gpu (CPU, 10
 *       semaphores, 4 keywords, CBSIZE circular buffer frames) and write
 *       FRAMES frames: byte j of frame k is (7j + 13k + 1) mod 256; then
 *       keywords KL = 42 ('L'), KD = 1.5 ('D'), KS = "hello" ('S'). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ImageStreamIO.h"
#include "wakeup_frame.h"

static int wait_post(IMAGE *im, int sem, double seconds) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts); /* sem_timedwait's clock */
  int64_t ns = (int64_t)ts.tv_nsec + (int64_t)(seconds * 1e9);
  ts.tv_sec += ns / 1000000000LL;
  ts.tv_nsec = ns % 1000000000LL;
  while (ImageStreamIO_semtimedwait(im, sem, &ts) != 0)
    if (errno != EINTR) return -1;
  return 0;
}

static int open_stream(IMAGE *im, const char *name) {
  if (ImageStreamIO_openIm(im, name) != IMAGESTREAMIO_SUCCESS) {
    fprintf(stderr, "milk_peer: cannot open milk stream %s\n", name);
    return -1;
  }
  return 0;
}

static int wakeup(const char *name, uint64_t frames) {
  IMAGE im;
  if (open_stream(&im, name)) return 1;
  int sem = ImageStreamIO_getsemwaitindex(&im, 0);
  size_t n = im.md->imdatamemsize;
  float *copy = malloc(n);
  size_t count = n / sizeof(float);
  printf("ready\n");
  fflush(stdout);
  uint64_t last = im.md->cnt0;
  while (last < frames) {
    if (wait_post(&im, sem, 10.0)) break;
    uint64_t c = im.md->cnt0;
    if (c == last) continue; /* a post left over from a frame already read */
    last = c;
    memcpy(copy, im.array.F, n);
    report_frame(copy, count);
  }
  free(copy);
  ImageStreamIO_closeIm(&im);
  return 0;
}

static int follow(const char *name, double seconds) {
  IMAGE im;
  if (open_stream(&im, name)) return 1;
  int sem = ImageStreamIO_getsemwaitindex(&im, 0);
  size_t n = im.md->imdatamemsize;
  void *copy = malloc(n);
  printf("ready\n");
  fflush(stdout);
  uint64_t woken = 0, copied = 0, missed = 0, last = im.md->cnt0;
  int64_t start = 0, end = 0;
  for (;;) {
    if (wait_post(&im, sem, 5.0)) break;
    uint64_t c = im.md->cnt0;
    if (!start) start = mono_ns();
    woken++;
    if (c > last) {
      missed += c - last - 1;
      last = c;
      memcpy(copy, im.array.raw, n);
      copied++;
    }
    end = mono_ns();
    if (end - start >= (int64_t)(seconds * 1e9)) break;
  }
  printf("%llu %llu %llu %.6f\n", (unsigned long long)woken, (unsigned long long)copied,
         (unsigned long long)missed, (double)(end - start) / 1e9);
  free(copy);
  ImageStreamIO_closeIm(&im);
  return 0;
}

static int write_frames(const char *name, double hz, double seconds) {
  IMAGE im;
  if (open_stream(&im, name)) return 1;
  size_t count = im.md->nelement;
  uint64_t frames = (uint64_t)(hz * seconds);
  int64_t start = mono_ns(), period = (int64_t)(1e9 / hz);
  for (uint64_t k = 1; k <= frames; k++) {
    while (mono_ns() < start + (int64_t)k * period) {
    } /* absolute schedule: a late writer catches up */
    im.md->write = 1;
    for (size_t i = 2; i < count; i++) im.array.F[i] = (float)k;
    *(int64_t *)im.array.F = mono_ns();
    ImageStreamIO_UpdateIm(&im);
  }
  printf("%llu\n", (unsigned long long)frames);
  ImageStreamIO_closeIm(&im);
  return 0;
}

/* byte j of frame k in `make` (any datatype: the bytes are compared) */
static uint8_t pattern(size_t j, uint64_t k) { return (uint8_t)(j * 7u + k * 13u + 1u); }

static void hex(const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++) printf("%02x", p[i]);
}

static int make(const char *name, int datatype, int naxis, uint32_t *size, uint32_t cbsize,
                uint64_t frames) {
  IMAGE im;
  memset(&im, 0, sizeof im);
  uint64_t type = 0x2; /* MATH_DATA, as milk's tools make */
  if (cbsize) type |= 0x1;                   /* CIRCULAR_BUFFER */
  if (ImageStreamIO_createIm_gpu(&im, name, naxis, size, (uint8_t)datatype, -1, 1, 10, 4, type,
                                 cbsize) != IMAGESTREAMIO_SUCCESS) {
    fprintf(stderr, "milk_peer: cannot create milk stream %s\n", name);
    return 1;
  }
  size_t n = im.md->imdatamemsize;
  for (uint64_t k = 1; k <= frames; k++) {
    im.md->write = 1;
    for (size_t j = 0; j < n; j++) im.array.UI8[j] = pattern(j, k);
    ImageStreamIO_UpdateIm(&im);
  }
  strcpy(im.kw[0].name, "KL");
  im.kw[0].type = 'L';
  im.kw[0].value.numl = 42;
  strcpy(im.kw[0].comment, "an int64");
  strcpy(im.kw[1].name, "KD");
  im.kw[1].type = 'D';
  im.kw[1].value.numf = 1.5;
  strcpy(im.kw[2].name, "KS");
  im.kw[2].type = 'S';
  strcpy(im.kw[2].value.valstr, "hello");
  ImageStreamIO_closeIm(&im);
  printf("made\n");
  return 0;
}

/* What milk's library sees of a stream: the metadata, the pixels and the
 * circular buffer's frames (hex), the keywords. */
static int dump(const char *name) {
  IMAGE im;
  if (open_stream(&im, name)) return 1;
  IMAGE_METADATA *md = im.md;
  size_t n = md->imdatamemsize;
  printf("md %d %d %u %u %u %llu %u %u %d\n", md->datatype, md->naxis, md->size[0], md->size[1],
         md->size[2], (unsigned long long)md->cnt0, md->CBsize, md->CBindex, md->sem);
  printf("px ");
  hex(im.array.UI8, n);
  printf("\n");
  for (uint32_t i = 0; i < md->CBsize; i++) {
    printf("cb %u %llu ", i, (unsigned long long)im.CircBuff_md[i].cnt0);
    hex((uint8_t *)im.CBimdata + (size_t)i * n, n);
    printf("\n");
  }
  for (int i = 0; i < md->NBkw; i++) {
    IMAGE_KEYWORD *kw = &im.kw[i];
    if (kw->type == 'L')
      printf("kw %s L %lld %s\n", kw->name, (long long)kw->value.numl, kw->comment);
    if (kw->type == 'D') printf("kw %s D %.17g %s\n", kw->name, kw->value.numf, kw->comment);
    if (kw->type == 'S') printf("kw %s S %s %s\n", kw->name, kw->value.valstr, kw->comment);
  }
  ImageStreamIO_closeIm(&im);
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 4 && !strcmp(argv[1], "wakeup")) return wakeup(argv[2], strtoull(argv[3], 0, 10));
  if (argc >= 4 && !strcmp(argv[1], "follow")) return follow(argv[2], atof(argv[3]));
  if (argc >= 5 && !strcmp(argv[1], "write"))
    return write_frames(argv[2], atof(argv[3]), atof(argv[4]));
  if (argc >= 3 && !strcmp(argv[1], "dump")) return dump(argv[2]);
  if (argc >= 10 && !strcmp(argv[1], "make")) {
    uint32_t size[3] = {(uint32_t)atol(argv[5]), (uint32_t)atol(argv[6]), (uint32_t)atol(argv[7])};
    return make(argv[2], atoi(argv[3]), atoi(argv[4]), size, (uint32_t)atol(argv[8]),
                strtoull(argv[9], 0, 10));
  }
  fprintf(stderr,
          "usage: milk_peer wakeup NAME FRAMES | follow NAME SECONDS | "
          "write NAME HZ SECONDS | dump NAME | "
          "make NAME DATATYPE NAXIS S0 S1 S2 CBSIZE FRAMES\n");
  return 2;
}
