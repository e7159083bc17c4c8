/* The direct reader's block cache: blocks read with O_DIRECT, kept in user
 * memory so that reading them again costs a copy, not a disk read.
 * Not part of the public ABI. docs/direct.md explains the design. */
#ifndef SS_DIRECT_CACHE_H
#define SS_DIRECT_CACHE_H

#include <stddef.h>
#include <stdint.h>

typedef struct ss_dcache ss_dcache;

/* A cache of at most limit_bytes / block blocks of `block` bytes each; NULL
 * when that is 0 blocks (disabled) or out of memory. Block memory is taken
 * as the cache fills, never up front. */
ss_dcache *ss_dcache_new(uint64_t limit_bytes, uint32_t block);
/* Frees every block. No other call may run on c at the same time. */
void ss_dcache_free(ss_dcache *c);

/* If block `key` (file offset / block) is cached: marks it most recently
 * used, calls fn(arg, data) with the shard's lock held (fn must only copy),
 * and returns 1. Otherwise returns 0. */
int ss_dcache_get(ss_dcache *c, uint64_t key, void (*fn)(void *arg, const char *data), void *arg);
/* Stores a copy of block `key` (block bytes at data), evicting the least
 * recently used block of its shard when full. Best effort: silently does
 * nothing when memory cannot be had. */
void ss_dcache_put(ss_dcache *c, uint64_t key, const char *data);
/* Whether the shard of `key` holds any block (unlocked peek: a hint). */
int ss_dcache_maybe(const ss_dcache *c, uint64_t key);

uint64_t ss_dcache_used_bytes(ss_dcache *c);
uint64_t ss_dcache_limit_bytes(const ss_dcache *c);

#endif
