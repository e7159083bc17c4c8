/* Zero-copy messages released out of order (include/shmstream_channel.h,
 * ss_channel_hold_rx): the one rule, for the binding and C consumers. A
 * record's bytes go back to the producer only with every record before
 * it, so the tail moves over the longest prefix of records nobody holds
 * (docs/ABI.md, "Consume"). Handle-local: nothing here is shared memory. */
#include <errno.h>
#include <stdlib.h>

#include "core_helpers.h"

struct ss_rx_hold {
  uint64_t end; /* ring position just past the record (or a run of them) */
  int done;     /* its holder is done with it */
};

static struct ss_rx_hold *hold_at(ss_channel *ch, uint32_t i) {
  return &ch->holds[(ch->holds_first + i) % ch->holds_cap];
}

/* Append (end, done); 0 or ENOMEM. */
static int push(ss_channel *ch, uint64_t end, int done) {
  if (ch->holds_n == ch->holds_cap) {
    uint32_t cap = ch->holds_cap ? ch->holds_cap * 2 : 16;
    struct ss_rx_hold *grown = malloc(sizeof *grown * cap);
    if (!grown) return ENOMEM;
    for (uint32_t i = 0; i < ch->holds_n; i++) grown[i] = *hold_at(ch, i);
    free(ch->holds);
    ch->holds = grown;
    ch->holds_cap = cap;
    ch->holds_first = 0;
  }
  *hold_at(ch, ch->holds_n++) = (struct ss_rx_hold){end, done};
  return 0;
}

int ss_channel_hold_rx(ss_channel *ch) {
  ss_channel_skip_rx(ch);
  if (push(ch, ch->rd, 0) == 0) return SS_OK;
  ss_channel_done_rx(ch); /* no room to remember it: give it back now */
  return ENOMEM;
}

void ss_channel_done_rx(ss_channel *ch) {
  if (ch->holds_n == 0) {
    ss_channel_release_rx(ch, ch->rd);
  } else if (push(ch, ch->rd, 1) != 0) {
    /* Out of memory: the run stays unreleased until a later done_rx finds
     * nothing held and releases up to the read cursor. */
  }
}

void ss_channel_unhold_rx(ss_channel *ch, uint64_t end) {
  for (uint32_t i = 0; i < ch->holds_n; i++) {
    struct ss_rx_hold *h = hold_at(ch, i);
    if (h->end == end && !h->done) {
      h->done = 1;
      break;
    }
  }
  while (ch->holds_n && hold_at(ch, 0)->done) {
    ch->done_upto = hold_at(ch, 0)->end;
    ch->holds_first = (ch->holds_first + 1) % ch->holds_cap;
    ch->holds_n--;
  }
  if (ch->holds_n == 0 || ch->done_upto - ch->tail >= ch->capacity / 8) ss_channel_flush_rx(ch);
}

void ss_channel_flush_rx(ss_channel *ch) {
  if (ch->done_upto > ch->tail) ss_channel_release_rx(ch, ch->done_upto);
}
