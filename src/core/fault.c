/* Fault injection: a named crash point at every place a process can die
 * between two stores that other processes rely on (docs/ABI.md, "Crash
 * points"). Compiled in always and inert: SS_CRASH_POINT is one relaxed load
 * of a process-local flag and a branch that is not taken. A test arms one
 * point; the nth time the process passes it, the process dies there, as a
 * SIGKILL at that instruction would kill it.
 *
 * Arming: ss_fault_arm(), or the environment variable
 * SHMSTREAM_CRASH_AT="point[:nth[:exit]]" read when the core is loaded (so a
 * test can arm a child process, or a C program, before it runs). The
 * extension modules share one copy of the core (libshmstream.so,
 * CMakeLists.txt), so one arming covers every module in the process. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core_helpers.h"

/* The one list of crash points; docs/ABI.md's table names the same ones
 * (a test compares them). */
static const char *const k_points[] = {
    "stream.a",         "stream.copy",   "stream.u",     "stream.b1",      "stream.record",
    "stream.slot_even", "stream.meta",   "stream.count", "stream.b2",      "stream.c",
    "lock.acquired",    "lock.takeover", "repair.r1",    "repair.history", "repair.r3",
    "repair.r4",        "lock.unlock",   "ring.record",  "ring.head",      "ring.read",
    "ring.tail",        "ring.release",  "ring.detach",  "sleep.claim",    "sleep.release",
    "read.claimed",     "read.locked",
};
#define N_POINTS (sizeof k_points / sizeof k_points[0])

SS_ATOMIC(int) ss_fault_armed_;
static int armed_point = -1;
static uint32_t armed_nth;
static uint32_t hits;
static int armed_action;

const char *const *ss_fault_points(size_t *n) {
  *n = N_POINTS;
  return k_points;
}

static int point_index(const char *point, size_t len) {
  for (size_t i = 0; i < N_POINTS; i++)
    if (strlen(k_points[i]) == len && memcmp(k_points[i], point, len) == 0) return (int)i;
  return -1;
}

int ss_fault_arm(const char *point, uint32_t nth, int action) {
  int i = point_index(point, strlen(point));
  if (i < 0 || (action != SS_FAULT_SIGKILL && action != SS_FAULT_EXIT)) return EINVAL;
  armed_point = i;
  armed_nth = nth ? nth : 1;
  armed_action = action;
  hits = 0;
  atomic_store_explicit(&ss_fault_armed_, 1, memory_order_relaxed);
  return SS_OK;
}

void ss_fault_disarm(void) {
  atomic_store_explicit(&ss_fault_armed_, 0, memory_order_relaxed);
  armed_point = -1;
}

void ss_fault_hit(const char *point) {
  if (armed_point < 0 || strcmp(point, k_points[armed_point]) != 0) return;
  if (++hits < armed_nth) return;
  if (armed_action == SS_FAULT_EXIT) _exit(SS_FAULT_EXIT_CODE);
  /* SIGKILL cannot be caught: the process ends here, mid-protocol, and the
   * kernel drops its leases exactly as for an external kill. */
  raise(SIGKILL);
  _exit(SS_FAULT_EXIT_CODE); /* not reached */
}

/* SHMSTREAM_CRASH_AT="point[:nth[:exit]]" arms the point at load time. */
__attribute__((constructor)) static void arm_from_environment(void) {
  const char *spec = getenv("SHMSTREAM_CRASH_AT");
  if (!spec || !*spec) return;
  const char *colon = strchr(spec, ':');
  size_t len = colon ? (size_t)(colon - spec) : strlen(spec);
  int i = point_index(spec, len);
  if (i < 0) return;
  uint32_t nth = colon ? (uint32_t)strtoul(colon + 1, NULL, 10) : 1;
  const char *second = colon ? strchr(colon + 1, ':') : NULL;
  int action = second && strcmp(second + 1, "exit") == 0 ? SS_FAULT_EXIT : SS_FAULT_SIGKILL;
  ss_fault_arm(k_points[i], nth, action);
}
