/* Linux's side of the platform seam (src/core/platform.h): /proc, OFD
 * locks, posix_fallocate, O_DIRECT, prctl. The futex calls are inline in
 * platform.h; the io_uring is in platform_linux_uring.c. */
/* Compiled on Linux only, so every file of the core can be compiled on any system. */
#if defined(__linux__)
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "platform.h"

/* ---- processes ------------------------------------------------------------ */

/* /proc/<pid>/stat: the state letter and starttime (field 22). */
int ss_plat_proc_stat(int32_t pid, int *zombie, uint64_t *start_ticks) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  /* comm may contain spaces and ')': fields resume after the last ')'. */
  char *p = strrchr(buf, ')');
  if (!p || p[1] != ' ') return -1;
  *zombie = p[2] == 'Z' || p[2] == 'X';
  int field = 2;
  for (p++; *p && field < 22; p++)
    if (*p == ' ') field++;
  *start_ticks = strtoull(p, NULL, 10);
  return 0;
}

int32_t ss_plat_gettid(void) { return (int32_t)syscall(SYS_gettid); }

int ss_plat_pidns_self(uint32_t *dev, uint64_t *ino) {
  struct stat st;
  *dev = 0;
  *ino = 0;
  if (stat("/proc/self/ns/pid", &st) != 0) return errno;
  *ino = (uint64_t)st.st_ino;
  *dev = ((uint64_t)st.st_dev >> 32) ? 0 : (uint32_t)st.st_dev;
  return 0;
}

const char *ss_plat_errno_text(int err) { return strerrordesc_np(err); }

int ss_plat_random(void *out, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = getrandom((uint8_t *)out + got, n - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    got += (size_t)r;
  }
  return 0;
}

/* ---- segments ------------------------------------------------------------- */

int ss_plat_reserve(int fd, uint64_t bytes) { return posix_fallocate(fd, 0, (off_t)bytes); }

/* ---- liveness leases: OFD locks on one byte each --------------------------- */

static int ofd_lock(int fd, short type, int cmd, uint64_t start, uint64_t len, struct flock *out) {
  struct flock fl = {0};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = (off_t)start;
  fl.l_len = (off_t)len;
  fl.l_pid = 0; /* must be 0 for the OFD commands */
  int rc;
  do rc = fcntl(fd, cmd, &fl);
  while (rc != 0 && errno == EINTR);
  if (rc != 0) return errno;
  if (out) *out = fl;
  return 0;
}

int ss_plat_lease_hold(int fd, uint64_t lease) {
  /* F_RDLCK: a read-only fd can take it, and nobody ever takes an
   * exclusive lock there, so this never waits. EINVAL: a kernel before
   * 3.15, without OFD locks. */
  return ofd_lock(fd, F_RDLCK, F_OFD_SETLK, lease, 1, NULL);
}

int ss_plat_lease_held(int fd, uint64_t lease) {
  struct flock fl;
  /* l_pid is -1 for OFD locks: nothing here reads a pid. */
  if (ofd_lock(fd, F_WRLCK, F_OFD_GETLK, lease, 1, &fl) != 0) return -1;
  return fl.l_type != F_UNLCK;
}

int ss_plat_lease_any(int fd, uint64_t first, uint64_t count) {
  struct flock fl;
  if (ofd_lock(fd, F_WRLCK, F_OFD_GETLK, first, count, &fl) != 0) return -1;
  return fl.l_type != F_UNLCK;
}

/* "/proc/self/fd/" + the decimal fd, without snprintf (not async-signal-safe). */
static void fd_path_tail(char *out, int fd) {
  char digits[12];
  int n = 0;
  do digits[n++] = (char)('0' + fd % 10);
  while ((fd /= 10) > 0 && n < 11);
  while (n > 0) *out++ = digits[--n];
  *out = '\0';
}

int ss_plat_fd_reopen(int fd) {
  char path[32] = "/proc/self/fd/";
  fd_path_tail(path + 14, fd);
  int acc = fcntl(fd, F_GETFL);
  int fresh = acc < 0 ? -1 : open(path, (acc & O_ACCMODE) | O_CLOEXEC);
  if (fresh < 0) return -1; /* no /proc */
  int rc = dup3(fresh, fd, O_CLOEXEC) < 0 ? -1 : 0;
  close(fresh);
  return rc;
}

/* ---- direct reads ---------------------------------------------------------- */

/* statx(STATX_DIOALIGN) answers on Linux >= 6.1; tmpfs accepts O_DIRECT but
 * serves it from memory, so it counts as unsupported. */
int ss_plat_direct_probe(int fd, uint32_t *align) {
  uint32_t page = (uint32_t)sysconf(_SC_PAGESIZE);
  *align = page;
#ifdef STATX_DIOALIGN
  struct statx sx;
  if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 && (sx.stx_mask & STATX_DIOALIGN)) {
    if (sx.stx_dio_offset_align == 0) return 0;
    uint32_t a = sx.stx_dio_offset_align > sx.stx_dio_mem_align ? sx.stx_dio_offset_align
                                                                : sx.stx_dio_mem_align;
    *align = a > page ? a : page;
    return 1;
  }
#endif
  struct statfs fs;
  if (fstatfs(fd, &fs) == 0 && (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC)) return 0;
  return 1; /* unknown: try it, and let the probe read decide */
}

int ss_plat_direct_set(int fd, int on) {
  return fcntl(fd, F_SETFL, on ? O_DIRECT : 0) == 0 ? 0 : errno;
}

void ss_plat_advise_random(int fd) { posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM); }

int ss_plat_evict(int fd) { return posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED); }

/* ---- the wait policy -------------------------------------------------------- */

int ss_plat_cpus_allowed(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 2; /* unknown: assume a spare */
  return CPU_COUNT(&set);
}

/* /proc/loadavg's 4th field, "r/t". */
int ss_plat_runnable_tasks(void) {
  int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[128];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  double a, b, c;
  int r, t;
  return sscanf(buf, "%lf %lf %lf %d/%d", &a, &b, &c, &r, &t) == 5 ? r : -1;
}

int64_t ss_plat_timer_slack_ns(void) {
  int slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
  return slack < 0 ? -1 : slack;
}

#endif /* __linux__ */
