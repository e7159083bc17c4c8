/* The direct reader's block cache (docs/direct.md, "Block cache").
 *
 * Blocks (the reader's O_DIRECT unit, normally 4 KiB) are keyed by their
 * index in the file. The cache is split into up to 16 shards by a hash of
 * the key, each with its own mutex, chained hash table and LRU list, so
 * threads reading different blocks rarely meet on a lock. A lock is held
 * only to look up, link and copy one block (at most a few KiB of memcpy);
 * never across I/O. Block memory comes in chunks of up to 1 MiB as a shard
 * fills; the bookkeeping arrays are made on a shard's first insert. The
 * bound is exact: limit / block blocks in all, split among the shards.
 */
#define _GNU_SOURCE
#include "direct_cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define NIL UINT32_MAX
#define MAX_SHARDS 16u
#define MIN_SHARD_BLOCKS 64u
#define CHUNK_BYTES (1u << 20)

typedef struct shard {
  pthread_mutex_t mu;
  uint32_t cap;      /* blocks this shard may hold */
  uint32_t used;     /* blocks held (slots 0..used-1 are in use) */
  uint32_t nbuckets; /* power of two >= cap; 0 until the first insert */
  uint32_t *bucket;  /* first slot of each hash chain */
  uint64_t *key;     /* per slot */
  uint32_t *hnext;   /* per slot: next in its hash chain */
  uint32_t *prev, *next; /* per slot: LRU list, head = most recent */
  uint32_t head, tail;
  uint32_t per_chunk;
  char **chunk;      /* chunk i holds slots [i * per_chunk, (i + 1) * per_chunk) */
  char pad[64];      /* keep shards' locks on separate cache lines */
} shard;

struct ss_dcache {
  uint32_t block;
  uint32_t nshards; /* power of two */
  uint64_t limit;   /* blocks * block */
  shard s[];
};

static uint64_t mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ULL;
  k ^= k >> 33;
  return k;
}

ss_dcache *ss_dcache_new(uint64_t limit_bytes, uint32_t block) {
  if (block == 0) return NULL;
  uint64_t blocks = limit_bytes / block;
  if (blocks == 0) return NULL;
  if (blocks > (uint64_t)NIL - 1) blocks = (uint64_t)NIL - 1; /* 16 TiB of 4 KiB blocks */
  uint32_t n = 1;
  while (n < MAX_SHARDS && blocks / (n * 2) >= MIN_SHARD_BLOCKS) n *= 2;
  ss_dcache *c = calloc(1, sizeof *c + n * sizeof(shard));
  if (!c) return NULL;
  c->block = block;
  c->nshards = n;
  c->limit = blocks * block;
  for (uint32_t i = 0; i < n; i++) {
    shard *s = &c->s[i];
    pthread_mutex_init(&s->mu, NULL);
    s->cap = (uint32_t)(blocks / n + (i < blocks % n));
    s->head = s->tail = NIL;
    uint32_t pc = CHUNK_BYTES / block;
    s->per_chunk = pc == 0 ? 1 : (pc < s->cap ? pc : s->cap);
  }
  return c;
}

static void shard_release(shard *s) {
  if (s->chunk) {
    for (uint32_t i = 0; i * s->per_chunk < s->used; i++) free(s->chunk[i]);
  }
  free(s->chunk);
  free(s->bucket);
  free(s->key);
  free(s->hnext);
  free(s->prev);
  free(s->next);
}

void ss_dcache_free(ss_dcache *c) {
  if (!c) return;
  for (uint32_t i = 0; i < c->nshards; i++) {
    shard_release(&c->s[i]);
    pthread_mutex_destroy(&c->s[i].mu);
  }
  free(c);
}

static shard *shard_of(const ss_dcache *c, uint64_t key, uint64_t *h) {
  *h = mix(key);
  return (shard *)&c->s[(*h >> 60) & (c->nshards - 1)];
}

static char *slot_data(const ss_dcache *c, const shard *s, uint32_t slot) {
  return s->chunk[slot / s->per_chunk] + (size_t)(slot % s->per_chunk) * c->block;
}

static uint32_t find(const shard *s, uint64_t key, uint64_t h) {
  if (s->nbuckets == 0) return NIL;
  uint32_t i = s->bucket[h & (s->nbuckets - 1)];
  while (i != NIL && s->key[i] != key) i = s->hnext[i];
  return i;
}

static void lru_unlink(shard *s, uint32_t i) {
  if (s->prev[i] != NIL)
    s->next[s->prev[i]] = s->next[i];
  else
    s->head = s->next[i];
  if (s->next[i] != NIL)
    s->prev[s->next[i]] = s->prev[i];
  else
    s->tail = s->prev[i];
}

static void lru_push_front(shard *s, uint32_t i) {
  s->prev[i] = NIL;
  s->next[i] = s->head;
  if (s->head != NIL)
    s->prev[s->head] = i;
  else
    s->tail = i;
  s->head = i;
}

static void hash_unlink(shard *s, uint32_t i) {
  uint32_t *p = &s->bucket[mix(s->key[i]) & (s->nbuckets - 1)];
  while (*p != i) p = &s->hnext[*p];
  *p = s->hnext[i];
}

int ss_dcache_maybe(const ss_dcache *c, uint64_t key) {
  uint64_t h;
  const shard *s = shard_of(c, key, &h);
  return __atomic_load_n(&s->used, __ATOMIC_RELAXED) != 0;
}

int ss_dcache_get(ss_dcache *c, uint64_t key, void (*fn)(void *arg, const char *data), void *arg) {
  uint64_t h;
  shard *s = shard_of(c, key, &h);
  pthread_mutex_lock(&s->mu);
  uint32_t i = find(s, key, h);
  if (i != NIL) {
    if (s->head != i) {
      lru_unlink(s, i);
      lru_push_front(s, i);
    }
    fn(arg, slot_data(c, s, i));
  }
  pthread_mutex_unlock(&s->mu);
  return i != NIL;
}

/* The shard's bookkeeping arrays, made on its first insert. */
static int shard_setup(shard *s) {
  uint32_t nb = 1;
  while (nb < s->cap) nb *= 2;
  uint32_t nchunks = (s->cap + s->per_chunk - 1) / s->per_chunk;
  s->bucket = malloc((size_t)nb * sizeof *s->bucket);
  s->key = malloc((size_t)s->cap * sizeof *s->key);
  s->hnext = malloc((size_t)s->cap * sizeof *s->hnext);
  s->prev = malloc((size_t)s->cap * sizeof *s->prev);
  s->next = malloc((size_t)s->cap * sizeof *s->next);
  s->chunk = calloc(nchunks, sizeof *s->chunk);
  if (!s->bucket || !s->key || !s->hnext || !s->prev || !s->next || !s->chunk) {
    shard_release(s);
    s->bucket = NULL;
    s->key = NULL;
    s->hnext = s->prev = s->next = NULL;
    s->chunk = NULL;
    return 0;
  }
  memset(s->bucket, 0xff, (size_t)nb * sizeof *s->bucket); /* all NIL */
  s->nbuckets = nb;
  return 1;
}

void ss_dcache_put(ss_dcache *c, uint64_t key, const char *data) {
  uint64_t h;
  shard *s = shard_of(c, key, &h);
  pthread_mutex_lock(&s->mu);
  if (s->nbuckets == 0 && !shard_setup(s)) goto out;
  uint32_t i = find(s, key, h);
  if (i != NIL) {
    /* Another thread read it too, meanwhile: the data is the same. */
    if (s->head != i) {
      lru_unlink(s, i);
      lru_push_front(s, i);
    }
    goto out;
  }
  if (s->used < s->cap) {
    i = s->used;
    uint32_t ch = i / s->per_chunk;
    if (i % s->per_chunk == 0 && !s->chunk[ch]) {
      void *m;
      if (posix_memalign(&m, 4096, (size_t)s->per_chunk * c->block) != 0) goto out;
      s->chunk[ch] = m;
    }
    __atomic_store_n(&s->used, i + 1, __ATOMIC_RELAXED);
  } else {
    i = s->tail; /* full: reuse the least recently used block */
    lru_unlink(s, i);
    hash_unlink(s, i);
  }
  s->key[i] = key;
  memcpy(slot_data(c, s, i), data, c->block);
  uint32_t *b = &s->bucket[h & (s->nbuckets - 1)];
  s->hnext[i] = *b;
  *b = i;
  lru_push_front(s, i);
out:
  pthread_mutex_unlock(&s->mu);
}

uint64_t ss_dcache_used_bytes(ss_dcache *c) {
  uint64_t n = 0;
  for (uint32_t i = 0; i < c->nshards; i++) n += __atomic_load_n(&c->s[i].used, __ATOMIC_RELAXED);
  return n * c->block;
}

uint64_t ss_dcache_limit_bytes(const ss_dcache *c) { return c->limit; }
