/* The core's one platform seam (docs/platforms.md): every call that differs
 * between operating systems is declared here and defined in one file per
 * system: src/core/platform_linux.c (with src/core/platform_linux_uring.c)
 * and src/core/platform_darwin.c, each compiled on its own system only. No
 * other file of the core includes a header one system lacks or makes a raw
 * system call (tests/repo/test_platform.py).
 *
 * Resolved at build time: one definition is compiled, called directly. The
 * wake and wait on a shared word are inline on Linux (a futex wake is on
 * the writer's path when someone sleeps); on macOS they are functions,
 * since the call they make is chosen once at run time.
 */
#ifndef SS_PLATFORM_H
#define SS_PLATFORM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>

#include "shmstream.h"

/* ---- waiting on a 32-bit word in shared memory --------------------------- */

/* ss_futex_wait: sleep while *addr == val, at most timeout_ns (< 0: no
 * limit); returns early on a signal or a spurious wake-up, so the caller
 * re-checks its condition. ss_futex_wake: wake every sleeper, returns how
 * many were woken (0 if unknown). Shared between processes: never a
 * process-private wait. */
#if defined(__linux__)
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static inline void ss_futex_wait(SS_ATOMIC(uint32_t) *addr, uint32_t val, int64_t timeout_ns) {
  struct timespec ts = {(time_t)(timeout_ns / 1000000000LL), (long)(timeout_ns % 1000000000LL)};
  /* A relative timeout; EINTR and EAGAIN (the word moved) return at once. */
  syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT, val, timeout_ns < 0 ? NULL : &ts, NULL, 0);
}

static inline int ss_futex_wake(SS_ATOMIC(uint32_t) *addr) {
  long n = syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
  return n < 0 ? 0 : (int)n;
}

/* Fault the pages of a new mapping in at mmap (0 where there is no such flag). */
#define SS_MAP_POPULATE MAP_POPULATE
#else
void ss_futex_wait(SS_ATOMIC(uint32_t) *addr, uint32_t val, int64_t timeout_ns);
int ss_futex_wake(SS_ATOMIC(uint32_t) *addr);
#define SS_MAP_POPULATE 0
#endif

/* ---- processes ------------------------------------------------------------ */

/* pid's start time (an opaque number that differs between two processes
 * given the same pid; 0 never names one) and whether it is a zombie (dead,
 * not yet reaped). 0, or -1 if the system cannot say. */
int ss_plat_proc_stat(int32_t pid, int *zombie, uint64_t *start_ticks);
/* This thread's kernel id (a system call: proc.c caches it). */
int32_t ss_plat_gettid(void);
/* This process's PID namespace: st_dev (0 if more than 32 bits) and st_ino
 * of its namespace file. 0, or a positive errno (then both are 0): ENOSYS
 * where the system has no PID namespaces. */
int ss_plat_pidns_self(uint32_t *dev, uint64_t *ino);
/* The description of errno value err, a constant string (thread-safe); NULL
 * if unknown. */
const char *ss_plat_errno_text(int err);
/* n bytes from the kernel's entropy source: 0, or an errno. */
int ss_plat_random(void *out, size_t n);

/* ---- segments ------------------------------------------------------------- */

/* Reserve every page of a new segment's file of `bytes` (already sized by
 * ftruncate), so that a full memory is an error now, not a SIGBUS later. 0
 * or an errno (ENOSPC). */
int ss_plat_reserve(int fd, uint64_t bytes);

/* ---- liveness leases (docs/ABI.md, "Liveness leases") --------------------- */

/* Take the shared lease `lease` on fd, held until the fd's open file
 * description closes (l1). 0 or an errno. */
int ss_plat_lease_hold(int fd, uint64_t lease);
/* Whether anyone holds the lease `lease` on fd's file (l2): 1, 0, or -1
 * if the system cannot say. A lease held through fd itself never counts. */
int ss_plat_lease_held(int fd, uint64_t lease);
/* Whether anyone holds any lease in [first, first + count) on fd's file:
 * 1, 0, or -1. */
int ss_plat_lease_any(int fd, uint64_t first, uint64_t count);
/* In a fork child, alone (async-signal-safe calls only): give fd a fresh
 * open file description of the same file, holding no lease. 0, or -1 if
 * the system cannot (then the inherited fd stays). */
int ss_plat_fd_reopen(int fd);

/* ---- direct reads (docs/direct.md) ---------------------------------------- */

/* Whether reads on fd can bypass the page cache here, and their alignment
 * (*align: at least the page). 1: try it, 0: no. */
int ss_plat_direct_probe(int fd, uint32_t *align);
/* Turn bypassing the page cache on fd on (1) or off (0): 0 or an errno. */
int ss_plat_direct_set(int fd, int on);
/* Reads on fd are random: no read-ahead. */
void ss_plat_advise_random(int fd);
/* mincore: which pages of [addr, addr + len) are in memory, one byte each
 * in vec (bit 0). Linux and macOS differ only in vec's type. */
static inline int ss_plat_mincore(void *addr, size_t len, unsigned char *vec) {
#if defined(__APPLE__)
  return mincore(addr, len, (char *)vec);
#else
  return mincore(addr, len, vec);
#endif
}
/* Drop fd's file's clean pages from the page cache: 0 or an errno. */
int ss_plat_evict(int fd);

/* A per-thread queue of concurrent reads (io_uring on Linux). NULL where
 * the system has none or it cannot be set up: the caller reads with pread. */
typedef struct ss_plat_ring ss_plat_ring;
struct ss_dio_op;
ss_plat_ring *ss_plat_ring_open(unsigned depth);
void ss_plat_ring_close(ss_plat_ring *r);
/* Read the n <= depth ops on fd and wait for all. 0: done (each op's res
 * set); -1: nothing was submitted, read them another way; a positive
 * errno: reads may still be in flight into their buffers (leak them) and
 * the ring is closed. */
int ss_plat_ring_read(ss_plat_ring *r, int fd, struct ss_dio_op *ops, size_t n);

/* ---- the wait policy (docs/waiting.md) ------------------------------------ */

/* CPUs this process may run on (2 if unknown). */
int ss_plat_cpus_allowed(void);
/* Runnable tasks on the system now, -1 if unknown. */
int ss_plat_runnable_tasks(void);
/* How late the kernel may end this thread's timed sleep, -1 if unknown. */
int64_t ss_plat_timer_slack_ns(void);

#endif
