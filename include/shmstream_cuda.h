/* shmstream GPU streams: the CUDA half of the C API and the layout of the
 * 512-byte GPU area of the identity block (offset 1456 of the header).
 *
 * No CUDA header is needed to build or include this file: the core loads
 * the CUDA driver (libcuda.so.1) with dlopen at run time, so a program that
 * never makes a GPU stream never needs CUDA. docs/gpu.md describes the
 * design (device double buffer, inter-process event, lifetime rules) and
 * docs/ABI.md the GPU area field by field; the static_asserts below pin it.
 *
 * STATUS: written and compiled on a machine without a GPU. Nothing in this
 * file has run against a real device yet; docs/gpu.md lists what remains
 * to verify.
 */
#ifndef SHMSTREAM_CUDA_H
#define SHMSTREAM_CUDA_H

#include "shmstream.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SS_GPU_AREA_VERSION 1u
#define SS_GPU_SLOTS \
  2u /* device double buffer; slot i is guarded by the header's slot_seq[i], the published one is pub.slot */
#define SS_GPU_SLOT_ALIGN 512u /* device slots start on 512-byte boundaries */

/* Status codes of the CUDA half (SS_ECUDA ... SS_ENOTGPU) are in enum
 * ss_status (shmstream.h). */

/* The GPU area: written by the creator before the checksum and the magic,
 * immutable afterwards (it is part of the checksummed identity block). */
typedef struct ss_gpu_area {
  uint32_t version; /* 0   SS_GPU_AREA_VERSION; 0 means "no GPU area" */
  int32_t device_ordinal; /* 4   the creator's ordinal (informational: ordinals
                                  differ between processes; the uuid decides) */
  uint8_t device_uuid[16]; /* 8   cuDeviceGetUuid of the device holding the buffer */
  uint32_t slot_count; /* 24  SS_GPU_SLOTS */
  uint32_t reserved0; /* 28  zero */
  uint64_t slot_stride; /* 32  bytes between device slots (payload rounded up to 512) */
  uint64_t alloc_bytes; /* 40  slot_stride * slot_count (at least 512) */
  int32_t exporter_pid; /* 48  the process whose allocation the handles name (creator) */
  uint32_t reserved1; /* 52  zero */
  uint64_t reserved2; /* 56  zero */
  uint8_t mem_handle[64]; /* 64  CUipcMemHandle of the device buffer */
  uint8_t event_handle[64]; /* 128 CUipcEventHandle of the "written" event */
  uint8_t reserved[320]; /* 192 zero */
} ss_gpu_area;

#ifdef __cplusplus
#define SS_GPU_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#define SS_GPU_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif
#define SS_GPU_PIN(field, off) \
  SS_GPU_STATIC_ASSERT(offsetof(ss_gpu_area, field) == (off), "GPU area offset of " #field)
SS_GPU_PIN(version, 0);
SS_GPU_PIN(device_ordinal, 4);
SS_GPU_PIN(device_uuid, 8);
SS_GPU_PIN(slot_count, 24);
SS_GPU_PIN(slot_stride, 32);
SS_GPU_PIN(alloc_bytes, 40);
SS_GPU_PIN(exporter_pid, 48);
SS_GPU_PIN(mem_handle, 64);
SS_GPU_PIN(event_handle, 128);
SS_GPU_PIN(reserved, 192);
SS_GPU_STATIC_ASSERT(sizeof(ss_gpu_area) == 512, "GPU area is 512 bytes");
SS_GPU_STATIC_ASSERT(sizeof(((ss_identity *)0)->gpu) == sizeof(ss_gpu_area),
                     "GPU area fits id.gpu");
#undef SS_GPU_PIN

/* Where a write's source lives. */
enum ss_gpu_src {
  SS_GPU_SRC_HOST = 0, /* pageable host memory (NumPy): staged by the driver */
  SS_GPU_SRC_PINNED = 1, /* page-locked host memory: the copy is waited for */
  SS_GPU_SRC_DEVICE = 2 /* device memory (any context-visible pointer, UVA) */
};

/* A process's attachment to one GPU stream (opaque). Attachments are cached
 * per process and generation: attaching twice gives the same device mapping
 * (the CUDA IPC handle is opened once per process). */
typedef struct ss_gpu ss_gpu;

/* Load libcuda.so.1 and call cuInit(0), once per process. SS_OK, or
 * SS_ENOCUDA with the reason in ss_cuda_error(). Thread-safe. */
SS_API int ss_cuda_init(void);
/* The message of this thread's last failing call (never NULL). */
SS_API const char *ss_cuda_error(void);
SS_API int ss_cuda_device_count(int *count);
SS_API int ss_cuda_device_uuid(int ordinal, uint8_t uuid[16]);
/* Ordinal of the device with this uuid in this process, or -1. */
SS_API int ss_cuda_device_by_uuid(const uint8_t uuid[16]);

/* Allocate the device buffer and the inter-process event on device
 * `ordinal`, then create the segment (args->flags must contain SS_FLAG_GPU;
 * args->gpu_area is filled in here). The allocation is this process's: it
 * lives until ss_gpu_release_owned() or the process exits. */
SS_API int ss_gpu_create(ss_segment *seg, ss_create_args *args, int ordinal, ss_gpu **out);
/* Attach to an opened GPU stream on device `ordinal` of this process (it
 * must be the device the area's uuid names). */
SS_API int ss_gpu_attach(const ss_segment *seg, int ordinal, ss_gpu **out);
/* The check ss_gpu_attach makes of the segment's GPU area (docs/ABI.md):
 * SS_OK or SS_ENOTGPU (ss_cuda_error says why). Needs no CUDA driver, so a
 * fuzz harness (tests/fuzz/fuzz_header.c) reaches it on any machine. */
SS_API int ss_gpu_area_validate(const ss_segment *seg);
/* Drop one attachment reference; an imported mapping is closed with the
 * last one. The creator's allocation stays until ss_gpu_release_owned. */
SS_API void ss_gpu_detach(ss_gpu *g);
/* The creator gives its allocation up (on unlink). Freed at once if no
 * attachment of this process uses it, else with the last detach. Other
 * processes' imported mappings must be closed before: see docs/gpu.md. */
SS_API void ss_gpu_release_owned(const uint8_t instance_id[16]);

SS_API int ss_gpu_ordinal(const ss_gpu *g);
SS_API uint64_t ss_gpu_stream(const ss_gpu *g); /* the attachment's private CUstream */
SS_API uint64_t ss_gpu_slot_ptr(const ss_gpu *g, uint32_t slot);
SS_API int ss_gpu_is_owner(const ss_gpu *g);

/* Publish payload_bytes from src (caller holds the stream lock). The copy
 * goes to the slot the next publication owns and is ordered after every
 * earlier writer's copy by the inter-process event; readers wait for it on
 * the device. user_stream is the CUstream the source was produced on (0 if
 * unknown): a device copy is ordered after it, and it is made to wait for
 * the copy before reusing the source; with no user stream, device and
 * pinned sources are waited for on the host before return. */
SS_API int ss_gpu_write_locked(ss_gpu *g, ss_segment *seg, uint64_t src, int src_kind,
                               uint64_t user_stream, const uint64_t *frame_id, int64_t timeout_ns);
SS_API int ss_gpu_clear_locked(ss_gpu *g, ss_segment *seg, int64_t timeout_ns);

/* A consistent snapshot of the published payload copied to device memory
 * dst. user_stream (0: none) is the stream dst was allocated on; the copy
 * is ordered after it. Returns when the copy has completed (host-side
 * event poll, not a device synchronize). */
SS_API int ss_gpu_read(ss_gpu *g, ss_segment *seg, uint64_t dst, uint64_t user_stream,
                       int64_t timeout_ns, int holds_lock, ss_pubinfo *info);

/* In-place write (write_view): begin a write (caller holds the lock); the
 * next publication's slot gets a copy of the current payload and its
 * device pointer is returned, ready on user_stream (or on the host when
 * user_stream is 0). Commit publishes the work queued on user_stream. */
SS_API int ss_gpu_view_begin(ss_gpu *g, ss_segment *seg, uint64_t user_stream, int64_t timeout_ns,
                             uint64_t *slot_ptr);
SS_API int ss_gpu_view_commit(ss_gpu *g, ss_segment *seg, uint64_t user_stream,
                              const uint64_t *frame_id);
SS_API void ss_gpu_view_abort(ss_gpu *g, ss_segment *seg);

/* Small helpers for the bindings. */
SS_API int ss_cuda_alloc(int ordinal, size_t n, uint64_t *ptr);
SS_API void ss_cuda_free(int ordinal, uint64_t ptr);
SS_API int ss_cuda_host_alloc(size_t n, void **ptr);
SS_API void ss_cuda_host_free(void *ptr);
SS_API int ss_cuda_copy_to_host(int ordinal, void *dst, uint64_t src, size_t n);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SHMSTREAM_CUDA_H */
