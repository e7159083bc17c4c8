/* Is a process alive? By pid and /proc start time, so a reused pid does not
 * make a dead peer look alive; a zombie (killed, not yet reaped) is dead. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core_helpers.h"

uint64_t ss_proc_start_ticks(int32_t pid) {
  int zombie;
  uint64_t ticks = 0;
  return ss_plat_proc_stat(pid, &zombie, &ticks) == 0 ? ticks : 0;
}

int ss_proc_alive(int32_t pid, uint64_t start_ticks) {
  if (pid <= 0) return 0;
  if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) return 0;
  int zombie;
  uint64_t ticks;
  if (ss_plat_proc_stat(pid, &zombie, &ticks) != 0) return 1; /* unknown: trust kill() */
  if (zombie) return 0;
  /* start_ticks may hold only the low 32 bits (the channel owner word). */
  if (start_ticks) {
    uint64_t mask = start_ticks >> 32 ? UINT64_MAX : 0xffffffffull;
    if ((ticks & mask) != start_ticks) return 0;
  }
  return 1;
}

/* ---- this process and thread, cached ----------------------------------- */

/* The hot path records who writes and who holds the lock; getpid and
 * gettid are system calls, so they are asked once and remembered. A fork
 * child forgets them (pthread_atfork), since its pid is new. */
static SS_ATOMIC(int32_t) self_pid;
static SS_ATOMIC(uint64_t) self_ticks;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static __thread int32_t tls_tid, tls_tid_pid;

static void forget_self(void) {
  atomic_store_explicit(&self_pid, 0, memory_order_relaxed);
  atomic_store_explicit(&self_ticks, 0, memory_order_relaxed);
}

static void register_atfork(void) { pthread_atfork(NULL, NULL, forget_self); }

int32_t ss_self_pid(void) {
  int32_t pid = atomic_load_explicit(&self_pid, memory_order_relaxed);
  if (__builtin_expect(pid == 0, 0)) {
    pthread_once(&atfork_once, register_atfork);
    pid = (int32_t)getpid();
    atomic_store_explicit(&self_pid, pid, memory_order_relaxed);
  }
  return pid;
}

int32_t ss_self_tid(void) {
  int32_t pid = ss_self_pid();
  if (__builtin_expect(tls_tid_pid != pid, 0)) {
    tls_tid = ss_plat_gettid();
    tls_tid_pid = pid;
  }
  return tls_tid;
}

uint64_t ss_self_start_ticks(void) {
  uint64_t t = atomic_load_explicit(&self_ticks, memory_order_relaxed);
  if (__builtin_expect(t == 0, 0)) {
    t = ss_proc_start_ticks(ss_self_pid());
    atomic_store_explicit(&self_ticks, t, memory_order_relaxed);
  }
  return t;
}
