/* libFuzzer harness: a milk/CACAO stream file (src/core/milk.c) whose bytes
 * are the input.
 *
 * ss_milk_layout_parse on the bytes (the file size is the input's length),
 * then the file written to /dev/shm (fz_name: the suite's leftover check
 * sees it if it stays) and opened with ss_milk_open; an accepted file must
 * keep what the handle relies on (every section inside the file, in
 * milk's order), and is then read, written (a hostile CBindex must land
 * inside the circular buffer), its keywords read and a semaphore claimed
 * and released. Nothing waits: a semaphore of garbage bytes is posted, never
 * waited on. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "shmstream_milk.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_layout(const ss_milk_layout *l, uint64_t file_bytes) {
  FZ_CHECK(l->total_bytes == file_bytes);
  FZ_CHECK(l->naxis >= 1 && l->naxis <= 3);
  FZ_CHECK(l->itemsize >= 1 && l->frame_bytes == l->nelement * l->itemsize);
  FZ_CHECK(l->off_data == SS_MILK_MD_BYTES);
  const uint64_t order[] = {l->off_data,    l->off_kw,       l->off_sem,     l->off_semlog,
                            l->off_readpid, l->off_writepid, l->off_semctrl, l->off_semstatus,
                            l->off_trace,   l->off_atimes,   l->off_wtimes,  l->off_cnts,
                            l->off_cbmd,    l->off_cbdata,   l->total_bytes};
  for (size_t i = 0; i + 1 < sizeof order / sizeof order[0]; i++) {
    FZ_CHECK(order[i] <= order[i + 1]);
    FZ_CHECK(order[i] % 8 == 0);
  }
  FZ_CHECK(l->off_data + l->frame_bytes <= l->off_kw);
  FZ_CHECK(l->off_kw + (uint64_t)l->nkw * SS_MILK_KW_BYTES <= l->off_sem);
  FZ_CHECK(l->off_cbdata + (uint64_t)l->cbsize * l->frame_bytes <= l->total_bytes);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > FZ_MAX_FILE) return 0;
  ss_milk_layout l;
  if (ss_milk_layout_parse(data, size, size, &l) == SS_OK) check_layout(&l, size);

  char path[160];
  snprintf(path, sizeof path, "/dev/shm/%s", fz_name("milk"));
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) abort();
  if (size && write(fd, data, size) != (ssize_t)size) abort();
  close(fd);
  ss_milk *m = NULL;
  if (ss_milk_open(path, &m, &l) == SS_OK) {
    check_layout(&l, size);
    uint8_t *buf = malloc(l.frame_bytes ? l.frame_bytes : 1);
    if (!buf) abort();
    ss_milk_pubinfo info;
    (void)ss_milk_read(m, buf, l.frame_bytes, 0, &info);
    ss_milk_kw kw;
    for (uint32_t i = 0; i < l.nkw; i++) FZ_CHECK(ss_milk_kw_get(m, i, &kw) == SS_OK);
    FZ_CHECK(ss_milk_kw_get(m, l.nkw, &kw) != SS_OK);
    int c = ss_milk_claim(m, 0);
    FZ_CHECK(c < (int)l.nsem);
    ss_milk_release(m);
    memset(buf, 0x5a, l.frame_bytes);
    FZ_CHECK(ss_milk_write(m, buf, l.frame_bytes, -1) == SS_OK);
    FZ_CHECK(ss_milk_read(m, buf, l.frame_bytes, 0, &info) == SS_OK);
    for (uint64_t i = 0; i < l.frame_bytes; i++) FZ_CHECK(buf[i] == 0x5a);
    free(buf);
    ss_milk_close(m);
  }
  unlink(path);
  return 0;
}
