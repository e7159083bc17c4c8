/* Helpers shared by the core's source files; not part of the public ABI. */
#ifndef SS_INTERNAL_H
#define SS_INTERNAL_H

#include "shmstream.h"

#define SS_NS_PER_S 1000000000LL

uint64_t ss_fnv1a64(const void *data, size_t n, uint64_t h);
#define SS_FNV_OFFSET 0xcbf29ce484222325ULL

/* src/core/proc.c: start time of a process (/proc/<pid>/stat field 22), 0
 * if unknown; declared publicly in shmstream_channel.h too. */
uint64_t ss_proc_start_ticks(int32_t pid);

/* Marks the frame of a writer that died mid-write (lock taken over). */
void ss_mark_abandoned(ss_segment *seg);

/* ss_lock for a reader's fallback: announced in notify.lock_readers, so
 * writers step aside for it. */
int ss_lock_for_read(ss_segment *seg, int64_t timeout_ns);

static inline void ss_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

#endif
