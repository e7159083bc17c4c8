/* The CUDA half of the core, private to src/core/cuda_*.c: the few driver
 * types and entry points (no CUDA header is needed; the driver is loaded at
 * run time), the error text, and the per-device contexts. */
#ifndef SS_CUDA_INTERNAL_H
#define SS_CUDA_INTERNAL_H

#include "core_helpers.h"
#include "shmstream_cuda.h"

/* ---- the driver API, declared here (cuda.h is not needed) -------------- */

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef unsigned long long CUdeviceptr;
typedef struct {
  char reserved[64];
} CUipcMemHandle;
typedef struct {
  char reserved[64];
} CUipcEventHandle;
typedef struct {
  char bytes[16];
} CUuuid;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_NOT_READY 600
#define CU_EVENT_DISABLE_TIMING 0x2
#define CU_EVENT_INTERPROCESS 0x4
#define CU_STREAM_NON_BLOCKING 0x1
#define CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS 0x1
#define CU_MEMHOSTALLOC_PORTABLE 0x1

/* The driver's entry points, resolved by dlsym (cuda_driver.c). */
typedef struct ss_cu_api {
  CUresult (*Init)(unsigned);
  CUresult (*DeviceGetCount)(int *);
  CUresult (*DeviceGet)(CUdevice *, int);
  CUresult (*DeviceGetUuid)(CUuuid *, CUdevice);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*CtxPushCurrent)(CUcontext);
  CUresult (*CtxPopCurrent)(CUcontext *);
  CUresult (*MemAlloc)(CUdeviceptr *, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*MemHostAlloc)(void **, size_t, unsigned);
  CUresult (*MemFreeHost)(void *);
  CUresult (*MemsetD8)(CUdeviceptr, unsigned char, size_t);
  CUresult (*MemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*MemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
  CUresult (*MemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
  CUresult (*MemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
  CUresult (*IpcGetMemHandle)(CUipcMemHandle *, CUdeviceptr);
  CUresult (*IpcOpenMemHandle)(CUdeviceptr *, CUipcMemHandle, unsigned);
  CUresult (*IpcCloseMemHandle)(CUdeviceptr);
  CUresult (*IpcGetEventHandle)(CUipcEventHandle *, CUevent);
  CUresult (*IpcOpenEventHandle)(CUevent *, CUipcEventHandle);
  CUresult (*EventCreate)(CUevent *, unsigned);
  CUresult (*EventDestroy)(CUevent);
  CUresult (*EventRecord)(CUevent, CUstream);
  CUresult (*EventQuery)(CUevent);
  CUresult (*StreamCreate)(CUstream *, unsigned);
  CUresult (*StreamDestroy)(CUstream);
  CUresult (*StreamWaitEvent)(CUstream, CUevent, unsigned);
  CUresult (*GetErrorString)(CUresult, const char **);
  CUresult (*GetErrorName)(CUresult, const char **);
} ss_cu_api;
extern ss_cu_api cu;

/* The calling thread's last error text (ss_cuda_error()). */
void ss_cuda_set_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Record a failing driver call; returns SS_ECUDA. */
int ss_cu_fail(const char *what, CUresult r);
#define CU_TRY(call, what)                               \
  do {                                                   \
    CUresult r_ = (call);                                \
    if (r_ != CUDA_SUCCESS) return ss_cu_fail(what, r_); \
  } while (0)

/* Make the device's primary context current around a call. */
int ss_cuda_push(int ordinal);
void ss_cuda_pop(void);

#endif
