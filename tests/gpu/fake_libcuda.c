/* A fake CUDA driver for CPU-only test machines: NOT CUDA.
 *
 * It implements the few driver entry points src/core/cuda_driver.c resolves, with
 * host memory: "device" allocations are POSIX shared-memory files mapped in
 * each process (so CUDA IPC handles work across processes), copies are
 * synchronous memcpy, events are always complete. It exercises the binding,
 * the Python layer and the seqlock/slot bookkeeping of GPU streams; it says
 * nothing about real device ordering, IPC lifetime or performance. Loaded
 * through SHMSTREAM_LIBCUDA=<path to the built .so> (tests/gpu/test_gpu_fake.py).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef struct {
  char reserved[64];
} CUipcMemHandle;
typedef struct {
  char reserved[64];
} CUipcEventHandle;

#define OK 0
#define BAD 1 /* CUDA_ERROR_INVALID_VALUE */

/* device memory: a shared-memory file, remembered by base pointer */
struct alloc {
  CUdeviceptr base;
  size_t n;
  char name[48];
  int owner;
  struct alloc *next;
};
static struct alloc *allocs;
static unsigned seq;

static struct alloc *find(CUdeviceptr p) {
  for (struct alloc *a = allocs; a; a = a->next)
    if (p == a->base) return a;
  return NULL;
}

CUresult cuInit(unsigned f) {
  (void)f;
  return OK;
}
CUresult cuDeviceGetCount(int *n) {
  *n = 1;
  return OK;
}
CUresult cuDeviceGet(int *d, int i) {
  if (i != 0) return BAD;
  *d = 0;
  return OK;
}
CUresult cuDeviceGetUuid(char *u, int d) {
  (void)d;
  memcpy(u, "FAKE-CUDA-DEVICE", 16);
  return OK;
}
CUresult cuDevicePrimaryCtxRetain(void **c, int d) {
  (void)d;
  *c = (void *)1;
  return OK;
}
CUresult cuCtxPushCurrent(void *c) {
  (void)c;
  return OK;
}
CUresult cuCtxPopCurrent(void **c) {
  if (c) *c = (void *)1;
  return OK;
}

static void *map_file(const char *name, size_t n, int create) {
  int fd = shm_open(name, O_RDWR | (create ? O_CREAT | O_EXCL : 0), 0600);
  if (fd < 0) return NULL;
  if (create && ftruncate(fd, (off_t)n) != 0) {
    close(fd);
    return NULL;
  }
  void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  return p == MAP_FAILED ? NULL : p;
}

CUresult cuMemAlloc(CUdeviceptr *p, size_t n) {
  struct alloc *a = calloc(1, sizeof *a);
  snprintf(a->name, sizeof a->name, "/fakecuda-%d-%u", (int)getpid(), seq++);
  void *m = map_file(a->name, n ? n : 1, 1);
  if (!m) {
    free(a);
    return 2; /* out of memory */
  }
  a->base = (CUdeviceptr)(uintptr_t)m;
  a->n = n ? n : 1;
  a->owner = 1;
  a->next = allocs;
  allocs = a;
  *p = a->base;
  return OK;
}

static void drop(struct alloc *a) {
  for (struct alloc **pp = &allocs; *pp; pp = &(*pp)->next)
    if (*pp == a) {
      *pp = a->next;
      break;
    }
  munmap((void *)(uintptr_t)a->base, a->n);
  if (a->owner) shm_unlink(a->name);
  free(a);
}

CUresult cuMemFree(CUdeviceptr p) {
  struct alloc *a = find(p);
  if (!a) return BAD;
  drop(a);
  return OK;
}

CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p) {
  struct alloc *a = find(p);
  if (!a) return BAD;
  memset(h, 0, sizeof *h);
  memcpy(h->reserved, &a->n, 8);
  memcpy(h->reserved + 8, a->name, strlen(a->name) + 1);
  return OK;
}

CUresult cuIpcOpenMemHandle(CUdeviceptr *p, CUipcMemHandle h, unsigned f) {
  (void)f;
  struct alloc *a = calloc(1, sizeof *a);
  memcpy(&a->n, h.reserved, 8);
  memcpy(a->name, h.reserved + 8, sizeof a->name - 1);
  void *m = map_file(a->name, a->n, 0);
  if (!m) {
    free(a);
    return 201; /* like an invalid handle: the exporter is gone */
  }
  a->base = (CUdeviceptr)(uintptr_t)m;
  a->next = allocs;
  allocs = a;
  *p = a->base;
  return OK;
}

CUresult cuIpcCloseMemHandle(CUdeviceptr p) {
  struct alloc *a = find(p);
  if (!a || a->owner) return BAD;
  drop(a);
  return OK;
}

CUresult cuMemHostAlloc(void **p, size_t n, unsigned f) {
  (void)f;
  *p = malloc(n);
  return *p ? OK : 2;
}
CUresult cuMemFreeHost(void *p) {
  free(p);
  return OK;
}
CUresult cuMemsetD8(CUdeviceptr p, unsigned char v, size_t n) {
  memset((void *)(uintptr_t)p, v, n);
  return OK;
}
CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, void *s) {
  (void)s;
  return cuMemsetD8(p, v, n);
}
/* Copies queued, by direction: tests read them (ctypes) to see which path
 * the core took (tests/gpu/test_gpu_fake.py, staging). */
long fake_dtod_copies, fake_dtoh_copies;

CUresult cuMemcpyHtoDAsync(CUdeviceptr d, const void *s, size_t n, void *st) {
  (void)st;
  memcpy((void *)(uintptr_t)d, s, n);
  return OK;
}
CUresult cuMemcpyDtoHAsync(void *d, CUdeviceptr s, size_t n, void *st) {
  (void)st;
  fake_dtoh_copies++;
  memcpy(d, (void *)(uintptr_t)s, n);
  return OK;
}
CUresult cuMemcpyDtoDAsync(CUdeviceptr d, CUdeviceptr s, size_t n, void *st) {
  (void)st;
  fake_dtod_copies++;
  memmove((void *)(uintptr_t)d, (void *)(uintptr_t)s, n);
  return OK;
}
CUresult cuMemcpyDtoH(void *d, CUdeviceptr s, size_t n) {
  memcpy(d, (void *)(uintptr_t)s, n);
  return OK;
}

static int dummy_event;
CUresult cuEventCreate(void **e, unsigned f) {
  (void)f;
  *e = &dummy_event;
  return OK;
}
CUresult cuEventDestroy(void *e) {
  (void)e;
  return OK;
}
CUresult cuEventRecord(void *e, void *s) {
  (void)e;
  (void)s;
  return OK;
}
CUresult cuEventQuery(void *e) {
  (void)e;
  return OK;
}
CUresult cuIpcGetEventHandle(CUipcEventHandle *h, void *e) {
  (void)e;
  memset(h, 0, sizeof *h);
  return OK;
}
CUresult cuIpcOpenEventHandle(void **e, CUipcEventHandle h) {
  (void)h;
  *e = &dummy_event;
  return OK;
}
static int dummy_stream;
CUresult cuStreamCreate(void **s, unsigned f) {
  (void)f;
  *s = &dummy_stream;
  return OK;
}
CUresult cuStreamDestroy(void *s) {
  (void)s;
  return OK;
}
CUresult cuStreamWaitEvent(void *s, void *e, unsigned f) {
  (void)s;
  (void)e;
  (void)f;
  return OK;
}
CUresult cuGetErrorString(CUresult r, const char **s) {
  (void)r;
  *s = "fake driver error";
  return OK;
}
CUresult cuGetErrorName(CUresult r, const char **s) {
  (void)r;
  *s = "FAKE_ERROR";
  return OK;
}
