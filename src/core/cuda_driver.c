/* GPU streams, the driver half: libcuda.so.1 loaded at run time (dlopen;
 * no CUDA header is used), error text, per-device primary contexts, device
 * queries and the allocation helpers of the bindings. Without libcuda every
 * call returns SS_ENOCUDA with a message naming it. The stream half (a
 * device double buffer shared through CUDA IPC) is cuda_stream.c.
 *
 * Runs on NVIDIA GPUs (docs/gpu.md, "Runs on a GPU").
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda_internal.h"

ss_cu_api cu;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_init_rc = SS_ENOCUDA;
static char g_init_msg[512];
static pid_t g_init_pid;
static __thread char t_err[512];

void ss_cuda_set_err(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(t_err, sizeof t_err, fmt, ap);
  va_end(ap);
}

const char *ss_cuda_error(void) { return t_err; }

/* Record a failing driver call; returns SS_ECUDA. */
int ss_cu_fail(const char *what, CUresult r) {
  const char *name = NULL, *desc = NULL;
  if (cu.GetErrorName) cu.GetErrorName(r, &name);
  if (cu.GetErrorString) cu.GetErrorString(r, &desc);
  ss_cuda_set_err("%s failed: %s (%d): %s", what, name ? name : "CUDA error", r,
                  desc ? desc : "no description");
  return SS_ECUDA;
}
#define CU_TRY(call, what)                               \
  do {                                                   \
    CUresult r_ = (call);                                \
    if (r_ != CUDA_SUCCESS) return ss_cu_fail(what, r_); \
  } while (0)

static void *sym(void *lib, const char *const *names) {
  for (; *names; names++) {
    void *p = dlsym(lib, *names);
    if (p) return p;
  }
  return NULL;
}

static void load_once(void) {
  g_init_pid = getpid();
  const char *path = getenv("SHMSTREAM_LIBCUDA");
  if (!path || !*path) path = "libcuda.so.1";
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *why = dlerror();
    snprintf(g_init_msg, sizeof g_init_msg,
             "%s not found: the CUDA driver is not installed or not on the library path "
             "(%s); GPU streams need an NVIDIA driver",
             path, why ? why : "dlopen failed");
    return;
  }
#define LOAD(field, ...)                                                                      \
  do {                                                                                        \
    static const char *const names_[] = {__VA_ARGS__, NULL};                                  \
    *(void **)&cu.field = sym(lib, names_);                                                   \
    if (!cu.field) {                                                                          \
      snprintf(g_init_msg, sizeof g_init_msg,                                                 \
               "%s lacks the CUDA driver entry point %s (driver too old?)", path, names_[0]); \
      return;                                                                                 \
    }                                                                                         \
  } while (0)
  LOAD(Init, "cuInit");
  LOAD(DeviceGetCount, "cuDeviceGetCount");
  LOAD(DeviceGet, "cuDeviceGet");
  LOAD(DeviceGetUuid, "cuDeviceGetUuid_v2", "cuDeviceGetUuid");
  LOAD(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  LOAD(CtxPushCurrent, "cuCtxPushCurrent_v2", "cuCtxPushCurrent");
  LOAD(CtxPopCurrent, "cuCtxPopCurrent_v2", "cuCtxPopCurrent");
  LOAD(MemAlloc, "cuMemAlloc_v2", "cuMemAlloc");
  LOAD(MemFree, "cuMemFree_v2", "cuMemFree");
  LOAD(MemHostAlloc, "cuMemHostAlloc");
  LOAD(MemFreeHost, "cuMemFreeHost");
  LOAD(MemsetD8, "cuMemsetD8_v2", "cuMemsetD8");
  LOAD(MemsetD8Async, "cuMemsetD8Async");
  LOAD(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", "cuMemcpyHtoDAsync");
  LOAD(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", "cuMemcpyDtoHAsync");
  LOAD(MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", "cuMemcpyDtoDAsync");
  LOAD(MemcpyDtoH, "cuMemcpyDtoH_v2", "cuMemcpyDtoH");
  LOAD(IpcGetMemHandle, "cuIpcGetMemHandle");
  LOAD(IpcOpenMemHandle, "cuIpcOpenMemHandle_v2", "cuIpcOpenMemHandle");
  LOAD(IpcCloseMemHandle, "cuIpcCloseMemHandle");
  LOAD(IpcGetEventHandle, "cuIpcGetEventHandle");
  LOAD(IpcOpenEventHandle, "cuIpcOpenEventHandle");
  LOAD(EventCreate, "cuEventCreate");
  LOAD(EventDestroy, "cuEventDestroy_v2", "cuEventDestroy");
  LOAD(EventRecord, "cuEventRecord");
  LOAD(EventQuery, "cuEventQuery");
  LOAD(StreamCreate, "cuStreamCreate");
  LOAD(StreamDestroy, "cuStreamDestroy_v2", "cuStreamDestroy");
  LOAD(StreamWaitEvent, "cuStreamWaitEvent");
  LOAD(GetErrorString, "cuGetErrorString");
  LOAD(GetErrorName, "cuGetErrorName");
#undef LOAD
  CUresult r = cu.Init(0);
  if (r != CUDA_SUCCESS) {
    const char *name = NULL;
    cu.GetErrorName(r, &name);
    snprintf(g_init_msg, sizeof g_init_msg,
             "cuInit failed: %s (%d); no usable CUDA device in this process",
             name ? name : "CUDA error", r);
    return;
  }
  g_init_rc = SS_OK;
}

int ss_cuda_init(void) {
  pthread_once(&g_once, load_once);
  if (g_init_rc != SS_OK) {
    ss_cuda_set_err("%s", g_init_msg);
    return g_init_rc;
  }
  if (getpid() != g_init_pid) {
    ss_cuda_set_err(
        "CUDA was initialised in the parent of this forked process; CUDA cannot be "
        "used after fork(): start worker processes with the 'spawn' method");
    return SS_EFORK;
  }
  return SS_OK;
}

/* ---- contexts: the device's primary context, pushed around each call --- */

#define SS_MAX_DEVICES 64
static CUcontext g_ctx[SS_MAX_DEVICES];
static pthread_mutex_t g_ctx_mu = PTHREAD_MUTEX_INITIALIZER;

static int get_ctx(int ordinal, CUcontext *out) {
  int rc = ss_cuda_init();
  if (rc) return rc;
  if (ordinal < 0 || ordinal >= SS_MAX_DEVICES) {
    ss_cuda_set_err("CUDA device ordinal %d is out of range", ordinal);
    return SS_ECUDA;
  }
  pthread_mutex_lock(&g_ctx_mu);
  if (!g_ctx[ordinal]) {
    CUdevice dev;
    CUresult r = cu.DeviceGet(&dev, ordinal);
    if (r == CUDA_SUCCESS) r = cu.DevicePrimaryCtxRetain(&g_ctx[ordinal], dev);
    if (r != CUDA_SUCCESS) {
      pthread_mutex_unlock(&g_ctx_mu);
      return ss_cu_fail("opening CUDA device (cuDeviceGet/cuDevicePrimaryCtxRetain)", r);
    }
  }
  *out = g_ctx[ordinal];
  pthread_mutex_unlock(&g_ctx_mu);
  return SS_OK;
}

int ss_cuda_push(int ordinal) {
  CUcontext c = NULL;
  int rc = get_ctx(ordinal, &c);
  if (rc) return rc;
  CU_TRY(cu.CtxPushCurrent(c), "cuCtxPushCurrent");
  return SS_OK;
}

void ss_cuda_pop(void) {
  CUcontext c = NULL;
  cu.CtxPopCurrent(&c);
}

int ss_cuda_device_count(int *count) {
  int rc = ss_cuda_init();
  if (rc) return rc;
  CU_TRY(cu.DeviceGetCount(count), "cuDeviceGetCount");
  return SS_OK;
}

int ss_cuda_device_uuid(int ordinal, uint8_t uuid[16]) {
  int rc = ss_cuda_init();
  if (rc) return rc;
  CUdevice dev;
  CUuuid u;
  CU_TRY(cu.DeviceGet(&dev, ordinal), "cuDeviceGet");
  CU_TRY(cu.DeviceGetUuid(&u, dev), "cuDeviceGetUuid");
  memcpy(uuid, u.bytes, 16);
  return SS_OK;
}

int ss_cuda_device_by_uuid(const uint8_t uuid[16]) {
  int n = 0;
  if (ss_cuda_device_count(&n)) return -1;
  for (int i = 0; i < n; i++) {
    uint8_t u[16];
    if (ss_cuda_device_uuid(i, u) == SS_OK && memcmp(u, uuid, 16) == 0) return i;
  }
  return -1;
}

/* ---- helpers for the bindings ------------------------------------------ */

int ss_cuda_alloc(int ordinal, size_t n, uint64_t *ptr) {
  int rc = ss_cuda_push(ordinal);
  if (rc) return rc;
  CUdeviceptr p = 0;
  CUresult r = cu.MemAlloc(&p, n ? n : 1);
  ss_cuda_pop();
  if (r) return ss_cu_fail("cuMemAlloc", r);
  *ptr = p;
  return SS_OK;
}

void ss_cuda_free(int ordinal, uint64_t ptr) {
  if (ss_cuda_push(ordinal) != SS_OK) return;
  cu.MemFree((CUdeviceptr)ptr);
  ss_cuda_pop();
}

int ss_cuda_host_alloc(size_t n, void **ptr) {
  int rc = ss_cuda_push(0);
  if (rc) return rc;
  CUresult r = cu.MemHostAlloc(ptr, n ? n : 1, CU_MEMHOSTALLOC_PORTABLE);
  ss_cuda_pop();
  if (r) return ss_cu_fail("cuMemHostAlloc", r);
  return SS_OK;
}

void ss_cuda_host_free(void *ptr) {
  if (ss_cuda_push(0) != SS_OK) return;
  cu.MemFreeHost(ptr);
  ss_cuda_pop();
}

int ss_cuda_copy_to_host(int ordinal, void *dst, uint64_t src, size_t n) {
  int rc = ss_cuda_push(ordinal);
  if (rc) return rc;
  CUresult r = n ? cu.MemcpyDtoH(dst, (CUdeviceptr)src, n) : CUDA_SUCCESS;
  ss_cuda_pop();
  if (r) return ss_cu_fail("cuMemcpyDtoH", r);
  return SS_OK;
}
