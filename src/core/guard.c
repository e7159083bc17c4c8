/* A shrunk segment is an error, not a SIGBUS.
 *
 * Any process that can write a segment's file can also truncate it while
 * others have it mapped; their next access to a page past the new end
 * raises SIGBUS, which kills a process by default. So each mapping the core
 * makes is entered in a table, and a SIGBUS handler that finds the faulting
 * address in an entry replaces the rest of that mapping, from the faulting
 * page on, with private zero pages (mmap MAP_FIXED | MAP_ANONYMOUS) and
 * marks the entry. The access that faulted is re-executed on the zero page
 * and the operation finishes on garbage, which nobody sees: every core call
 * that reports a status checks the mark (ss_segment_status) and answers
 * SS_ECORRUPT, for this call and every later one on the handle. A zero-copy
 * view held past the truncation reads zeros instead of killing the process.
 * docs/ABI.md, "The header is trusted once", states the rule.
 *
 * A bus error anywhere else, or one sent with kill(), goes to the handler
 * that was installed before ours (torch's, Python's faulthandler) or to the
 * default action. A library that installs its own SIGBUS handler after ours
 * displaces it; each attach re-installs ours on top, chaining to the newer
 * one. The handler calls only mmap and atomics (mmap is not on POSIX's list
 * of async-signal-safe functions but is a plain system call on Linux). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core_helpers.h"

#define SS_GUARDS_PER_BLOCK 256

/* Blocks are never freed: the handler may walk them at any moment, and a
 * handle keeps a pointer to its entry. */
typedef struct guard_block {
  struct ss_guard entry[SS_GUARDS_PER_BLOCK];
  _Atomic(struct guard_block *) next;
} guard_block;

static _Atomic(guard_block *) g_blocks;
static pthread_mutex_t g_install = PTHREAD_MUTEX_INITIALIZER;
static struct sigaction g_previous; /* the handler ours displaced */

static void chain(int sig, siginfo_t *si, void *uc) {
  struct sigaction prev = g_previous;
  if (prev.sa_flags & SA_SIGINFO) {
    if (prev.sa_sigaction) prev.sa_sigaction(sig, si, uc);
    return;
  }
  if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
    prev.sa_handler(sig);
    return;
  }
  /* The default action: restore it; a fault re-executes and kills the
   * process as it would have without us, a sent signal is sent again (it
   * is blocked in this handler, so it is delivered when we return). */
  signal(sig, SIG_DFL);
  if (si->si_code <= 0) raise(sig);
}

static int rescue(uintptr_t addr) {
  uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  for (guard_block *b = atomic_load_explicit(&g_blocks, memory_order_acquire); b;
       b = atomic_load_explicit(&b->next, memory_order_acquire)) {
    for (int i = 0; i < SS_GUARDS_PER_BLOCK; i++) {
      struct ss_guard *g = &b->entry[i];
      uintptr_t lo = atomic_load_explicit(&g->lo, memory_order_acquire);
      uintptr_t hi = atomic_load_explicit(&g->hi, memory_order_acquire);
      if (!lo || addr < lo || addr >= hi) continue;
      uintptr_t from = addr & ~(page - 1);
      void *r = mmap((void *)from, hi - from, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
      if (r == MAP_FAILED) return 0;
      atomic_store_explicit(&g->hit, 1, memory_order_release);
      return 1;
    }
  }
  return 0;
}

static void on_sigbus(int sig, siginfo_t *si, void *uc) {
  /* si_code > 0: raised by the kernel for an access, si_addr is the byte. */
  if (si && si->si_code > 0 && rescue((uintptr_t)si->si_addr)) return;
  chain(sig, si, uc);
}

/* Ours on top of whatever is installed now (called with g_install held). */
static void install(void) {
  struct sigaction cur;
  if (sigaction(SIGBUS, NULL, &cur) != 0) return;
  if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_sigbus) return;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  g_previous = cur;
  sigaction(SIGBUS, &sa, NULL);
}

static struct ss_guard *claim_entry(void) {
  for (;;) {
    guard_block *last = NULL;
    for (guard_block *b = atomic_load_explicit(&g_blocks, memory_order_acquire); b;
         b = atomic_load_explicit(&b->next, memory_order_acquire)) {
      for (int i = 0; i < SS_GUARDS_PER_BLOCK; i++) {
        int free_ = 0;
        if (atomic_compare_exchange_strong(&b->entry[i].used, &free_, 1)) return &b->entry[i];
      }
      last = b;
    }
    guard_block *nb = mmap(NULL, sizeof *nb, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                           -1, 0);
    if (nb == MAP_FAILED) return NULL;
    guard_block *none = NULL;
    _Atomic(guard_block *) *tail = last ? &last->next : &g_blocks;
    if (!atomic_compare_exchange_strong(tail, &none, nb)) munmap(nb, sizeof *nb);
  }
}

/* Enter [lo, hi) in the table; NULL if the table cannot grow (the mapping
 * is then unguarded, as before the guard existed). */
static struct ss_guard *guard_add(uintptr_t lo, uintptr_t hi) {
  pthread_mutex_lock(&g_install);
  install();
  pthread_mutex_unlock(&g_install);
  struct ss_guard *g = claim_entry();
  if (!g) return NULL;
  atomic_store_explicit(&g->hit, 0, memory_order_relaxed);
  atomic_store_explicit(&g->hi, hi, memory_order_relaxed);
  atomic_store_explicit(&g->lo, lo, memory_order_release);
  return g;
}

/* Take an entry out, before its mapping is unmapped. */
static void guard_remove(struct ss_guard *g) {
  if (!g) return;
  atomic_store_explicit(&g->lo, 0, memory_order_release);
  atomic_store_explicit(&g->hi, 0, memory_order_relaxed);
  atomic_store_explicit(&g->used, 0, memory_order_release);
}

void ss_guard_attach(ss_segment *seg) {
  seg->guard = guard_add((uintptr_t)seg->base, (uintptr_t)seg->base + seg->map_bytes);
}

void ss_guard_detach(ss_segment *seg) {
  struct ss_guard *g = seg->guard;
  seg->guard = NULL;
  guard_remove(g);
}

/* ---- plain files mapped under the guard ------------------------------------ */

struct ss_file_map {
  uint8_t *base;
  size_t bytes;
  int writable;
  struct ss_guard *guard;
};

int ss_file_map_open(int fd, size_t bytes, int populate, ss_file_map **out) {
  *out = NULL;
  if (bytes == 0) return EINVAL;
  /* A file opened read-only (another user's recording) is mapped read-only:
   * a shared writable mapping of it is refused (EACCES). */
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0) return errno;
  int writable = (flags & O_ACCMODE) != O_RDONLY;
  ss_file_map *m = calloc(1, sizeof *m);
  if (!m) return ENOMEM;
  void *p = mmap(NULL, bytes, writable ? PROT_READ | PROT_WRITE : PROT_READ,
                 MAP_SHARED | (populate ? SS_MAP_POPULATE : 0), fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    free(m);
    return e;
  }
  m->base = p;
  m->bytes = bytes;
  m->writable = writable;
  m->guard = guard_add((uintptr_t)p, (uintptr_t)p + bytes);
  *out = m;
  return SS_OK;
}

void *ss_file_map_base(const ss_file_map *m) { return m->base; }

size_t ss_file_map_bytes(const ss_file_map *m) { return m->bytes; }

int ss_file_map_writable(const ss_file_map *m) { return m->writable; }

int ss_file_map_lost(const ss_file_map *m) {
  return m->guard && atomic_load_explicit(&m->guard->hit, memory_order_acquire);
}

void ss_file_map_close(ss_file_map *m) {
  if (!m) return;
  guard_remove(m->guard);
  munmap(m->base, m->bytes);
  free(m);
}

int ss_segment_status(const ss_segment *seg) { return ss_guarded(seg, SS_OK); }
