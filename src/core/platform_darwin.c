/* macOS's side of the platform seam (src/core/platform.h). Cross-compiled
 * and linked here with zig cc (tests/repo/test_macos_build.py); it has
 * never run on a Mac (docs/platforms.md says which parts are done). What
 * macOS cannot do, or this file does not do yet, returns an error or
 * "unknown", never a pretended success. */
/* Compiled on macOS only, so every file of the core can be compiled on any system. */
#if defined(__APPLE__)
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <libproc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/proc.h>
#include <sys/proc_info.h>
#include <sys/random.h>
#include <unistd.h>

#include "platform.h"

/* ---- waiting on a 32-bit word in shared memory ----------------------------- */

/* macOS 14.4 and later: os_sync_wait_on_address (public, in Apple's SDK
 * but absent from the headers this is built with here, so declared by hand
 * and found with dlsym: an older macOS lacks it). Else the __ulock calls
 * libc++ and Tachyon use (private, in libSystem since macOS 10.12;
 * __ulock_wait2, with a 64-bit timeout in ns, since 11). */
#define SS_OS_SYNC_WAIT_SHARED 1u /* OS_SYNC_WAIT_ON_ADDRESS_SHARED */
#define SS_OS_SYNC_WAKE_SHARED 1u /* OS_SYNC_WAKE_BY_ADDRESS_SHARED */
#define SS_OS_CLOCK_MACH_ABSOLUTE_TIME 32u
#define UL_COMPARE_AND_WAIT_SHARED 3u
#define ULF_WAKE_ALL 0x00000100u
#define ULF_NO_ERRNO 0x01000000u

extern int __ulock_wait2(uint32_t operation, void *addr, uint64_t value, uint64_t timeout_ns,
                         uint64_t value2);
extern int __ulock_wake(uint32_t operation, void *addr, uint64_t wake_value);

typedef int (*os_wait_fn)(void *addr, uint64_t value, size_t size, uint32_t flags);
typedef int (*os_wait_timeout_fn)(void *addr, uint64_t value, size_t size, uint32_t flags,
                                  uint32_t clockid, uint64_t timeout_ns);
typedef int (*os_wake_fn)(void *addr, size_t size, uint32_t flags);

static os_wait_fn os_wait;
static os_wait_timeout_fn os_wait_timeout;
static os_wake_fn os_wake_all;
static pthread_once_t os_sync_once = PTHREAD_ONCE_INIT;

static void find_os_sync(void) {
  os_wait_fn w = (os_wait_fn)dlsym(RTLD_DEFAULT, "os_sync_wait_on_address");
  os_wait_timeout_fn wt = (os_wait_timeout_fn)dlsym(RTLD_DEFAULT,
                                                    "os_sync_wait_on_address_with_timeout");
  os_wake_fn k = (os_wake_fn)dlsym(RTLD_DEFAULT, "os_sync_wake_by_address_all");
  if (w && wt && k) { /* all three, or the __ulock calls for all */
    os_wait = w;
    os_wait_timeout = wt;
    os_wake_all = k;
  }
}

void ss_futex_wait(SS_ATOMIC(uint32_t) *addr, uint32_t val, int64_t timeout_ns) {
  pthread_once(&os_sync_once, find_os_sync);
  /* EINTR, ETIMEDOUT and a moved word return at once: the caller re-checks. */
  if (os_wait) {
    if (timeout_ns < 0) {
      os_wait((void *)addr, val, sizeof(uint32_t), SS_OS_SYNC_WAIT_SHARED);
    } else if (timeout_ns > 0) {
      os_wait_timeout((void *)addr, val, sizeof(uint32_t), SS_OS_SYNC_WAIT_SHARED,
                      SS_OS_CLOCK_MACH_ABSOLUTE_TIME, (uint64_t)timeout_ns);
    }
    return;
  }
  if (timeout_ns == 0) return; /* 0 means "no limit" to __ulock_wait2 */
  __ulock_wait2(UL_COMPARE_AND_WAIT_SHARED | ULF_NO_ERRNO, (void *)addr, val,
                timeout_ns < 0 ? 0 : (uint64_t)timeout_ns, 0);
}

/* Neither call says how many it woke: 1 when someone waited, 0 when
 * nobody did (ENOENT), which is what the callers test. */
int ss_futex_wake(SS_ATOMIC(uint32_t) *addr) {
  pthread_once(&os_sync_once, find_os_sync);
  if (os_wake_all) return os_wake_all((void *)addr, sizeof(uint32_t), SS_OS_SYNC_WAKE_SHARED) == 0;
  return __ulock_wake(UL_COMPARE_AND_WAIT_SHARED | ULF_WAKE_ALL | ULF_NO_ERRNO, (void *)addr, 0) ==
         0;
}

/* ---- processes -------------------------------------------------------------- */

/* The start time in microseconds since the epoch: what tells two processes
 * given the same pid apart, as /proc's starttime does on Linux. */
int ss_plat_proc_stat(int32_t pid, int *zombie, uint64_t *start_ticks) {
  struct proc_bsdinfo info;
  if (proc_pidinfo((pid_t)pid, PROC_PIDTBSDINFO, 0, &info, (int)sizeof info) != (int)sizeof info)
    return -1;
  *zombie = info.pbi_status == SZOMB;
  *start_ticks = info.pbi_start_tvsec * 1000000u + info.pbi_start_tvusec;
  return 0;
}

/* The system-wide 64-bit thread id, truncated: the core compares it only
 * with this process's other threads'. */
int32_t ss_plat_gettid(void) {
  uint64_t tid = 0;
  pthread_threadid_np(NULL, &tid);
  return (int32_t)tid;
}

int ss_plat_pidns_self(uint32_t *dev, uint64_t *ino) {
  *dev = 0;
  *ino = 0;
  return ENOSYS; /* macOS has no PID namespaces */
}

/* Darwin's strerror returns a constant string for every known value (only
 * an unknown one is formatted into a shared buffer: NULL here instead). */
const char *ss_plat_errno_text(int err) { return err < sys_nerr ? strerror(err) : NULL; }

int ss_plat_random(void *out, size_t n) {
  for (size_t got = 0; got < n;) {
    size_t k = n - got > 256 ? 256 : n - got; /* getentropy's most a call */
    if (getentropy((uint8_t *)out + got, k) != 0) return errno;
    got += k;
  }
  return 0;
}

/* ---- segments ---------------------------------------------------------------- */

/* No posix_fallocate: F_PREALLOCATE where the file system has it, else
 * every page written once, so it is committed now. */
int ss_plat_reserve(int fd, uint64_t bytes) {
  fstore_t st = {F_ALLOCATEALL, F_PEOFPOSMODE, 0, (off_t)bytes, 0};
  if (fcntl(fd, F_PREALLOCATE, &st) == 0) return 0;
  void *m = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) return errno;
  long page = sysconf(_SC_PAGESIZE);
  for (uint64_t off = 0; off < bytes; off += (uint64_t)page) ((volatile uint8_t *)m)[off] = 0;
  munmap(m, (size_t)bytes);
  return 0;
}

/* ---- liveness leases ----------------------------------------------------------- */

/* Not done yet (docs/platforms.md, "Leases on macOS"): macOS has no OFD
 * locks, and the flock-on-a-lease-file design is not written. A handle that
 * needs a lease fails to open with ENOTSUP; nothing is judged alive or dead
 * by guess. */
int ss_plat_lease_hold(int fd, uint64_t lease) {
  (void)fd;
  (void)lease;
  return ENOTSUP;
}

int ss_plat_lease_held(int fd, uint64_t lease) {
  (void)fd;
  (void)lease;
  return -1;
}

int ss_plat_lease_any(int fd, uint64_t first, uint64_t count) {
  (void)fd;
  (void)first;
  (void)count;
  return -1;
}

/* /dev/fd/N on macOS duplicates the fd (the same open file description):
 * there is no way to a fresh one from the fd alone. */
int ss_plat_fd_reopen(int fd) {
  (void)fd;
  return -1;
}

/* ---- direct reads -------------------------------------------------------------- */

/* F_NOCACHE: reads bypass the unified buffer cache where they are aligned
 * to the page. */
int ss_plat_direct_probe(int fd, uint32_t *align) {
  (void)fd;
  *align = (uint32_t)sysconf(_SC_PAGESIZE);
  return 1;
}

int ss_plat_direct_set(int fd, int on) { return fcntl(fd, F_NOCACHE, on) == 0 ? 0 : errno; }

void ss_plat_advise_random(int fd) { fcntl(fd, F_RDAHEAD, 0); }

int ss_plat_evict(int fd) {
  (void)fd;
  return ENOTSUP; /* no POSIX_FADV_DONTNEED, and no per-file purge */
}

ss_plat_ring *ss_plat_ring_open(unsigned depth) {
  (void)depth;
  return NULL; /* no io_uring: the direct reader uses pread */
}

void ss_plat_ring_close(ss_plat_ring *r) { (void)r; }

int ss_plat_ring_read(ss_plat_ring *r, int fd, struct ss_dio_op *ops, size_t n) {
  (void)r;
  (void)fd;
  (void)ops;
  (void)n;
  return -1;
}

/* ---- the wait policy ------------------------------------------------------------ */

int ss_plat_cpus_allowed(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN); /* no affinity masks on macOS */
  return n > 0 ? (int)n : 2;
}

int ss_plat_runnable_tasks(void) { return -1; /* not read yet: the policy treats it as unknown */ }

int64_t ss_plat_timer_slack_ns(void) { return -1; /* no prctl; the policy's default */ }

#endif /* __APPLE__ */
