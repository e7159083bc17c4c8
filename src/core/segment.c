/* Segments: create, open, validate, close, unlink. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core_helpers.h"

/* How long open() waits for a creator that has made the file but not yet
 * stored the magic. Creation takes microseconds; this is generous. */
#define SS_INIT_WAIT_NS (2 * SS_NS_PER_S)

uint64_t ss_identity_checksum(const ss_identity *id) {
  /* magic is hashed as zero: the creator stores it last. */
  uint64_t h = ss_fnv1a64((const uint8_t *)id + 8, offsetof(ss_identity, checksum) - 8,
                          SS_FNV_OFFSET);
  return h;
}

/* Bytes of a history stream's slot records (0 without history). */
static uint64_t records_bytes(uint32_t history, uint32_t slot_count) {
  return history ? ss_round_up((uint64_t)SS_SLOT_RECORD_BYTES * slot_count, SS_PAYLOAD_ALIGN) : 0;
}

uint64_t ss_segment_bytes(uint64_t payload, uint32_t slots, uint32_t history) {
  if (history) slots = history + 1;
  uint64_t stride = ss_round_up(payload, SS_PAYLOAD_ALIGN);
  if (stride < payload || (stride && slots > (UINT64_MAX - SS_HEADER_BYTES) / 2 / stride)) return 0;
  return SS_HEADER_BYTES + stride * slots + records_bytes(history, slots);
}

uint32_t ss_layout_version(uint32_t kind, uint32_t flags) {
  switch (kind) {
    case SS_KIND_STREAM: return SS_LAYOUT_VERSION_STREAM;
    case SS_KIND_CHANNEL: return SS_LAYOUT_VERSION_CHANNEL;
    case SS_KIND_ARRAY:
      return flags & SS_FLAG_LOADER_POOL ? SS_LAYOUT_VERSION_LOADER_POOL : SS_LAYOUT_VERSION_ARRAY;
    default: return 0;
  }
}

/* A history stream: a CPU stream, history + 1 slots (docs/ABI.md,
 * "History"). */
static int history_valid(const ss_identity *id) {
  return id->history <= SS_MAX_HISTORY && id->kind == SS_KIND_STREAM &&
         !(id->flags & SS_FLAG_GPU) && id->slot_count == id->history + 1;
}

/* Checks a private copy of an identity: the copy cannot change under the
 * checks, nor between the checks and its use. */
static int identity_validate(const ss_identity *id, size_t file_bytes) {
  uint64_t magic = atomic_load_explicit(&id->magic, memory_order_relaxed);
  if (magic == 0) return SS_EBUSY;
  if (magic != SS_MAGIC) return SS_ECORRUPT;
  /* The kind picks the one version it may have: any other is a layout
   * this build does not read (docs/ABI.md, "Layout versions"). */
  uint32_t wanted = ss_layout_version(id->kind, id->flags);
  if (wanted == 0) return SS_ECORRUPT;
  if (id->layout_version != wanted) return SS_EVERSION;
  if (id->checksum != ss_identity_checksum(id)) return SS_ECORRUPT;
  if (id->header_bytes != SS_HEADER_BYTES || id->payload_offset != SS_HEADER_BYTES)
    return SS_ECORRUPT;
  if (id->history ? !history_valid(id) : id->slot_count > SS_MAX_SLOTS) return SS_ECORRUPT;
  if (id->ndim > SS_MAX_NDIM || id->slot_count == 0 || id->name_len == 0 ||
      id->name_len > SS_MAX_NAME_BYTES || id->name[id->name_len] != '\0' ||
      id->dtype_len > SS_MAX_DTYPE_BYTES || id->dtype[id->dtype_len] != '\0')
    return SS_ECORRUPT;
  /* A GPU stream without CPU mirror has no CPU slot: stride 0. */
  int slotless = (id->flags & SS_FLAG_GPU) && !(id->flags & SS_FLAG_CPU_MIRROR) &&
                 id->slot_stride == 0;
  if (id->slot_stride < id->payload_bytes && !slotless) return SS_ECORRUPT;
  /* Every creator rounds the stride up to a page: slots, and a history
   * stream's slot records after them, are then aligned for their atomics
   * (fuzz_open finding: a stride of 3 put the records' seqlocks off 8). */
  if (id->slot_stride % SS_PAYLOAD_ALIGN) return SS_ECORRUPT;
  if (id->slot_count > (UINT64_MAX - SS_HEADER_BYTES) / (id->slot_stride ? id->slot_stride : 1))
    return SS_ECORRUPT;
  uint64_t need = SS_HEADER_BYTES + id->slot_stride * id->slot_count;
  if (need > UINT64_MAX - records_bytes(id->history, id->slot_count)) return SS_ECORRUPT;
  need += records_bytes(id->history, id->slot_count);
  if (file_bytes < need) return SS_ECORRUPT;
  if (id->kind == SS_KIND_STREAM || id->kind == SS_KIND_ARRAY) {
    /* product(shape) * itemsize must equal payload_bytes, without overflow */
    uint64_t n = id->itemsize;
    for (uint32_t i = 0; i < id->ndim; i++) {
      if (id->shape[i] && n > UINT64_MAX / id->shape[i]) return SS_ECORRUPT;
      n *= id->shape[i];
    }
    if (n != id->payload_bytes) return SS_ECORRUPT;
  }
  return SS_OK;
}

int ss_identity_snapshot(ss_identity *out, const ss_header *hdr, size_t file_bytes) {
  /* SYNC POINT (m): acquire pairs with the creator's release store of the
   * magic: the bytes copied after it are the initialised identity. */
  uint64_t magic = atomic_load_explicit(&hdr->id.magic, memory_order_acquire);
  memcpy((uint8_t *)out + sizeof magic, (const uint8_t *)&hdr->id + sizeof magic,
         sizeof *out - sizeof magic);
  atomic_store_explicit(&out->magic, magic, memory_order_relaxed);
  return identity_validate(out, file_bytes);
}

const char *ss_identity_changed(const ss_segment *seg) {
  /* The fields that size or locate memory, as a writer would rely on them
   * if it trusted the shared copy. A few loads of a line nobody writes. */
  const volatile ss_identity *now = &seg->hdr->id;
  const ss_identity *was = &seg->id;
  if (now->magic != was->magic) return "magic";
  if (now->layout_version != was->layout_version) return "layout_version";
  if (now->header_bytes != was->header_bytes) return "header_bytes";
  if (now->payload_offset != was->payload_offset) return "payload_offset";
  if (now->payload_bytes != was->payload_bytes) return "payload_bytes";
  if (now->slot_stride != was->slot_stride) return "slot_stride";
  if (now->slot_count != was->slot_count) return "slot_count";
  if (now->history != was->history) return "history";
  if (now->itemsize != was->itemsize) return "itemsize";
  if (now->ndim != was->ndim) return "ndim";
  for (uint32_t i = 0; i < SS_MAX_NDIM; i++)
    if (now->shape[i] != was->shape[i]) return "shape";
  if (now->kind != was->kind) return "kind";
  if (now->flags != was->flags) return "flags";
  return NULL;
}

int ss_header_validate(const ss_header *hdr, size_t file_bytes) {
  ss_identity copy;
  return ss_identity_snapshot(&copy, hdr, file_bytes);
}

/* Where each slot's seqlock word lives (ss_slot_seq): the header's slot
 * line, or the records after the slots of a history stream. */
static void bind_slots(ss_segment *seg) {
  const ss_identity *id = &seg->id;
  seg->history = id->history;
  if (id->history) {
    seg->slot_seq_off = (size_t)(id->payload_offset + id->slot_stride * id->slot_count);
    seg->slot_seq_step = SS_SLOT_RECORD_BYTES / 8;
  } else {
    seg->slot_seq_off = offsetof(ss_header, stream.slots.seq);
    seg->slot_seq_step = 1;
  }
}

static void fill_random(uint8_t *out, size_t n) {
  if (ss_plat_random(out, n) == 0) return;
  /* no entropy source: time and pid still make a fresh generation */
  uint64_t t = ss_realtime_ns() ^ ((uint64_t)getpid() << 32);
  for (size_t i = 0; i < n; i++) out[i] = (uint8_t)(t >> (8 * (i % 8)));
}

/* shm_open, tried once more after raising the fd limit when the process
 * has no fd left: stream handles and channel ends keep theirs (leases), so
 * a process with many meets the soft limit (ss_more_fds). */
static int shm_open_room(const char *segname, int flags, mode_t mode) {
  int fd = shm_open(segname, flags, mode);
  if (fd < 0 && errno == EMFILE && ss_more_fds()) fd = shm_open(segname, flags, mode);
  return fd;
}

int ss_segment_create(ss_segment *seg, const ss_create_args *a) {
  memset(seg, 0, sizeof *seg);
  size_t name_len = strlen(a->name);
  int rc = ss_segment_name(a->name, name_len, seg->segname);
  if (rc) return rc;
  size_t dtype_len = strlen(a->dtype);
  if (dtype_len > SS_MAX_DTYPE_BYTES || a->ndim > SS_MAX_NDIM) return EINVAL;
  uint64_t payload = a->payload_bytes;
  if (payload == 0 && a->kind != SS_KIND_CHANNEL) {
    payload = a->itemsize;
    for (uint32_t i = 0; i < a->ndim; i++) payload *= a->shape[i];
  }
  uint32_t slots = a->slots ? a->slots : SS_DEFAULT_SLOTS;
  if (a->history) {
    /* The slots are the ring: the N newest publications and the one being
     * written (docs/ABI.md, "History"). */
    if (a->history > SS_MAX_HISTORY || a->kind != SS_KIND_STREAM || (a->flags & SS_FLAG_GPU))
      return EINVAL;
    slots = a->history + 1;
  } else if (slots > SS_MAX_SLOTS) {
    return EINVAL;
  }
  /* A performance-mode GPU stream has no CPU slot: its payload is on the device. */
  uint64_t cpu_payload = (a->flags & SS_FLAG_GPU) && !(a->flags & SS_FLAG_CPU_MIRROR) ? 0 : payload;
  size_t stride = ss_round_up(cpu_payload, SS_PAYLOAD_ALIGN);
  uint64_t bytes = ss_segment_bytes(cpu_payload, slots, a->history);
  if (bytes == 0 || bytes > SIZE_MAX) return ENOMEM;
  size_t total = (size_t)bytes;

  int fd = shm_open_room(seg->segname, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC,
                         a->mode ? a->mode : 0600);
  if (fd < 0) return errno;
  /* shm_open applies the umask; the caller's mode is what they asked for. */
  fchmod(fd, a->mode ? a->mode : 0600);
  ss_owner_record(fd, seg);
  /* Reserve every page now: a full /dev/shm is ENOSPC here, not a SIGBUS
   * on some later write. */
  if (ftruncate(fd, (off_t)total) != 0 || (rc = ss_plat_reserve(fd, total)) != 0) {
    int err = rc ? rc : errno;
    close(fd);
    shm_unlink(seg->segname);
    return err;
  }
  void *base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED | SS_MAP_POPULATE, fd, 0);
  int err = base == MAP_FAILED ? errno : 0;
  /* A channel judges its ends by leases, a stream (CPU or GPU) its lock,
   * sleepers and creator: the handle keeps the fd and holds its lease from
   * here (docs/ABI.md, "Liveness leases", "Stream lock by lease"), and so
   * does a loader pool's root ("Loader pool by lease"). A GPU stream's
   * device buffer is mapped only in its creator's PID namespace
   * (ss_gpu_attach), where the creator's pid still tells whether the
   * process that exported it runs. */
  int lease_locked = ss_kind_lease_locked(a->kind, a->flags);
  int leases = ss_kind_uses_leases(a->kind, a->flags);
  if (base != MAP_FAILED && leases) {
    err = ss_lease_take(seg, fd, 1);
    if (err) munmap(base, total);
  } else {
    close(fd);
  }
  if (base == MAP_FAILED || err) {
    shm_unlink(seg->segname);
    return err;
  }
  ss_header *h = (ss_header *)base;
  ss_identity *id = &h->id;
  id->layout_version = ss_layout_version(a->kind, a->flags);
  id->kind = a->kind;
  id->header_bytes = SS_HEADER_BYTES;
  id->flags = a->flags;
  id->payload_offset = SS_HEADER_BYTES;
  id->payload_bytes = payload;
  id->slot_stride = stride;
  id->slot_count = slots;
  id->ndim = a->ndim;
  for (uint32_t i = 0; i < a->ndim; i++) id->shape[i] = a->shape[i];
  id->itemsize = a->itemsize;
  id->creator_pid = ss_self_pid();
  id->mode = a->mode ? a->mode : 0600;
  id->creator_start_ticks = ss_self_start_ticks();
  fill_random(id->instance_id, sizeof id->instance_id);
  id->created_ns = ss_realtime_ns();
  id->name_len = (uint32_t)name_len;
  memcpy(id->name, a->name, name_len);
  id->dtype_len = (uint32_t)dtype_len;
  memcpy(id->dtype, a->dtype, dtype_len);
  if (a->gpu_area) memcpy(id->gpu, a->gpu_area, sizeof id->gpu);
  id->history = a->history; /* its slot records are zero: no publication yet */
  ss_pidns_record(id);
  if (lease_locked) id->creator_lease = seg->lease; /* taken above (l1), before it is stored */
  id->checksum = ss_identity_checksum(id);
  /* SYNC POINT (m): the magic is stored last with release order, so an opener
   * that acquire-loads a valid magic sees the whole initialised header. */
  atomic_store_explicit(&id->magic, SS_MAGIC, memory_order_release);

  memcpy(&seg->id, id, sizeof seg->id);
  seg->hdr = h;
  seg->base = (uint8_t *)base;
  seg->map_bytes = total;
  bind_slots(seg);
  ss_guard_attach(seg);
  return SS_OK;
}

static int map_validated(ss_segment *seg, int fd, int writable, size_t limit, int64_t wait_ns) {
  int64_t deadline = ss_monotonic_ns() + wait_ns;
  for (;;) {
    struct stat st;
    if (fstat(fd, &st) != 0) return errno;
    size_t size = (size_t)st.st_size;
    if (size >= SS_HEADER_BYTES) {
      size_t len = limit && limit < size ? limit : size;
      int prot = PROT_READ | (writable ? PROT_WRITE : 0);
      void *base = mmap(NULL, len, prot, MAP_SHARED, fd, 0);
      if (base == MAP_FAILED) return errno;
      int rc = ss_identity_snapshot(&seg->id, (ss_header *)base, size);
      if (rc == SS_OK && len < size && seg->id.history) {
        /* A history stream's slot seqlocks are in its records, at the end
         * of the file: a header-only peek maps it all (lazily: no page is
         * touched), so that the write-in-flight test can read them. */
        munmap(base, len);
        len = size;
        base = mmap(NULL, len, prot, MAP_SHARED, fd, 0);
        if (base == MAP_FAILED) return errno;
        rc = ss_identity_snapshot(&seg->id, (ss_header *)base, size);
      }
      if (rc == SS_OK) {
        seg->base = (uint8_t *)base;
        seg->hdr = (ss_header *)base;
        seg->map_bytes = len;
        bind_slots(seg);
        ss_guard_attach(seg);
        return SS_OK;
      }
      munmap(base, len);
      if (rc != SS_EBUSY) return rc;
    }
    /* The creator has the name but has not published the header yet. */
    if (ss_monotonic_ns() > deadline) return size < SS_HEADER_BYTES ? SS_ECORRUPT : SS_EBUSY;
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
  }
}

int ss_segment_open(ss_segment *seg, const char *name, size_t len, uint32_t expected_kind,
                    int readonly) {
  return ss_segment_open_ex(seg, name, len, expected_kind, readonly, NULL);
}

/* Open a name in /dev/shm. Anyone can put anything there, so: never block
 * (a FIFO opened for reading would wait for a writer for ever), never
 * follow a link (ELOOP), and refuse what is not a regular file (ENODEV:
 * FIFO, directory, socket, device). The type is checked on the descriptor,
 * not by a stat of the name before the open, which the name could be
 * swapped under. flags: O_RDONLY or O_RDWR. Returns the fd, or -errno. */
int ss_open_regular(const char *segname, int flags) {
  int fd = shm_open_room(segname, flags | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0);
  if (fd < 0) return -errno;
  struct stat st;
  int err = fstat(fd, &st) != 0 ? errno : !S_ISREG(st.st_mode) ? ENODEV : 0;
  if (err) {
    close(fd);
    return -err;
  }
  return fd;
}

int ss_segment_open_ex(ss_segment *seg, const char *name, size_t len, uint32_t expected_kind,
                       int readonly, const ss_open_opts *opts) {
  memset(seg, 0, sizeof *seg);
  int rc = ss_segment_name(name, len, seg->segname);
  if (rc) return rc;
  int writable = 1;
  int fd = ss_open_regular(seg->segname, O_RDWR);
  if (fd == -EACCES && readonly) {
    /* Someone else's segment shared read-only with us: read without the
     * lock fallback (SS_ACCESS_FOREIGN). */
    writable = 0;
    fd = ss_open_regular(seg->segname, O_RDONLY);
  }
  if (fd < 0) return -fd;
  if ((rc = ss_owner_check(fd, seg, opts)) != SS_OK) return close(fd), rc;
  rc = map_validated(seg, fd, writable, 0, SS_INIT_WAIT_NS);
  if (rc == SS_OK && ss_uses_leases(&seg->id)) {
    /* Liveness by lease: the handle keeps the fd and holds a lease (l1). */
    if ((rc = ss_lease_take(seg, fd, 1)) != SS_OK) ss_segment_close(seg);
  } else {
    close(fd);
  }
  if (rc) return rc;
  const ss_identity *id = &seg->id;
  if (id->name_len != len || memcmp(id->name, name, len) != 0) {
    /* Two names hashed alike: refuse rather than hand over another stream. */
    ss_segment_close(seg);
    return SS_ECORRUPT;
  }
  if (expected_kind && id->kind != expected_kind) {
    ss_segment_close(seg);
    return SS_EKIND;
  }
  seg->readonly = !writable ? SS_ACCESS_FOREIGN : readonly ? SS_ACCESS_READONLY : SS_ACCESS_WRITE;
  return SS_OK;
}

int ss_segment_peek(ss_segment *seg, const char *segname) {
  memset(seg, 0, sizeof *seg);
  if (strlen(segname) >= SS_SEGMENT_NAME_MAX) return SS_ENAME;
  strcpy(seg->segname, segname);
  int fd = ss_open_regular(segname, O_RDONLY);
  if (fd < 0) return -fd;
  ss_owner_record(fd, seg);
  /* No waiting for an unfinished creator: listing must not stall on one. */
  int rc = map_validated(seg, fd, 0, SS_HEADER_BYTES, 0);
  /* A lease segment's words are tested through its file: keep the fd,
   * holding no lease of our own (stat's "alive"). */
  if (rc == SS_OK && ss_uses_leases(&seg->id)) {
    if ((rc = ss_lease_take(seg, fd, 0)) != SS_OK) ss_segment_close(seg);
  } else {
    close(fd);
  }
  seg->readonly = SS_ACCESS_FOREIGN;
  return rc;
}

void ss_segment_unmap(ss_segment *seg) {
  ss_guard_detach(seg);
  if (seg->base) munmap(seg->base, seg->map_bytes);
  seg->base = NULL;
  seg->hdr = NULL;
  seg->map_bytes = 0;
}

void ss_segment_close(ss_segment *seg) {
  ss_segment_unmap(seg);
  ss_lease_drop(seg);
}

int ss_segment_unlink_segname(const char *segname) {
  return shm_unlink(segname) == 0 ? SS_OK : errno;
}

int ss_segment_unlink(const char *name, size_t len) {
  char segname[SS_SEGMENT_NAME_MAX];
  int rc = ss_segment_name(name, len, segname);
  if (rc) return rc;
  return ss_segment_unlink_segname(segname);
}

uint8_t *ss_slot(const ss_segment *seg, uint32_t slot) {
  /* Callers pass a slot below id.slot_count (reduced modulo it when it came
   * from shared memory): with the private geometry that stays inside the
   * mapping validated at open. */
  return seg->base + seg->id.payload_offset + (size_t)slot * seg->id.slot_stride;
}

/* ---- the opaque handle's allocation and accessors (include/shmstream.h) -- */

ss_segment *ss_segment_new(void) { return calloc(1, sizeof(ss_segment)); }

void ss_segment_free(ss_segment *seg) {
  if (!seg) return;
  if (seg->base) ss_segment_close(seg);
  free(seg);
}

const ss_identity *ss_segment_identity(const ss_segment *seg) { return &seg->id; }
const char *ss_segment_user_name(const ss_segment *seg) { return seg->id.name; }
const char *ss_segment_dtype(const ss_segment *seg) { return seg->id.dtype; }
uint32_t ss_segment_ndim(const ss_segment *seg) { return seg->id.ndim; }
const uint64_t *ss_segment_shape(const ss_segment *seg) { return seg->id.shape; }
uint64_t ss_segment_payload_bytes(const ss_segment *seg) { return seg->id.payload_bytes; }
uint32_t ss_segment_slot_count(const ss_segment *seg) { return seg->id.slot_count; }
const char *ss_segment_segname(const ss_segment *seg) { return seg->segname; }
uint32_t ss_segment_owner_uid(const ss_segment *seg) { return seg->owner_uid; }

int ss_segment_access(const ss_segment *seg) { return (int)seg->readonly; }
uint32_t ss_segment_file_mode(const ss_segment *seg) { return seg->file_mode; }
int ss_segment_mapped(const ss_segment *seg) { return seg->hdr != NULL; }
uint32_t ss_segment_state(const ss_segment *seg) {
  return atomic_load_explicit(&seg->hdr->pub.state, memory_order_relaxed);
}

void ss_segment_words_get(const ss_segment *seg, ss_segment_words *out) {
  const ss_header *h = seg->hdr;
  out->seq = atomic_load_explicit(&h->pub.seq, memory_order_acquire);
  out->count = atomic_load_explicit(&h->pub.count, memory_order_acquire);
  out->frame_id = atomic_load_explicit(&h->pub.frame_id, memory_order_relaxed);
  out->write_time_ns = atomic_load_explicit(&h->pub.write_time_ns, memory_order_relaxed);
  out->aborted = atomic_load_explicit(&h->pub.aborted, memory_order_relaxed);
  out->writer_start_ticks = atomic_load_explicit(&h->pub.writer_start_ticks, memory_order_relaxed);
  out->acquisitions = atomic_load_explicit(&h->lock.acquisitions, memory_order_relaxed);
  out->state = atomic_load_explicit(&h->pub.state, memory_order_relaxed);
  out->writer_pid = atomic_load_explicit(&h->pub.writer_pid, memory_order_relaxed);
  out->owner_pid = atomic_load_explicit(&h->lock.owner_pid, memory_order_relaxed);
  out->owner_tid = atomic_load_explicit(&h->lock.owner_tid, memory_order_relaxed);
  out->waiters = (uint32_t)__builtin_popcountll(
                     atomic_load_explicit(&h->notify.sleepers, memory_order_relaxed)) +
                 atomic_load_explicit(&h->notify.waiters, memory_order_relaxed);
}

uint64_t ss_segment_count(const ss_segment *seg) {
  return atomic_load_explicit(&seg->hdr->pub.count, memory_order_acquire);
}

const void *ss_view_data(const ss_segment *seg, const ss_frame *frame) {
  return ss_slot(seg, frame->slot);
}
