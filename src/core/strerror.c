/* Status codes as text: what a C program prints after a failed call.
 * The one table of the codes' meanings; the Python bindings raise richer,
 * per-call messages (src/bindings/_binding.h) and fall back to this text
 * for a status their table has no row for. */
#define _GNU_SOURCE
#include <string.h>

#include "core_helpers.h"

/* Indexed by -status (enum ss_status in include/shmstream.h). A code added
 * there gets its line here; tests/core/test_strerror.py checks every code of the
 * enum has a distinct text. */
static const char *const kStatusText[] = {
    [0] = "success",
    [-SS_ETIMEDOUT] = "timed out: the deadline passed",
    [-SS_ECANCELLED] = "the wait was cancelled (ss_cancel)",
    [-SS_EINCONSISTENT] = ("the published frame is inconsistent: its write was aborted or its "
                           "writer died mid-write"),
    [-SS_ECORRUPT] = "the segment is corrupt (bad magic, checksum or size, or its file shrank)",
    [-SS_EVERSION] = "the segment has a layout version this build does not read",
    [-SS_EKIND] = "the segment is of another kind (stream, channel, array or GPU stream)",
    [-SS_EOWNERDEAD] = "the lock was taken over from a dead owner (the lock is held)",
    [-SS_EDEADLK] = "this thread already holds the lock",
    [-SS_ENOTOWNER] = "this thread does not hold the lock",
    [-SS_EBUSY] = "the segment is still being initialised by its creator",
    [-SS_ENAME] = "invalid name: empty, too long or containing NUL",
    [-SS_EPEERDEAD] = "the other end of the channel died",
    [-SS_EPEERCLOSED] = "the other end closed the channel",
    [-SS_EATTACHED] = "this end of the channel is held by another live process",
    [-SS_ETOOBIG] = "the message can never fit in the channel's ring",
    [-SS_EROLE] = "the call is not possible on this end of the channel",
    [-SS_ECUDA] = "a CUDA driver call failed (ss_cuda_error says which)",
    [-SS_ENOCUDA] = "CUDA is not available (libcuda.so.1 missing or cuInit failed)",
    [-SS_EGPUGONE] = "the GPU stream's creator exited: its device buffer is gone",
    [-SS_EPOISONED] = "device work of a writer that died never completed",
    [-SS_EFORK] = "CUDA state inherited through fork() cannot be used",
    [-SS_ENOTGPU] = "the segment is not a GPU stream, or its GPU area is bad",
    [-SS_DIRECT_ESHORT] = "the file is shorter than offset + nbytes",
    [-SS_DIRECT_ECLOSED] = "the direct reader is closed",
    [-SS_DIRECT_ERANGE] = "a requested row lies outside the array",
    [-SS_DIRECT_ETRUNCATED] = "the file shrank under a read",
    [-SS_DIRECT_ENOTREG] = "the path is not a regular file",
    [-SS_EOWNER] = "the segment belongs to another user, who is not allowed",
    [-SS_EPIDNS] =
        "the GPU stream's creator is in another PID namespace: its buffer cannot be mapped",
};

const char *ss_strerror(int status) {
  if (status > 0) {
    /* An errno value: the C library's description (thread-safe). */
    const char *text = ss_plat_errno_text(status);
    return text ? text : "unknown system error";
  }
  const int count = (int)(sizeof kStatusText / sizeof kStatusText[0]);
  if (status > -count && kStatusText[-status] != NULL) return kStatusText[-status];
  return "unknown shmstream status";
}
