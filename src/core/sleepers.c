/* Who sleeps on a stream: the sleeper table (docs/ABI.md, "Sleeper table"
 * and "Wait"). A reader about to sleep takes a slot holding its identity
 * (its handle's lease) and sets the slot's bit in notify.sleepers; the
 * writer wakes only when a bit (or the slot-less `waiters` count) is set.
 * A reader killed while asleep leaves its bit set: the writer, finding that
 * FUTEX_WAKE woke nobody, checks the owners of the set bits and clears the
 * dead ones, so writes go back to making no syscall. */
#define _GNU_SOURCE
#include "core_helpers.h"

/* A slot holds the sleeper handle's lease (docs/ABI.md, "Stream lock by
 * lease"), judged by l2, so sleepers in another PID namespace are judged
 * rightly. */
static uint64_t my_word(ss_segment *seg) { return ss_lease_mine(seg); }

static int word_alive(const ss_segment *seg, uint64_t word) {
  return ss_lease_alive(seg, word) != 0;
}

/* A heal checks /proc (or a lease) for each set bit: at most once per
 * SS_HEAL_INTERVAL_NS (src/core/core_helpers.h) per handle. */

/* Clear slot i if its owner word is still `word` (dead): the bit first
 * (z3), then the word (z4), as a reader that leaves. */
static void clear_slot(ss_segment *seg, uint32_t i, uint64_t word) {
  ss_stream_area *sa = &seg->hdr->stream;
  atomic_fetch_and_explicit(&seg->hdr->notify.sleepers, ~(1ull << i), memory_order_seq_cst);
  atomic_compare_exchange_strong_explicit(&sa->sleeper[i], &word, 0, memory_order_release,
                                          memory_order_relaxed);
}

int ss_sleeper_claim(ss_segment *seg) {
  ss_stream_area *sa = &seg->hdr->stream;
  uint64_t mine = my_word(seg);
  if (!mine) return -1; /* no lease to name: counted in `waiters` instead */
  for (int pass = 0; pass < 2; pass++) {
    for (uint32_t i = 0; i < SS_SLEEPER_SLOTS; i++) {
      uint64_t cur = atomic_load_explicit(&sa->sleeper[i], memory_order_relaxed);
      if (cur) {
        /* Second pass (table full): a slot whose owner died, taken after
         * it is cleared (the next sleeper corrects what a death left). */
        if (pass == 0 || word_alive(seg, cur)) continue;
        clear_slot(seg, i, cur);
        cur = 0;
      }
      /* SYNC POINT (z1): the slot is ours once the CAS stores our word. */
      if (!atomic_compare_exchange_strong_explicit(&sa->sleeper[i], &cur, mine,
                                                   memory_order_acq_rel, memory_order_relaxed))
        continue;
      SS_CRASH_POINT("sleep.claim");
      /* SYNC POINT (z2): the bit is set (seq_cst RMW) before the waiter's
       * loop fence, so a writer whose fence comes later sees it. */
      atomic_fetch_or_explicit(&seg->hdr->notify.sleepers, 1ull << i, memory_order_seq_cst);
      return (int)i;
    }
  }
  return -1; /* more than 64 sleepers: the caller counts itself in `waiters` */
}

void ss_sleeper_release(ss_segment *seg, int slot) {
  if (slot < 0) return;
  /* SYNC POINT (z3): the bit is cleared (seq_cst RMW) before the word, so
   * a writer never finds a set bit whose slot is free for another reader. */
  atomic_fetch_and_explicit(&seg->hdr->notify.sleepers, ~(1ull << slot), memory_order_seq_cst);
  SS_CRASH_POINT("sleep.release");
  /* SYNC POINT (z4): the word freed last (release): a claimer that takes
   * the slot (z1) finds its bit already clear. */
  atomic_store_explicit(&seg->hdr->stream.sleeper[slot], 0, memory_order_release);
}

void ss_heal_sleepers(ss_segment *seg) {
  int64_t now = ss_monotonic_ns();
  if (now < seg->next_heal_ns) return;
  seg->next_heal_ns = now + SS_HEAL_INTERVAL_NS;
  ss_stream_area *sa = &seg->hdr->stream;
  uint64_t bits = atomic_load_explicit(&seg->hdr->notify.sleepers, memory_order_relaxed);
  while (bits) {
    uint32_t i = (uint32_t)__builtin_ctzll(bits);
    bits &= bits - 1;
    uint64_t w = atomic_load_explicit(&sa->sleeper[i], memory_order_acquire);
    if (w && !word_alive(seg, w)) clear_slot(seg, i, w);
  }
}
