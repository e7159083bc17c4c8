/* Is a process alive? By pid and /proc start time, so a reused pid does not
 * make a dead peer look alive; a zombie (killed, not yet reaped) is dead. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

/* Reads /proc/<pid>/stat: state letter and starttime (field 22). */
static int proc_stat(int32_t pid, char *state, uint64_t *ticks) {
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
  *state = p[2];
  int field = 2;
  for (p++; *p && field < 22; p++)
    if (*p == ' ') field++;
  *ticks = strtoull(p, NULL, 10);
  return 0;
}

uint64_t ss_proc_start_ticks(int32_t pid) {
  char state;
  uint64_t ticks = 0;
  return proc_stat(pid, &state, &ticks) == 0 ? ticks : 0;
}

int ss_proc_alive(int32_t pid, uint64_t start_ticks) {
  if (pid <= 0) return 0;
  if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) return 0;
  char state;
  uint64_t ticks;
  if (proc_stat(pid, &state, &ticks) != 0) return 1; /* no /proc: trust kill() */
  if (state == 'Z' || state == 'X') return 0;
  /* start_ticks may hold only the low 32 bits (the channel owner word). */
  if (start_ticks) {
    uint64_t mask = start_ticks >> 32 ? UINT64_MAX : 0xffffffffull;
    if ((ticks & mask) != start_ticks) return 0;
  }
  return 1;
}
