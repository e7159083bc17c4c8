/* GPU streams, the stream half: a device double buffer shared through CUDA
 * IPC, and an inter-process event that orders every writer's copy before
 * the readers' copies (the driver half is cuda_driver.c).
 *
 * Protocol (docs/gpu.md has the long form):
 *   - the segment has two slot seqlocks (slot_count 2, the header's slot
 *     line), one per device slot: device slot i is guarded by slot_seq[i],
 *     and the published publication lives in device slot pub.slot, exactly
 *     as a CPU stream's payload lives in CPU slot pub.slot;
 *   - a writer (lock held) waits for the last writer's copy (the IPC event,
 *     after_written), begins the write (ss_write_begin: the slot after the
 *     published one, its slot seq odd), copies into that device slot on the
 *     caller's stream (or the private one), records the IPC event there,
 *     ends the write (ss_write_end: slot seq even, then pub.slot, count+1
 *     under the publish seqlock). It never waits for readers;
 *   - a reader takes the metadata and the published slot's seq under the
 *     publish seqlock, waits for the IPC event (after_written), copies that
 *     device slot, waits for its own copy on the host, and keeps it if the
 *     slot's seq has not moved (no write began on that slot meanwhile).
 *     Otherwise it retries; after a few tries it takes the lock, as the CPU
 *     read does.
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

/* ---- attachments: one per stream generation per process ---------------- */

struct ss_gpu {
  struct ss_gpu *next;
  uint8_t instance_id[16];
  pid_t pid;              /* the process that made it (fork check) */
  int ordinal;
  int owner;              /* this process allocated the buffer (creator) */
  int owner_released;     /* the creator gave it up (unlink): free at refs 0 */
  int refs;
  int poisoned;           /* the private stream waits on work that never ends */
  pid_t creator_pid;
  int64_t creator_checked_ns; /* last full check of the creator (check_creator) */
  uint64_t slot_stride;
  uint64_t payload_bytes;
  CUdeviceptr base;       /* the buffer: own allocation or imported mapping */
  CUevent ipc_event;      /* "written": recorded after every writer's copy */
  CUevent ev_user;        /* local: marks the caller's stream */
  CUevent ev_done;        /* local: marks our own copy, polled on the host */
  CUevent ev_stage;       /* local: the staging buffer's last copy out */
  void *stage;            /* pinned host buffer of payload_bytes (device_copy) */
  CUstream stage_on;      /* the stream of the staging buffer's last use */
  int stage_state;        /* 0 unused, 1 used (ev_stage recorded), -1 unavailable */
  CUstream stream;        /* private, non-blocking */
  pthread_mutex_t mu;     /* one GPU operation at a time per attachment */
};

static ss_gpu *g_list;
static pthread_mutex_t g_list_mu = PTHREAD_MUTEX_INITIALIZER;

static const ss_gpu_area *area_of(const ss_segment *seg) {
  return (const ss_gpu_area *)seg->id.gpu;
}

int ss_gpu_ordinal(const ss_gpu *g) { return g->ordinal; }
uint64_t ss_gpu_stream(const ss_gpu *g) { return (uint64_t)(uintptr_t)g->stream; }
uint64_t ss_gpu_slot_ptr(const ss_gpu *g, uint32_t slot) {
  return (uint64_t)g->base + (uint64_t)(slot % SS_GPU_SLOTS) * g->slot_stride;
}
int ss_gpu_is_owner(const ss_gpu *g) { return g->owner; }

static void destroy(ss_gpu *g) {
  /* Runs with the device context pushed, or tries to push it. */
  int pushed = ss_cuda_push(g->ordinal) == SS_OK;
  if (g->stream) cu.StreamDestroy(g->stream);
  if (g->ev_user) cu.EventDestroy(g->ev_user);
  if (g->ev_done) cu.EventDestroy(g->ev_done);
  if (g->ev_stage) cu.EventDestroy(g->ev_stage);
  if (g->stage) cu.MemFreeHost(g->stage);
  if (g->ipc_event) cu.EventDestroy(g->ipc_event);
  if (g->base) {
    if (g->owner)
      cu.MemFree(g->base);
    else
      cu.IpcCloseMemHandle(g->base);
  }
  if (pushed) ss_cuda_pop();
  pthread_mutex_destroy(&g->mu);
  free(g);
}

static int make_locals(ss_gpu *g) {
  CU_TRY(cu.StreamCreate(&g->stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  CU_TRY(cu.EventCreate(&g->ev_user, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  CU_TRY(cu.EventCreate(&g->ev_done, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  CU_TRY(cu.EventCreate(&g->ev_stage, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  return SS_OK;
}

static ss_gpu *new_gpu(int ordinal) {
  ss_gpu *g = calloc(1, sizeof *g);
  if (!g) return NULL;
  g->pid = getpid();
  g->ordinal = ordinal;
  g->refs = 1;
  pthread_mutex_init(&g->mu, NULL);
  return g;
}

/* The common end of create and attach: leave the context and, on success,
 * register the handle (so an exit can find it) and hand it out; on failure
 * destroy what was built. */
static int finish_attach(ss_gpu *g, ss_gpu **out, int rc) {
  ss_cuda_pop();
  if (rc) {
    destroy(g);
    return rc;
  }
  pthread_mutex_lock(&g_list_mu);
  g->next = g_list;
  g_list = g;
  pthread_mutex_unlock(&g_list_mu);
  *out = g;
  return SS_OK;
}

int ss_gpu_create(ss_segment *seg, ss_create_args *args, int ordinal, ss_gpu **out) {
  *out = NULL;
  if (!(args->flags & SS_FLAG_GPU)) {
    ss_cuda_set_err("ss_gpu_create needs SS_FLAG_GPU in the create flags");
    return SS_ENOTGPU;
  }
  /* ss_segment_create's limit, before any CUDA work or a read of the shape */
  if (args->ndim > SS_MAX_NDIM) return EINVAL;
  uint64_t payload = args->payload_bytes;
  if (payload == 0) {
    payload = args->itemsize;
    for (uint32_t i = 0; i < args->ndim; i++) payload *= args->shape[i];
  }
  int rc = ss_cuda_push(ordinal);
  if (rc) return rc;
  ss_gpu *g = new_gpu(ordinal);
  if (!g) {
    ss_cuda_pop();
    ss_cuda_set_err("out of host memory");
    return ENOMEM;
  }
  g->owner = 1;
  g->creator_pid = getpid();
  g->payload_bytes = payload;
  g->slot_stride = ss_round_up(payload ? payload : 1, SS_GPU_SLOT_ALIGN);
  /* One slot seqlock per device slot (a CPU mirror gets as many CPU slots). */
  args->slots = SS_GPU_SLOTS;
  ss_gpu_area area;
  memset(&area, 0, sizeof area);
  area.version = SS_GPU_AREA_VERSION;
  area.device_ordinal = ordinal;
  area.slot_count = SS_GPU_SLOTS;
  area.slot_stride = g->slot_stride;
  area.alloc_bytes = g->slot_stride * SS_GPU_SLOTS;
  area.exporter_pid = (int32_t)getpid();
  CUresult r;
  CUipcMemHandle mh;
  CUipcEventHandle eh;
  if ((rc = ss_cuda_device_uuid(ordinal, area.device_uuid))) goto fail;
  if ((r = cu.MemAlloc(&g->base, area.alloc_bytes))) {
    rc = ss_cu_fail("cuMemAlloc of the stream's device buffer", r);
    goto fail;
  }
  /* Both slots start zeroed, like a CPU stream's payload (synchronous). */
  if ((r = cu.MemsetD8(g->base, 0, area.alloc_bytes))) {
    rc = ss_cu_fail("cuMemsetD8", r);
    goto fail;
  }
  if ((r = cu.IpcGetMemHandle(&mh, g->base))) {
    rc = ss_cu_fail("cuIpcGetMemHandle", r);
    goto fail;
  }
  if ((r = cu.EventCreate(&g->ipc_event, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING))) {
    rc = ss_cu_fail("cuEventCreate(CU_EVENT_INTERPROCESS)", r);
    goto fail;
  }
  if ((r = cu.IpcGetEventHandle(&eh, g->ipc_event))) {
    rc = ss_cu_fail("cuIpcGetEventHandle", r);
    goto fail;
  }
  if ((rc = make_locals(g))) goto fail;
  memcpy(area.mem_handle, &mh, sizeof mh);
  memcpy(area.event_handle, &eh, sizeof eh);
  args->gpu_area = &area;
  rc = ss_segment_create(seg, args);
  args->gpu_area = NULL;
  if (rc) {
    ss_cuda_set_err("creating the stream's segment failed (status %d)", rc);
    goto fail;
  }
  memcpy(g->instance_id, seg->id.instance_id, 16);
  return finish_attach(g, out, SS_OK);
fail:
  return finish_attach(g, out, rc);
}

int ss_gpu_area_validate(const ss_segment *seg) {
  const ss_gpu_area *a = area_of(seg);
  uint64_t payload = seg->id.payload_bytes;
  if (!(seg->id.flags & SS_FLAG_GPU)) {
    ss_cuda_set_err("not a GPU stream");
    return SS_ENOTGPU;
  }
  /* slot_stride is bounded before the product: a stride of 2^63 would
   * make alloc_bytes 0 match (fuzz_header finding) and put slot 1 outside
   * the device buffer. */
  if (a->version != SS_GPU_AREA_VERSION || a->slot_count != SS_GPU_SLOTS ||
      a->slot_stride < payload || a->slot_stride % SS_GPU_SLOT_ALIGN ||
      a->slot_stride > UINT64_MAX / SS_GPU_SLOTS ||
      a->alloc_bytes != a->slot_stride * SS_GPU_SLOTS) {
    ss_cuda_set_err(
        "the GPU area of this stream is of an unknown version or inconsistent "
        "(version %u, %u slots)",
        a->version, a->slot_count);
    return SS_ENOTGPU;
  }
  if (seg->id.slot_count != SS_GPU_SLOTS) {
    ss_cuda_set_err("this GPU stream has %u slot seqlocks, not %u (unknown layout)",
                    seg->id.slot_count, SS_GPU_SLOTS);
    return SS_ENOTGPU;
  }
  return SS_OK;
}

/* CUDA IPC memory belongs to the exporting process, the creator: once it
 * exits the allocation is freed and using a mapping of it is undefined.
 * SS_EGPUGONE (with the message) when it has exited, else SS_OK. */
static int creator_gone(const ss_segment *seg) {
  ss_cuda_set_err(
      "the process that created this GPU stream (pid %d) has exited; its device "
      "buffer was freed with it, so the payload is gone (metadata and a CPU mirror "
      "stay readable); recreate the stream",
      (int)seg->id.creator_pid);
  return SS_EGPUGONE;
}

static int check_creator(const ss_segment *seg) {
  if (ss_proc_alive(seg->id.creator_pid, seg->id.creator_start_ticks)) return SS_OK;
  return creator_gone(seg);
}

/* The same before every operation of an importer, cheaper: the full check
 * (kill and /proc/PID/stat, about 10 us) at most every 20 ms, and between
 * them kill(pid, 0) alone, which sees a creator that has exited and been
 * reaped. A zombie or a reused pid is caught by the next full check. */
#define CREATOR_RECHECK_NS (20 * 1000000LL)
static int check_creator_often(ss_gpu *g, const ss_segment *seg) {
  int64_t now = ss_monotonic_ns();
  if (now - g->creator_checked_ns < CREATOR_RECHECK_NS) {
    if (kill((pid_t)seg->id.creator_pid, 0) != 0 && errno == ESRCH) return creator_gone(seg);
    return SS_OK;
  }
  int rc = check_creator(seg);
  if (rc == SS_OK) g->creator_checked_ns = now;
  return rc;
}

int ss_gpu_attach(const ss_segment *seg, int ordinal, ss_gpu **out) {
  *out = NULL;
  int rc = ss_cuda_init();
  if (rc) return rc;
  if ((rc = ss_gpu_area_validate(seg))) return rc;
  const ss_gpu_area *a = area_of(seg);
  const uint8_t *inst = seg->id.instance_id;
  /* CUDA's IPC handles cannot be opened across PID namespaces (the driver
   * finds the exporter by its pid), and the creator checks below are by
   * pid: a process in another namespace reads the metadata, the lock and
   * a CPU mirror, never the device buffer. */
  if (ss_pidns_match(&seg->id) == 0) {
    ss_cuda_set_err(
        "its device buffer was exported by a process in another PID namespace, and CUDA's "
        "IPC handles cannot be opened across PID namespaces; share the creator's PID "
        "namespace (docker run --pid=container:<id>, shareProcessNamespace: true) to use "
        "the device buffer; a handle without gpu_device reads the metadata and a CPU mirror");
    return SS_EPIDNS;
  }
  /* Before the cache: an attachment this process made while the creator
   * lived must not be handed out again once it is gone. */
  if ((rc = check_creator(seg))) return rc;
  pthread_mutex_lock(&g_list_mu);
  for (ss_gpu *g = g_list; g; g = g->next) {
    if (g->pid == getpid() && memcmp(g->instance_id, inst, 16) == 0 && !g->owner_released) {
      if (g->ordinal != ordinal) {
        pthread_mutex_unlock(&g_list_mu);
        ss_cuda_set_err("this process already attached the stream on CUDA device %d", g->ordinal);
        return SS_ENOTGPU;
      }
      g->refs++;
      pthread_mutex_unlock(&g_list_mu);
      *out = g;
      return SS_OK;
    }
  }
  pthread_mutex_unlock(&g_list_mu);
  uint8_t uuid[16];
  if ((rc = ss_cuda_device_uuid(ordinal, uuid))) return rc;
  if (memcmp(uuid, a->device_uuid, 16) != 0) {
    int right = ss_cuda_device_by_uuid(a->device_uuid);
    if (right < 0)
      ss_cuda_set_err(
          "the stream's device buffer is on a GPU this process cannot see "
          "(check CUDA_VISIBLE_DEVICES)");
    else
      ss_cuda_set_err("the stream's device buffer is on cuda:%d of this process, not cuda:%d",
                      right, ordinal);
    return SS_ENOTGPU;
  }
  if ((rc = ss_cuda_push(ordinal))) return rc;
  ss_gpu *g = new_gpu(ordinal);
  if (!g) {
    ss_cuda_pop();
    return ENOMEM;
  }
  memcpy(g->instance_id, inst, 16);
  g->creator_pid = seg->id.creator_pid;
  g->payload_bytes = seg->id.payload_bytes;
  g->slot_stride = a->slot_stride;
  CUipcMemHandle mh;
  CUipcEventHandle eh;
  memcpy(&mh, a->mem_handle, sizeof mh);
  memcpy(&eh, a->event_handle, sizeof eh);
  CUresult r = cu.IpcOpenMemHandle(&g->base, mh, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
  if (r) {
    g->base = 0;
    rc = ss_cu_fail("cuIpcOpenMemHandle (is the creating process still running?)", r);
    goto fail;
  }
  if ((r = cu.IpcOpenEventHandle(&g->ipc_event, eh))) {
    g->ipc_event = NULL;
    rc = ss_cu_fail("cuIpcOpenEventHandle", r);
    goto fail;
  }
  if ((rc = make_locals(g))) goto fail;
  return finish_attach(g, out, SS_OK);
fail:
  return finish_attach(g, out, rc);
}

static void unlist(ss_gpu *g) {
  for (ss_gpu **p = &g_list; *p; p = &(*p)->next)
    if (*p == g) {
      *p = g->next;
      return;
    }
}

void ss_gpu_detach(ss_gpu *g) {
  if (!g) return;
  pthread_mutex_lock(&g_list_mu);
  int gone = --g->refs <= 0 && (!g->owner || g->owner_released);
  if (gone) unlist(g);
  pthread_mutex_unlock(&g_list_mu);
  /* After fork the child must not touch the parent's CUDA objects. */
  if (gone && g->pid == getpid()) destroy(g);
}

void ss_gpu_release_owned(const uint8_t instance_id[16]) {
  ss_gpu *victim = NULL;
  pthread_mutex_lock(&g_list_mu);
  for (ss_gpu *g = g_list; g; g = g->next) {
    if (g->owner && g->pid == getpid() && memcmp(g->instance_id, instance_id, 16) == 0 &&
        !g->owner_released) {
      g->owner_released = 1;
      if (g->refs <= 0) {
        unlist(g);
        victim = g;
      }
      break;
    }
  }
  pthread_mutex_unlock(&g_list_mu);
  if (victim) destroy(victim);
}

/* ---- waiting on the host without a device synchronize ------------------ */

/* Poll event e until it completes. If the deadline passes: SS_ETIMEDOUT,
 * or SS_EPOISONED when the work belongs to the stream's last writer
 * (writer_of: the segment, else NULL for our own work) and that writer has
 * died (its device work will never complete, and the stream that waits on
 * it is stuck). */
#define GPU_POLL_SPIN_NS (2 * 1000000LL) /* then 20 us sleeps */
static int poll_event(ss_gpu *g, CUevent e, int64_t deadline, const ss_segment *writer_of) {
  int64_t start = ss_monotonic_ns();
  int64_t next_check = start + 100 * 1000000LL;
  for (;;) {
    CUresult r = cu.EventQuery(e);
    if (r == CUDA_SUCCESS) return SS_OK;
    if (r != CUDA_ERROR_NOT_READY) return ss_cu_fail("cuEventQuery", r);
    int64_t now = ss_monotonic_ns();
    if (now >= deadline) return SS_ETIMEDOUT;
    if (now >= next_check) {
      next_check = now + 100 * 1000000LL;
      /* A dead writer's record never happens: give it 1 s of grace. */
      if (writer_of && !ss_writer_alive(writer_of) && now - start > 1000 * 1000000LL) {
        g->poisoned = 1;
        ss_cuda_set_err(
            "the writer (pid %d) died before its device copy completed; this process's "
            "GPU mapping of the stream is stuck: close it and recreate the stream",
            (int)atomic_load_explicit(&writer_of->hdr->pub.writer_pid, memory_order_relaxed));
        return SS_EPOISONED;
      }
    }
    /* Spin by time, not by count: a 400 MB copy takes ~200 us on an H200,
     * and a 20 us nanosleep wakes ~70 us late (timer slack), which cost
     * the 10000x10000 round trip 4% against pyshmem's blocking wait. */
    if (now - start < GPU_POLL_SPIN_NS) {
      ss_cpu_relax();
    } else {
      struct timespec ts = {0, 20000}; /* 20 us */
      nanosleep(&ts, NULL);
    }
  }
}

/* Entry checks shared by every operation; on success the context is pushed
 * and g->mu is held. */
static int enter(ss_gpu *g, const ss_segment *seg) {
  if (g->pid != ss_self_pid()) {
    ss_cuda_set_err(
        "this GPU stream handle was inherited through fork(); CUDA cannot be used in "
        "a forked child: open the stream again in a process started with 'spawn'");
    return SS_EFORK;
  }
  if (g->poisoned) {
    ss_cuda_set_err(
        "this process's GPU mapping of the stream is stuck behind device work of a "
        "writer that died; close the handle and recreate the stream");
    return SS_EPOISONED;
  }
  int rc;
  if (!g->owner && (rc = check_creator_often(g, seg))) return rc;
  rc = ss_cuda_push(g->ordinal);
  if (rc) return rc;
  pthread_mutex_lock(&g->mu);
  return SS_OK;
}

static void leave(ss_gpu *g) {
  pthread_mutex_unlock(&g->mu);
  ss_cuda_pop();
}

/* Make our private stream wait for work queued on the caller's stream. */
static int after_user(ss_gpu *g, uint64_t user_stream) {
  if (!user_stream) return SS_OK;
  CU_TRY(cu.EventRecord(g->ev_user, (CUstream)(uintptr_t)user_stream),
         "cuEventRecord(user stream)");
  CU_TRY(cu.StreamWaitEvent(g->stream, g->ev_user, 0), "cuStreamWaitEvent(user stream)");
  return SS_OK;
}

/* The stream a copy is queued on: the caller's when it named one (ordered
 * after the work that made the source or allocated the destination, and
 * the caller's later work ordered after the copy, with no event of ours),
 * else the private one. */
static CUstream copy_stream(const ss_gpu *g, uint64_t user_stream) {
  return user_stream ? (CUstream)(uintptr_t)user_stream : g->stream;
}

/* Wait for the written event's latest record before a copy on `on`, the
 * one rule of writers (SYNC POINT (gpu w1)) and readers (gpu r1). Complete:
 * nothing to order. Pending and this process's own (the last publication's
 * writer is us): `on` waits for it on the device, inside our own context.
 * Another process's: poll it on the host, so that no stream of ours or the
 * caller's waits on the device for work of a process that may die with it
 * pending (and the GPU never schedules a wait across two contexts). */
static int after_written(ss_gpu *g, const ss_segment *seg, CUstream on, int64_t deadline) {
  CUresult r = cu.EventQuery(g->ipc_event);
  if (r == CUDA_SUCCESS) return SS_OK;
  if (r != CUDA_ERROR_NOT_READY) return ss_cu_fail("cuEventQuery(IPC event)", r);
  if (atomic_load_explicit(&seg->hdr->pub.writer_pid, memory_order_acquire) == ss_self_pid()) {
    CU_TRY(cu.StreamWaitEvent(on, g->ipc_event, 0), "cuStreamWaitEvent(IPC event)");
    return SS_OK;
  }
  return poll_event(g, g->ipc_event, deadline, seg);
}

/* Payloads up to this many bytes move between two device buffers through
 * the attachment's pinned staging buffer (device to host, then host to
 * device): copy-engine work only. A device-to-device copy, whichever driver
 * call queues it, is compute-engine work, and when two processes take turns
 * at the compute engine each hand-over between their contexts costs about
 * 150 us on an H200; copy engines hand over in a few (docs/gpu.md,
 * "Staging small payloads"). Larger payloads keep
 * the device copy, where bandwidth wins. SHMSTREAM_GPU_STAGE_MAX (bytes)
 * overrides the limit; 0 never stages. */
#define SS_GPU_STAGE_MAX_DEFAULT ((int64_t)256 << 10)

static uint64_t stage_max(void) {
  static _Atomic int64_t cached = -1; /* read the environment once */
  int64_t v = atomic_load_explicit(&cached, memory_order_relaxed);
  if (v >= 0) return (uint64_t)v;
  const char *env = getenv("SHMSTREAM_GPU_STAGE_MAX");
  char *end = NULL;
  long long x = env && *env ? strtoll(env, &end, 10) : -1;
  v = (end && *end == '\0' && x >= 0) ? (int64_t)x : SS_GPU_STAGE_MAX_DEFAULT;
  atomic_store_explicit(&cached, v, memory_order_relaxed);
  return (uint64_t)v;
}

/* Queue a copy of n bytes from device buffer src to device buffer dst on
 * `on` (g->mu held). Staged when n <= stage_max() and the pinned buffer
 * could be had (else the device copy, as for large payloads). The staging
 * buffer is reused only after its last copy out: stream order covers the
 * same stream, a local event another stream (a write from a device source
 * on its own stream returns before its copy ran). */
static CUresult device_copy(ss_gpu *g, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream on) {
  if (n > stage_max() || g->stage_state < 0) return cu.MemcpyDtoDAsync(dst, src, n, on);
  CUresult r;
  if (!g->stage && cu.MemHostAlloc(&g->stage, n, CU_MEMHOSTALLOC_PORTABLE)) {
    g->stage = NULL;
    g->stage_state = -1; /* pinned memory refused: never ask again */
    return cu.MemcpyDtoDAsync(dst, src, n, on);
  }
  if (g->stage_state && g->stage_on != on && (r = cu.StreamWaitEvent(on, g->ev_stage, 0))) return r;
  if ((r = cu.MemcpyDtoHAsync(g->stage, src, n, on))) return r;
  if ((r = cu.MemcpyHtoDAsync(dst, g->stage, n, on))) return r;
  g->stage_on = on;
  g->stage_state = 1;
  return cu.EventRecord(g->ev_stage, on);
}

/* After the device copy into `dst_slot` was queued: record the IPC event,
 * refresh the CPU mirror, publish. */
static int finish_write(ss_gpu *g, ss_segment *seg, CUstream on, uint32_t dst_slot,
                        const void *host_src, const ss_publish_meta *meta, int64_t deadline) {
  /* SYNC POINT (gpu w2): the IPC event is recorded after the copy (on the
   * same stream) and before the even seq (ss_write_end, release): a reader
   * that sees the new count waits for this record or a later one. */
  CUresult r = cu.EventRecord(g->ipc_event, on);
  if (r) {
    ss_write_abort(seg);
    return ss_cu_fail("cuEventRecord(IPC event)", r);
  }
  if (seg->id.flags & SS_FLAG_CPU_MIRROR) {
    uint8_t *mirror = ss_slot(seg, dst_slot); /* CPU slot i mirrors device slot i */
    if (host_src) {
      memcpy(mirror, host_src, g->payload_bytes);
    } else if (g->payload_bytes) {
      r = cu.MemcpyDtoHAsync(mirror, ss_gpu_slot_ptr(g, dst_slot), g->payload_bytes, on);
      if (r == CUDA_SUCCESS) r = cu.EventRecord(g->ev_done, on);
      if (r) {
        ss_write_abort(seg);
        return ss_cu_fail("refreshing the CPU mirror (cuMemcpyDtoHAsync)", r);
      }
      int rc = poll_event(g, g->ev_done, deadline, NULL);
      if (rc) {
        ss_write_abort(seg);
        return rc;
      }
    }
  }
  ss_write_end_ex(seg, meta);
  return SS_OK;
}

int ss_gpu_write_locked(ss_gpu *g, ss_segment *seg, uint64_t src, int src_kind,
                        uint64_t user_stream, const uint64_t *frame_id, int64_t timeout_ns) {
  ss_publish_meta meta = {frame_id, 0, 0};
  return ss_gpu_write_locked_ex(g, seg, src, src_kind, user_stream, &meta, timeout_ns);
}

int ss_gpu_write_locked_ex(ss_gpu *g, ss_segment *seg, uint64_t src, int src_kind,
                           uint64_t user_stream, const ss_publish_meta *meta, int64_t timeout_ns) {
  int rc = enter(g, seg);
  if (rc) return rc;
  int64_t deadline = ss_deadline_ns(timeout_ns);
  size_t n = g->payload_bytes;
  int device = src_kind == SS_GPU_SRC_DEVICE;
  CUstream on = copy_stream(g, device ? user_stream : 0);
  if ((rc = after_written(g, seg, on, deadline))) goto out;
  uint32_t slot = ss_write_begin(seg);
  CUdeviceptr dst = ss_gpu_slot_ptr(g, slot);
  CUresult r = CUDA_SUCCESS;
  if (n) {
    if (device)
      r = device_copy(g, dst, (CUdeviceptr)src, n, on);
    else
      r = cu.MemcpyHtoDAsync(dst, (const void *)(uintptr_t)src, n, on);
  }
  if (r) {
    ss_write_abort(seg);
    rc = ss_cu_fail("copying the payload to the device", r);
    goto out;
  }
  const void *host = device ? NULL : (const void *)(uintptr_t)src;
  if ((rc = finish_write(g, seg, on, slot, host, meta, deadline))) goto out;
  /* The caller may reuse its source once this returns. A device source on
   * its stream is ordered already (the copy is on that stream); pageable
   * host memory is staged by the driver before cuMemcpyHtoDAsync returns;
   * pinned memory and a device source without a stream wait here. */
  if (on == g->stream && src_kind != SS_GPU_SRC_HOST) {
    if ((r = cu.EventRecord(g->ev_done, g->stream)))
      rc = ss_cu_fail("cuEventRecord", r);
    else
      rc = poll_event(g, g->ev_done, INT64_MAX, NULL);
  }
out:
  leave(g);
  return rc;
}

int ss_gpu_clear_locked(ss_gpu *g, ss_segment *seg, int64_t timeout_ns) {
  int rc = enter(g, seg);
  if (rc) return rc;
  int64_t deadline = ss_deadline_ns(timeout_ns);
  if ((rc = after_written(g, seg, g->stream, deadline))) goto out;
  uint32_t slot = ss_write_begin(seg);
  CUresult r = g->payload_bytes
                   ? cu.MemsetD8Async(ss_gpu_slot_ptr(g, slot), 0, g->payload_bytes, g->stream)
                   : CUDA_SUCCESS;
  if (r) {
    ss_write_abort(seg);
    rc = ss_cu_fail("cuMemsetD8Async", r);
    goto out;
  }
  if (seg->id.flags & SS_FLAG_CPU_MIRROR) memset(ss_slot(seg, slot), 0, g->payload_bytes);
  /* The mirror is already zero: finish without a device-to-host copy. */
  if ((r = cu.EventRecord(g->ipc_event, g->stream))) {
    ss_write_abort(seg);
    rc = ss_cu_fail("cuEventRecord(IPC event)", r);
    goto out;
  }
  ss_write_end(seg, NULL);
out:
  leave(g);
  return rc;
}

/* Wait for the writers, queue "copy slot, mark done" on `on` and wait for
 * it on the host. */
static int copy_slot(ss_gpu *g, const ss_segment *seg, CUstream on, uint32_t slot, uint64_t dst,
                     int64_t deadline) {
  CUresult r;
  /* SYNC POINT (gpu r1): the written event's latest record is at least the
   * one of the publication whose count we read (after_written). */
  int rc = after_written(g, seg, on, deadline);
  if (rc) return rc;
  if (g->payload_bytes &&
      (r = device_copy(g, (CUdeviceptr)dst, ss_gpu_slot_ptr(g, slot), g->payload_bytes, on)))
    return ss_cu_fail("copying the payload from the stream's device buffer", r);
  if ((r = cu.EventRecord(g->ev_done, on))) return ss_cu_fail("cuEventRecord", r);
  return poll_event(g, g->ev_done, deadline, seg);
}

typedef struct gpu_dst {
  ss_gpu *g;
  CUstream on;
  uint64_t dst;
  int64_t deadline;
} gpu_dst;

/* The copy step of the one snapshot routine (snapshot.c), on the device.
 * SYNC POINT (gpu r2): it returns once our copy has completed (the host saw
 * its event); the snapshot then re-checks the slot's seq: a write into this
 * device slot sets it odd (ss_write_begin, release fence) before it queues
 * its copy, so a copy that could have met it finds the seq changed. */
static int copy_to_device(void *ctx, ss_segment *seg, uint32_t slot) {
  gpu_dst *d = (gpu_dst *)ctx;
  return copy_slot(d->g, seg, d->on, slot, d->dst, d->deadline);
}

int ss_gpu_read(ss_gpu *g, ss_segment *seg, uint64_t dst, uint64_t user_stream, int64_t timeout_ns,
                int holds_lock, ss_pubinfo *info) {
  int rc = enter(g, seg);
  if (rc) return rc;
  /* The copy goes on the caller's stream, after the work queued there on
   * the destination (or on the private stream when there is none). */
  gpu_dst d = {g, copy_stream(g, user_stream), dst, ss_deadline_ns(timeout_ns)};
  ss_snapshot_args a = {copy_to_device, &d, holds_lock, 0};
  ss_frame frame;
  /* SYNC POINT (gpu r0): the snapshot takes the metadata, the published
   * slot and its seq from one publish-seqlock window (s1) before any
   * device work. */
  rc = ss_snapshot(seg, timeout_ns, &a, info, &frame);
  leave(g);
  return rc;
}

int ss_gpu_view_begin(ss_gpu *g, ss_segment *seg, uint64_t user_stream, int64_t timeout_ns,
                      uint64_t *slot_ptr) {
  int rc = enter(g, seg);
  if (rc) return rc;
  int64_t deadline = ss_deadline_ns(timeout_ns);
  if ((rc = after_written(g, seg, g->stream, deadline))) goto out;
  if ((rc = after_user(g, user_stream))) goto out;
  uint32_t published = ss_published_slot(seg);
  uint32_t slot = ss_write_begin(seg);
  CUresult r = CUDA_SUCCESS;
  /* The view starts as the current payload, as a CPU write_view does. */
  if (g->payload_bytes)
    r = cu.MemcpyDtoDAsync(ss_gpu_slot_ptr(g, slot), ss_gpu_slot_ptr(g, published),
                           g->payload_bytes, g->stream);
  if (r == CUDA_SUCCESS) r = cu.EventRecord(g->ev_done, g->stream);
  if (r == CUDA_SUCCESS && user_stream)
    r = cu.StreamWaitEvent((CUstream)(uintptr_t)user_stream, g->ev_done, 0);
  if (r) {
    ss_write_abort(seg);
    rc = ss_cu_fail("preparing the in-place write slot", r);
    goto out;
  }
  if (!user_stream && (rc = poll_event(g, g->ev_done, deadline, NULL))) {
    ss_write_abort(seg);
    goto out;
  }
  *slot_ptr = ss_gpu_slot_ptr(g, slot);
out:
  leave(g);
  return rc;
}

int ss_gpu_view_commit(ss_gpu *g, ss_segment *seg, uint64_t user_stream, const uint64_t *frame_id) {
  ss_publish_meta meta = {frame_id, 0, 0};
  int rc = enter(g, seg);
  if (rc) {
    ss_write_abort(seg);
    return rc;
  }
  if ((rc = after_user(g, user_stream))) {
    ss_write_abort(seg);
    goto out;
  }
  rc = finish_write(g, seg, g->stream, ss_writing_slot(seg), NULL, &meta, INT64_MAX);
out:
  leave(g);
  return rc;
}

void ss_gpu_view_abort(ss_gpu *g, ss_segment *seg) {
  (void)g;
  ss_write_abort(seg);
}
