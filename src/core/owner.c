/* Who may open a segment (docs/ABI.md, "Owner and PID namespace"): its
 * file's owner must be the caller's effective uid, or a uid the caller
 * allows (ss_open_opts, or SHMSTREAM_ALLOW_OWNERS): another user's segment
 * is that user's channel into this process. The creator's PID namespace
 * is recorded at create: every kind judges liveness by lease (liveness.c),
 * right from any namespace, and a GPU stream maps its device buffer only in
 * the creator's (cuda_stream.c). A shared array has no word judged by pid
 * after create.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core_helpers.h"

#define SS_ALLOW_OWNERS_ENV "SHMSTREAM_ALLOW_OWNERS"

int ss_pidns_self(uint32_t *dev, uint64_t *ino) { return ss_plat_pidns_self(dev, ino); }

int ss_pidns_match(const ss_identity *id) {
  if (id->pidns_ino == 0) return -1; /* the creator had no /proc: unknown */
  uint32_t dev;
  uint64_t ino;
  if (ss_pidns_self(&dev, &ino) != 0 || ino == 0) return -1;
  if (ino != id->pidns_ino) return 0;
  if (dev && id->pidns_dev && dev != id->pidns_dev) return 0;
  return 1;
}

void ss_pidns_record(ss_identity *id) { ss_pidns_self(&id->pidns_dev, &id->pidns_ino); }

/* Is uid named in SHMSTREAM_ALLOW_OWNERS (uids or user names, separated by
 * commas or blanks)? Tokens that are neither are ignored. */
static int env_allows(uint32_t uid) {
  const char *env = getenv(SS_ALLOW_OWNERS_ENV);
  if (!env) return 0;
  const char *p = env;
  while (*p) {
    size_t n = strcspn(p, ", \t");
    if (n > 0 && n < 256) {
      char tok[256];
      memcpy(tok, p, n);
      tok[n] = '\0';
      char *end;
      errno = 0;
      unsigned long long v = strtoull(tok, &end, 10);
      if (*end == '\0' && tok[0] != '-') {
        if (errno == 0 && v == uid) return 1;
      } else {
        struct passwd pw, *found = NULL;
        char buf[4096];
        if (getpwnam_r(tok, &pw, buf, sizeof buf, &found) == 0 && found && found->pw_uid == uid)
          return 1;
      }
    }
    p += n;
    if (*p) p++;
  }
  return 0;
}

int ss_owner_record(int fd, ss_segment *seg) {
  struct stat st;
  if (fstat(fd, &st) != 0) return errno;
  seg->owner_uid = (uint32_t)st.st_uid;
  seg->file_mode = (uint32_t)(st.st_mode & 07777);
  return SS_OK;
}

int ss_owner_check(int fd, ss_segment *seg, const ss_open_opts *opts) {
  int rc = ss_owner_record(fd, seg);
  if (rc) return rc;
  uint32_t uid = seg->owner_uid;
  if (uid == (uint32_t)geteuid()) return SS_OK;
  for (size_t i = 0; opts && opts->allow_owners && i < opts->n_allow_owners; i++)
    if (opts->allow_owners[i] == uid) return SS_OK;
  return env_allows(uid) ? SS_OK : SS_EOWNER;
}

int ss_owner_same(int fd, const ss_segment *seg) {
  struct stat st;
  if (fstat(fd, &st) != 0) return errno;
  return (uint32_t)st.st_uid == seg->owner_uid ? SS_OK : SS_EOWNER;
}
