/* Which engine a cross-process device copy runs on, and what a hand-over
 * between two CUDA contexts costs for each: two processes (one fork before
 * cuInit) hand a 64 KiB device buffer back and forth, each copying it with
 * the method named and synchronizing, flags in shared memory. No torch, no
 * shmstream: the floor under the ping-pong row of `python -m benchmarks gpu`
 * (docs/gpu.md, "Runs on a GPU").
 *
 *   nvcc -O2 -o /tmp/engines benchmarks/c/gpu_pingpong_engines.c -lcuda
 *   /tmp/engines [flag|dtod|batch|batch-ce|via-host] ...
 *
 * Methods (each side's copy in and copy out):
 *   flag      the echo does no device work
 *   dtod      cuMemcpyDtoDAsync (what shmstream's core calls today)
 *   batch     cuMemcpyBatchAsync, no hint
 *   batch-ce  cuMemcpyBatchAsync with CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE
 *             (the driver's hint to run the copy on a copy engine)
 *   via-host  device to pinned host, then host to device (copy engines only,
 *             twice the bytes)
 */
#include <cuda.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { BYTES = 65536, N = 2000, WARM = 200 };

struct shared {
  _Atomic long flag, back;
  CUipcMemHandle ping, pong;
};

#define CK(x)                                                        \
  do {                                                               \
    CUresult r_ = (x);                                               \
    if (r_) {                                                        \
      const char *s_ = "?";                                          \
      cuGetErrorString(r_, &s_);                                     \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s_); \
      exit(2);                                                       \
    }                                                                \
  } while (0)

static const char *method;
static void *host; /* pinned bounce buffer for via-host */

static void copy(CUdeviceptr dst, CUdeviceptr src, CUstream s) {
  if (!strcmp(method, "dtod")) {
    CK(cuMemcpyDtoDAsync(dst, src, BYTES, s));
  } else if (!strncmp(method, "batch", 5)) {
    CUmemcpyAttributes a;
    memset(&a, 0, sizeof a);
    a.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    a.srcLocHint.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.dstLocHint.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.flags = strcmp(method, "batch-ce") ? 0 : CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE;
    size_t size = BYTES, idx = 0;
    CK(cuMemcpyBatchAsync(&dst, &src, &size, 1, &a, &idx, 1, s));
  } else if (!strcmp(method, "via-host")) {
    CK(cuMemcpyDtoHAsync(host, src, BYTES, s));
    CK(cuMemcpyHtoDAsync(dst, host, BYTES, s));
  }
  CK(cuStreamSynchronize(s));
}

static CUstream context(void) {
  CUdevice dev;
  CUcontext ctx;
  CUstream s;
  CK(cuInit(0));
  CK(cuDeviceGet(&dev, 0));
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CK(cuMemHostAlloc(&host, BYTES, 0));
  return s;
}

static void echo(struct shared *sh, int work) {
  CUstream s = context();
  CUdeviceptr ping, pong, x;
  while (atomic_load(&sh->flag) != -1) {
  }
  CK(cuIpcOpenMemHandle(&ping, sh->ping, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  CK(cuIpcOpenMemHandle(&pong, sh->pong, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  CK(cuMemAlloc(&x, BYTES));
  atomic_store(&sh->back, -1);
  for (long i = 0; i < N + WARM; i++) {
    while (atomic_load(&sh->flag) != i) {
    }
    if (work) {
      copy(x, ping, s);
      copy(pong, x, s);
    }
    atomic_store(&sh->back, i);
  }
  _exit(0);
}

static int cmp(const void *a, const void *b) {
  long x = *(const long *)a, y = *(const long *)b;
  return (x > y) - (x < y);
}

static long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000000000L + t.tv_nsec;
}

static void run(const char *m) {
  method = !strcmp(m, "flag") ? "dtod" : m;
  struct shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1,
                           0);
  atomic_store(&sh->flag, -2);
  atomic_store(&sh->back, -2);
  pid_t pid = fork();
  if (pid == 0) echo(sh, strcmp(m, "flag") != 0);
  CUstream s = context();
  CUdeviceptr ping, pong, src, got;
  CK(cuMemAlloc(&ping, BYTES));
  CK(cuMemAlloc(&pong, BYTES));
  CK(cuMemAlloc(&src, BYTES));
  CK(cuMemAlloc(&got, BYTES));
  CK(cuIpcGetMemHandle(&sh->ping, ping));
  CK(cuIpcGetMemHandle(&sh->pong, pong));
  atomic_store(&sh->flag, -1);
  while (atomic_load(&sh->back) != -1) {
  }
  static long lat[N];
  for (long i = 0; i < N + WARM; i++) {
    long t = now_ns();
    copy(ping, src, s);
    atomic_store(&sh->flag, i);
    while (atomic_load(&sh->back) != i) {
    }
    copy(got, pong, s);
    if (i >= WARM) lat[i - WARM] = now_ns() - t;
  }
  waitpid(pid, NULL, 0);
  qsort(lat, N, sizeof lat[0], cmp);
  printf("engines ping-pong %-9s p50 %7.1f us  p99 %7.1f us\n", m, lat[N / 2] / 1e3,
         lat[N * 99 / 100] / 1e3);
  fflush(stdout);
  CK(cuMemFree(ping));
  CK(cuMemFree(pong));
  CK(cuMemFree(src));
  CK(cuMemFree(got));
  munmap(sh, sizeof *sh);
}

int main(int argc, char **argv) {
  const char *all[] = {"flag", "dtod", "batch", "batch-ce", "via-host"};
  if (argc > 1)
    for (int i = 1; i < argc; i++) {
      pid_t p = fork(); /* each run in a fresh process: cuInit only after fork */
      if (p == 0) {
        run(argv[i]);
        _exit(0);
      }
      waitpid(p, NULL, 0);
    }
  else
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
      pid_t p = fork();
      if (p == 0) {
        run(all[i]);
        _exit(0);
      }
      waitpid(p, NULL, 0);
    }
  return 0;
}
