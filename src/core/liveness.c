/* Liveness leases (docs/ABI.md, "Liveness leases"): whether the process
 * behind a shared word is alive, judged without a pid, so that peers in
 * two PID namespaces that share /dev/shm judge each other rightly.
 *
 * A handle holds a shared open-file-description lock on one byte far past
 * the end of its segment's file, byte L, for its life; L (2^62 + 62 random
 * bits) is what it stores in a shared word (a channel end's owner). The
 * kernel drops the lock when the last fd of the open file description
 * closes, i.e. when the process dies however it dies, whatever its
 * namespace, and F_OFD_GETLK through any fd of the same file tells whether
 * anyone still holds it. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core_helpers.h"

/* ---- the fds of this process's leases, for the fork child --------------- */

/* A fork child shares its parent's open file descriptions: an inherited
 * lease fd would keep the parent's leases alive after the parent died. The
 * child handler gives each lease fd a fresh open file description of the
 * same file (no lock on it), so a handle's lease is the parent's in the
 * child, judged like anyone's, as a pid was. A table of fds, not of
 * handles: handles may be copied or moved by their owner. */
typedef struct lease_fd {
  int fd;
  uint64_t lease; /* held on fd by this process, 0: none (a peek, or a fork
                   * child's inherited fd): lets a lock tell this process's
                   * other handles' leases from other processes'
                   * (ss_lease_is_ours) */
} lease_fd;
/* Grown by doubling under the lock, never shrunk; the fork child only
 * reads it. */
static lease_fd *lease_fds;
static int n_lease_fds, cap_lease_fds;
static pthread_mutex_t lease_fds_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t lease_once = PTHREAD_ONCE_INIT;

static void before_fork(void) { pthread_mutex_lock(&lease_fds_lock); }
static void after_fork_parent(void) { pthread_mutex_unlock(&lease_fds_lock); }

/* Runs in the child, alone: only async-signal-safe calls (the seam's
 * ss_plat_fd_reopen makes only such). */
static void after_fork_child(void) {
  for (int i = 0; i < n_lease_fds; i++) {
    lease_fds[i].lease = 0; /* the parent's, not this process's */
    /* -1: the system cannot reopen it: the inherited fd stays (documented) */
    (void)ss_plat_fd_reopen(lease_fds[i].fd);
  }
  pthread_mutex_unlock(&lease_fds_lock);
}

static void register_atfork(void) {
  pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

static int remember_fd(int fd) {
  pthread_once(&lease_once, register_atfork);
  pthread_mutex_lock(&lease_fds_lock);
  int rc = SS_OK;
  if (n_lease_fds == cap_lease_fds) {
    int cap = cap_lease_fds ? 2 * cap_lease_fds : 64;
    lease_fd *grown = realloc(lease_fds, (size_t)cap * sizeof *grown);
    if (grown) {
      lease_fds = grown;
      cap_lease_fds = cap;
    } else {
      rc = ENOMEM;
    }
  }
  if (rc == SS_OK) lease_fds[n_lease_fds++] = (lease_fd){fd, 0};
  pthread_mutex_unlock(&lease_fds_lock);
  return rc;
}

static void forget_fd(int fd) {
  pthread_mutex_lock(&lease_fds_lock);
  for (int i = 0; i < n_lease_fds; i++)
    if (lease_fds[i].fd == fd) {
      lease_fds[i] = lease_fds[--n_lease_fds];
      break;
    }
  pthread_mutex_unlock(&lease_fds_lock);
}

/* Record that this process holds `lease` on fd (table locked by the caller
 * when `locked`). */
static void note_lease(int fd, uint64_t lease, int locked) {
  if (!locked) pthread_mutex_lock(&lease_fds_lock);
  for (int i = 0; i < n_lease_fds; i++)
    if (lease_fds[i].fd == fd) lease_fds[i].lease = lease;
  if (!locked) pthread_mutex_unlock(&lease_fds_lock);
}

int ss_lease_is_ours(uint64_t lease) {
  int ours = 0;
  pthread_mutex_lock(&lease_fds_lock);
  for (int i = 0; i < n_lease_fds && !ours; i++) ours = lease_fds[i].lease == lease;
  pthread_mutex_unlock(&lease_fds_lock);
  return ours && lease != 0;
}

/* ---- room for the fds handles keep ---------------------------------------- */

/* Every open channel end and stream handle keeps one fd (its lease), so a
 * process that holds many meets its soft RLIMIT_NOFILE (often 1024) long
 * before its hard one. On EMFILE, when the alternative is failing, the
 * soft limit is raised towards the hard one, doubling (Go's runtime raises
 * it to the hard limit at start for the same reason). 1 if it rose. */
int ss_more_fds(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max) return 0;
  rlim_t want = rl.rlim_cur < 64 ? 128 : rl.rlim_cur * 2;
  if (want > rl.rlim_max) want = rl.rlim_max;
  rl.rlim_cur = want;
  return setrlimit(RLIMIT_NOFILE, &rl) == 0;
}

/* ---- a handle's lease ------------------------------------------------------ */

static uint64_t random_lease(void) {
  uint64_t r = 0;
  if (ss_plat_random(&r, sizeof r) != 0) {
    /* No entropy source: the clock and an address still differ between
     * processes. */
    r ^= (uint64_t)ss_realtime_ns() * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)&r;
  }
  /* 2^62 .. 2^63 - 2: nonzero, and byte L and its length fit off_t. */
  uint64_t low = r & (SS_LEASE_BASE - 1);
  if (low == SS_LEASE_BASE - 1) low--;
  return SS_LEASE_BASE | low;
}

int ss_lease_take(ss_segment *seg, int fd, int own) {
  int rc = remember_fd(fd);
  if (rc) return rc;
  seg->fd = fd;
  seg->has_fd = 1;
  seg->lease = 0;
  if (!own) return SS_OK; /* a peek: tests leases, holds none */
  uint64_t lease = random_lease();
  /* SYNC POINT (l1): the lock on byte L is held before L is stored in any
   * shared word (the caller's claim), so a word naming L names a lease
   * that was held when it was stored. A shared lock a read-only fd can
   * take, that never waits (ss_plat_lease_hold). */
  rc = ss_plat_lease_hold(fd, lease);
  if (rc) {
    ss_lease_drop(seg);
    return rc; /* EINVAL: a kernel before 3.15, without OFD locks */
  }
  seg->lease = lease;
  seg->lease_pid = ss_self_pid();
  note_lease(fd, lease, 0);
  return SS_OK;
}

void ss_lease_drop(ss_segment *seg) {
  if (!seg->has_fd) return;
  forget_fd(seg->fd);
  close(seg->fd); /* the last fd of its description: the kernel drops the lock */
  seg->has_fd = 0;
  seg->fd = -1;
  seg->lease = 0;
}

uint64_t ss_lease_self(const ss_segment *seg) {
  /* In a fork child the lease is the parent's (its fd was given a fresh
   * description): not this process's to store. */
  return seg->lease && seg->lease_pid == ss_self_pid() ? seg->lease : 0;
}

int ss_lease_alive(const ss_segment *seg, uint64_t word) {
  if (word == 0) return 0;
  if (word == ss_lease_self(seg)) return 1; /* our own lock never conflicts */
  /* Not a lease number (a hostile or corrupt word): nobody can hold it. */
  if (word < SS_LEASE_BASE || word > SS_LEASE_BASE + (SS_LEASE_BASE - 2)) return 0;
  if (!seg->has_fd) return -1;
  /* SYNC POINT (l2): tested after the word was loaded (acquire, by the
   * caller). A lease found gone stays gone (no number is taken twice), so a
   * takeover CAS from this word cannot displace a live owner. Nothing here
   * reads a pid. */
  return ss_plat_lease_held(seg->fd, word);
}

uint64_t ss_lease_mine(ss_segment *seg) {
  uint64_t lease = ss_lease_self(seg);
  if (lease || !seg->has_fd) return lease;
  /* A fork child's inherited handle: its fd is a fresh open file
   * description (after_fork_child) holding no lock, and the parent's lease
   * is not ours to store. Take a new one on it (l1) the first time this
   * process needs one. Under the fork table's lock: two threads of the
   * child take one lease, and a fork meanwhile waits. */
  pthread_mutex_lock(&lease_fds_lock);
  lease = ss_lease_self(seg);
  if (!lease) {
    uint64_t fresh = random_lease();
    if (ss_plat_lease_hold(seg->fd, fresh) == SS_OK) {
      seg->lease = fresh;
      seg->lease_pid = ss_self_pid();
      note_lease(seg->fd, fresh, 1);
      lease = fresh;
    }
  }
  pthread_mutex_unlock(&lease_fds_lock);
  return lease;
}

int ss_lease_any(const ss_segment *seg) {
  if (!seg->has_fd) return -1;
  /* every lease byte, 2^62 .. 2^63 - 2 */
  int held = ss_plat_lease_any(seg->fd, SS_LEASE_BASE, SS_LEASE_BASE - 1);
  /* The handle's own lease, if it has one, never conflicts: a peek has none. */
  return held;
}

/* The public face of the two calls above, for a payload table that names
 * its holders by lease (docs/ABI.md, "Loader pool by lease"). */
uint64_t ss_segment_lease(ss_segment *seg) {
  return ss_uses_leases(&seg->id) ? ss_lease_mine(seg) : 0;
}

int ss_segment_lease_alive(const ss_segment *seg, uint64_t word) {
  return ss_uses_leases(&seg->id) ? ss_lease_alive(seg, word) : -1;
}
