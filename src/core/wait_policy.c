/* How long a wait spins before it sleeps: the one copy of the rule, for
 * streams (wait.c) and channels (ring.c). The model and its costs are in
 * docs/waiting.md; this file follows its sections. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "core_helpers.h"

/* The price of a nanosecond of spinning relative to one of the waiter's
 * latency is 1/SS_SPIN_IDLE_PRICE while a core is spare (the spin takes a
 * core nobody wants) and 1 when none is (it takes a core from a runnable
 * task: the classic ski-rental). It is a choice of what to pay for latency,
 * not a property of a machine; it also sets the cap: no budget longer than
 * W * price can ever pay (10 W with a spare core, W without). */
#define SS_SPIN_IDLE_PRICE 10
/* Histogram units: each wait adds SS_WAIT_UNIT; past SS_WAIT_WINDOW all
 * buckets are halved (the histogram describes the last ~64 waits). */
#define SS_WAIT_UNIT 16
#define SS_WAIT_WINDOW 1024
/* /proc/loadavg is read at most this often: ~10 us a read, so at most
 * 0.1% of a core. A bound on cost, not a fit to a machine. */
#define SS_LOAD_SAMPLE_NS 10000000LL
/* Wake-up samples taken once per process; W is their median. */
#define SS_WAKE_SAMPLES 7
/* How long the helper sleeps before each wake: a wait worth deciding about
 * sleeps this long or longer, and a core idle that long has left the
 * shallow idle states (and a VM's halt-polling window, ~200 us), whose
 * wake-ups are cheap; measuring after a shorter nap gave 5-25 us where
 * readers after a 100-300 us sleep paid 50-100 us. */
#define SS_WAKE_NAP_NS 500000
/* A measurement whose helper does not answer in this long (a machine so
 * loaded that it ran nothing else) keeps the delay it saw. */
#define SS_WAKE_GIVE_UP_NS 50000000LL

/* Napping (docs/waiting.md, "Napping"). L is the 1-in-SS_NAP_QUANTILE
 * quantile of T: a wait moves it down by (SS_NAP_QUANTILE - 1) D / SS_NAP_STEP
 * when T < L and up by D / SS_NAP_STEP otherwise (never past T), which
 * balances where one wait in SS_NAP_QUANTILE is shorter; D, the running mean
 * of |T - L| (1/SS_NAP_STEP a wait), makes the steps as fine as the waits'
 * jitter and as coarse as a change of period. A handle naps once
 * SS_NAP_SETTLE waits have moved L. Choices of how fast to follow, not fits. */
#define SS_NAP_QUANTILE 10
#define SS_NAP_STEP 16
#define SS_NAP_SETTLE 16
/* The kernel's default timer slack, if prctl cannot say. */
#define SS_DEFAULT_SLACK_NS 50000

/* ---- the process's measurements ------------------------------------------ */

static SS_ATOMIC(int64_t) g_wake_ns = -1; /* W; -1: not measured yet */
static SS_ATOMIC(int) g_load_override = -1;
static SS_ATOMIC(int) g_wake_injected; /* a test fixed W: handles' own observations wait */
static SS_ATOMIC(int) g_contended;   /* the latest view */
static SS_ATOMIC(int) g_over_before; /* the previous sample saw more runnable tasks than CPUs */
static SS_ATOMIC(int) g_preempted;   /* a spin lost its core since the last sample */
static SS_ATOMIC(int64_t) g_next_load_ns;

/* The futex ping: the helper sleeps until `word` reaches i, then stores
 * ack = i. */
typedef struct wake_ping {
  SS_ATOMIC(uint32_t) word;
  SS_ATOMIC(uint32_t) ack;
} wake_ping;

static void *wake_helper(void *arg) {
  wake_ping *p = arg;
  for (uint32_t i = 1; i <= SS_WAKE_SAMPLES; i++) {
    uint32_t w;
    while ((w = atomic_load_explicit(&p->word, memory_order_acquire)) < i)
      ss_futex_wait(&p->word, w, -1);
    atomic_store_explicit(&p->ack, i, memory_order_release);
  }
  return NULL;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* W: wake a sleeping helper thread SS_WAKE_SAMPLES times, each after it
 * slept SS_WAKE_NAP_NS, each time spinning until it answers (so it runs on
 * another core, as a woken reader does); the median of the delays. 0 on one CPU (a spinner there
 * sees nothing until it is preempted) or if no thread can be started. */
static int64_t measure_wake_ns(void) {
  if (ss_plat_cpus_allowed() < 2) return 0;
  wake_ping p;
  atomic_init(&p.word, 0);
  atomic_init(&p.ack, 0);
  pthread_t t;
  if (pthread_create(&t, NULL, wake_helper, &p) != 0) return 0;
  int64_t samples[SS_WAKE_SAMPLES];
  for (uint32_t i = 1; i <= SS_WAKE_SAMPLES; i++) {
    /* The helper reaches FUTEX_WAIT (a few instructions away) and its core
     * goes idle. */
    struct timespec nap = {0, SS_WAKE_NAP_NS};
    nanosleep(&nap, NULL);
    int64_t t0 = ss_monotonic_ns(), now = t0;
    atomic_store_explicit(&p.word, i, memory_order_release);
    ss_futex_wake(&p.word);
    for (unsigned k = 1; atomic_load_explicit(&p.ack, memory_order_acquire) < i; k++) {
      ss_cpu_relax();
      if ((k & 15) == 0) {
        now = ss_monotonic_ns();
        if (now - t0 > SS_WAKE_GIVE_UP_NS) sched_yield();
      }
    }
    samples[i - 1] = ss_monotonic_ns() - t0;
  }
  pthread_join(t, NULL);
  qsort(samples, SS_WAKE_SAMPLES, sizeof samples[0], cmp_i64);
  return samples[SS_WAKE_SAMPLES / 2];
}

/* Set once a thread measuring W has been started in this process. */
static SS_ATOMIC(int) g_measuring;

/* A child forked while the measurement ran has no measuring thread: it
 * starts its own at its first wait. A W already measured is inherited. */
static void forget_unfinished_measurement(void) {
  if (atomic_load_explicit(&g_wake_ns, memory_order_acquire) < 0)
    atomic_store_explicit(&g_measuring, 0, memory_order_relaxed);
}
static void register_atfork(void) { pthread_atfork(NULL, NULL, forget_unfinished_measurement); }
static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;

static void *measure_thread(void *arg) {
  (void)arg;
  int64_t unknown = -1;
  /* Only over "unknown": a W a test injected meanwhile stays. */
  atomic_compare_exchange_strong_explicit(&g_wake_ns, &unknown, measure_wake_ns(),
                                          memory_order_acq_rel, memory_order_relaxed);
  return NULL;
}

/* W, or 0 while it is not known yet: such a wait sleeps at once, which is
 * always correct and costs one wake-up. The first wait of a process starts
 * the measurement (~4 ms of naps) on a thread of its own, so that no wait
 * pays for it in latency. */
static int64_t wake_ns(void) {
  int64_t w = atomic_load_explicit(&g_wake_ns, memory_order_acquire);
  if (w >= 0) return w;
  pthread_once(&g_atfork_once, register_atfork);
  int idle = 0;
  if (atomic_compare_exchange_strong_explicit(&g_measuring, &idle, 1, memory_order_acq_rel,
                                              memory_order_relaxed)) {
    /* The measuring thread (and its helper, which inherits from it) run in
     * the normal class whatever the waiter's policy: a SCHED_FIFO waiter's
     * helper could not preempt a same-priority spinner on its core, and
     * with every core so held each sample lasted until the give-up (W was
     * 50 ms and 0.35 s of a core spun, in a real-time 200 Hz loop). */
    pthread_attr_t attr;
    pthread_t t;
    struct sched_param normal = {0};
    int started = pthread_attr_init(&attr) == 0 &&
                  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) == 0 &&
                  pthread_attr_setinheritsched(&attr, PTHREAD_EXPLICIT_SCHED) == 0 &&
                  pthread_attr_setschedpolicy(&attr, SCHED_OTHER) == 0 &&
                  pthread_attr_setschedparam(&attr, &normal) == 0 &&
                  pthread_create(&t, &attr, measure_thread, NULL) == 0;
    pthread_attr_destroy(&attr);
    if (!started) { /* no thread to be had: measure here, once */
      measure_thread(NULL);
      return atomic_load_explicit(&g_wake_ns, memory_order_acquire);
    }
  }
  return 0;
}

/* Contended: in two samples in a row (one catches a passing kernel
 * thread), more runnable tasks (the waiter among them) than online CPUs, or
 * a spin that lost its core since the sample before. */
static int contended(int64_t now) {
  int o = atomic_load_explicit(&g_load_override, memory_order_relaxed);
  if (o >= 0) return o;
  if (now >= atomic_load_explicit(&g_next_load_ns, memory_order_relaxed)) {
    atomic_store_explicit(&g_next_load_ns, now + SS_LOAD_SAMPLE_NS, memory_order_relaxed);
    static int cpus;
    if (!cpus) cpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
    int r = ss_plat_runnable_tasks();
    int lost = atomic_exchange_explicit(&g_preempted, 0, memory_order_relaxed);
    int over = lost || (r > 0 && cpus > 0 && r > cpus);
    int before = atomic_exchange_explicit(&g_over_before, over, memory_order_relaxed);
    atomic_store_explicit(&g_contended, over && before, memory_order_relaxed);
  }
  return atomic_load_explicit(&g_contended, memory_order_relaxed);
}

void ss_wait_policy_override(int64_t w, int load) {
  atomic_store_explicit(&g_wake_ns, w < 0 ? -1 : w, memory_order_release);
  atomic_store_explicit(&g_wake_injected, w >= 0, memory_order_relaxed);
  if (w < 0) atomic_store_explicit(&g_measuring, 0, memory_order_relaxed); /* measure anew */
  atomic_store_explicit(&g_load_override, load < 0 ? -1 : !!load, memory_order_relaxed);
  atomic_store_explicit(&g_contended, 0, memory_order_relaxed);
  atomic_store_explicit(&g_over_before, 0, memory_order_relaxed);
  atomic_store_explicit(&g_preempted, 0, memory_order_relaxed);
  atomic_store_explicit(&g_next_load_ns, 0, memory_order_relaxed);
}

/* ---- the choice ------------------------------------------------------------ */

static int64_t bucket_edge(int j) { return 1024LL << j; } /* upper edge of bucket j < 16 */

static int bucket_of(int64_t ns) {
  if (ns < 1024) return 0;
  int j = 63 - __builtin_clzll((uint64_t)ns) - 9;
  return j < SS_WAIT_BUCKETS - 1 ? j : SS_WAIT_BUCKETS - 1;
}

#define R memory_order_relaxed

/* Counters are per handle and mostly touched by one thread: a load and a
 * store (no locked read-modify-write on the hot path); two threads waiting
 * on one handle at once may lose a count, which only blurs the statistics. */
static void bump(SS_ATOMIC(uint64_t) *c) {
  atomic_store_explicit(c, atomic_load_explicit(c, R) + 1, R);
}

/* The budget B minimising k E[min(T, B)] + P(T > B) W, k = 1/price, over
 * B = 0, each bucket's upper edge below cap, and cap; each bucket's waits
 * are taken to last its upper edge, except in the bucket the cap cuts:
 * there the share below the cap (the waits spread evenly over the bucket)
 * is caught, each at the cap. Scaled by price * total to stay integer. */
int64_t ss_wait_budget(const ss_wait_stats *ws, int64_t w, int64_t cap, int64_t price) {
  int64_t cost;
  return ss_wait_budget_cost(ws, w, cap, price, &cost);
}

int64_t ss_wait_budget_cost(const ss_wait_stats *ws, int64_t w, int64_t cap, int64_t price,
                            int64_t *cost_out) {
  uint32_t total = atomic_load_explicit(&ws->total, R);
  *cost_out = INT64_MAX;
  if (total == 0) return w < cap ? w : cap; /* no history: the 2-competitive budget */
  int64_t best_b = 0, best = (int64_t)total * price * w; /* B = 0 */
  int64_t caught_cpu = 0, left = total;
  for (int j = 0; j < SS_WAIT_BUCKETS - 1; j++) {
    int64_t edge = bucket_edge(j), low = j ? edge / 2 : 0, b = edge <= cap ? edge : cap;
    int64_t c = atomic_load_explicit(&ws->hist[j], R);
    int64_t caught = edge <= cap ? c : cap > low ? c * (cap - low) / (edge - low) : 0;
    caught_cpu += caught * b;
    left -= caught;
    if (left < 0) left = 0; /* counters blurred by a racing thread */
    int64_t cost = caught_cpu + left * (b + price * w);
    if (cost < best) best = cost, best_b = b;
    if (edge >= cap) break;
  }
  *cost_out = best;
  return best_b;
}

/* The nap pays when the 1 wait in SS_NAP_QUANTILE that comes before L pays
 * a wake-up and the others spin only the margin (S + 2W) after it, at less
 * than the best budget's cost; scaled by price * total as that cost is. */
int64_t ss_wait_nap(int64_t low, uint32_t moves, uint32_t total, int64_t best, int64_t w,
                    int64_t cap, int64_t price, int64_t slack, int64_t timeout_ns) {
  if (moves < SS_NAP_SETTLE || low <= 0 || w <= 0 || total == 0) return 0;
  if (timeout_ns >= 0 && timeout_ns <= low) return 0;
  int64_t margin = slack + 2 * w, nap = low - margin;
  if (nap <= w || margin > cap) return 0;
  int64_t cost = (int64_t)total * (price * w / SS_NAP_QUANTILE + margin);
  return cost < best ? nap : 0;
}

/* The thread's timer slack: how late the kernel may end its timed sleep. */
static int64_t timer_slack_ns(void) {
  int64_t slack = ss_plat_timer_slack_ns();
  return slack < 0 ? SS_DEFAULT_SLACK_NS : slack;
}

/* Move L towards this wait's T (docs/waiting.md, "Napping"). */
static void move_low(ss_wait_stats *ws, int64_t t) {
  int64_t low = atomic_load_explicit(&ws->low_ns, R), d = atomic_load_explicit(&ws->spread_ns, R);
  if (t < 1) t = 1;
  if (low <= 0) {
    low = t;
    d = t / SS_NAP_STEP + 1; /* no spread seen yet: steps of 1/SS_NAP_STEP of T */
  } else {
    int64_t dev = t < low ? low - t : t - low;
    d += (dev - d) / SS_NAP_STEP;
    if (d < 1) d = 1;
    int64_t down = (SS_NAP_QUANTILE - 1) * d / SS_NAP_STEP + 1, up = d / SS_NAP_STEP + 1;
    if (t < low)
      low -= low - t < down ? low - t : down;
    else
      low += t - low < up ? t - low : up;
  }
  atomic_store_explicit(&ws->low_ns, low, R);
  atomic_store_explicit(&ws->spread_ns, d, R);
  uint32_t moves = atomic_load_explicit(&ws->low_moves, R);
  if (moves < SS_NAP_SETTLE) atomic_store_explicit(&ws->low_moves, moves + 1, R);
}

void ss_spin_begin(ss_wait_stats *ws, int64_t cap_ns, int64_t timeout_ns, int64_t now, ss_spin *s) {
  s->start = s->last = now;
  s->end = s->cap_end = now;
  s->wake_ns = 0;
  s->nap_end = now;
  s->low = s->cap = 0;
  s->deadline = ss_deadline_from(now, timeout_ns);
  s->counts = timeout_ns != 0;
  if (!s->counts) return; /* a poll */
  bump(&ws->waits);
  int64_t b = 0, nap = 0;
  if (cap_ns != 0) {
    int64_t w = wake_ns(), seen = atomic_load_explicit(&ws->wake_ns, R);
    /* this handle's own wake-ups, once seen (unless a test fixed W) */
    if (w > 0 && seen > 0 && !atomic_load_explicit(&g_wake_injected, R)) w = seen;
    s->wake_ns = w;
    int busy = contended(now);
    int64_t price = busy ? 1 : SS_SPIN_IDLE_PRICE;
    int64_t cap = price * w;
    if (cap_ns > 0 && cap_ns < cap) cap = cap_ns;
    if (timeout_ns > 0 && timeout_ns < cap) cap = timeout_ns;
    if (busy) bump(&ws->contended);
    if (cap > 0) {
      int64_t best;
      b = ss_wait_budget_cost(ws, w, cap, price, &best);
      int64_t low = atomic_load_explicit(&ws->low_ns, R);
      uint32_t moves = atomic_load_explicit(&ws->low_moves, R);
      uint32_t total = atomic_load_explicit(&ws->total, R);
      /* A slack only shortens the nap and raises its cost: the system call
       * that reads it is made only for a wait that could nap without one
       * (not for every wait of a prompt peer). */
      if (ss_wait_nap(low, moves, total, best, w, cap, price, 0, timeout_ns) > 0)
        nap = ss_wait_nap(low, moves, total, best, w, cap, price, timer_slack_ns(), timeout_ns);
      if (nap > 0) { /* no spin before the nap; ss_spin_nap_over sets it */
        b = cap;
        s->nap_end = now + nap;
        s->low = low;
        s->cap = cap;
      } else {
        s->end = now + b;
        s->cap_end = now + cap;
      }
    }
  }
  atomic_store_explicit(&ws->budget_ns, b, R);
  atomic_store_explicit(&ws->nap_ns, nap, R);
  bump(nap > 0 ? &ws->napped : b > 0 ? &ws->spun : &ws->slept_at_once);
}

void ss_spin_nap_over(ss_spin *s, int64_t now) {
  int64_t due = s->start + s->low;
  s->last = now; /* the nap is not a spin that lost its core */
  int64_t end = (now > due ? now : due) + s->cap;
  s->end = s->cap_end = end < s->deadline ? end : s->deadline;
}

/* A spin lost its core when one gap between its clock reads outlasts the
 * whole spin it may make (its cap, at least W): an interrupt or a VM exit
 * (a few µs, often more than a small W) is not that, a time slice given to
 * another task is. */
int ss_spin_preempted(ss_wait_stats *ws, ss_spin *s, int64_t now) {
  /* a napping wait's spin began at its nap's end: its own cap, not the nap's length */
  int64_t gap = now - s->last, cap = s->nap_end > s->start ? s->cap : s->cap_end - s->start;
  s->last = now;
  if (cap < s->wake_ns) cap = s->wake_ns;
  if (gap <= cap || atomic_load_explicit(&g_load_override, R) >= 0) return 0;
  bump(&ws->preempted);
  atomic_store_explicit(&g_preempted, 1, R);
  return 1;
}

void ss_spin_end(ss_wait_stats *ws, const ss_spin *s, enum ss_wait_end how, int64_t now,
                 int64_t woke_ns) {
  if (!s->counts) return;
  int64_t t = now - s->start, spun = s->last - s->start;
  if (how == SS_WAIT_CAUGHT) {
    bump(&ws->caught);
  } else if (how == SS_WAIT_WOKEN) {
    bump(&ws->slept);
    /* It saw its publication a wake-up after it came, and not during the
     * spin. A stream says when it published: that wake-up is measured, and
     * the handle's W follows it (a running median). A time outside the
     * wait (a replayed or mirrored publication keeps its own) is not one. */
    int64_t w = s->wake_ns > 0 ? s->wake_ns : atomic_load_explicit(&g_wake_ns, R);
    if (woke_ns > 0 && woke_ns <= t) {
      /* A running median (steps of 1/16 of the estimate towards each
       * sample), starting from the process's W: a wake-up delayed by a
       * busy machine moves it a little, not by its size, the first one
       * included (a first sample of 835 us against a W of 15 us once made
       * a 200 Hz reader spin its whole 5 ms waits, its later waits all
       * caught and so never correcting it). */
      int64_t old = atomic_load_explicit(&ws->wake_ns, R);
      if (old <= 0) old = atomic_load_explicit(&g_wake_ns, R);
      int64_t step = old / 16 + 1;
      int64_t est = old <= 0               ? woke_ns
                    : woke_ns > old + step ? old + step
                    : woke_ns < old - step ? old - step
                                           : woke_ns;
      atomic_store_explicit(&ws->wake_ns, est, R);
      w = woke_ns;
    }
    t = t - (w > 0 ? w : 0);
    if (t <= spun) t = spun + 1;
  } else {
    bump(&ws->slept);
  }
  if (how != SS_WAIT_TIMED_OUT) move_low(ws, t);
  int j = bucket_of(t);
  atomic_store_explicit(&ws->hist[j], atomic_load_explicit(&ws->hist[j], R) + SS_WAIT_UNIT, R);
  uint32_t total = atomic_load_explicit(&ws->total, R) + SS_WAIT_UNIT;
  atomic_store_explicit(&ws->total, total, R);
  if (total > SS_WAIT_WINDOW) {
    uint32_t sum = 0;
    for (int i = 0; i < SS_WAIT_BUCKETS; i++) {
      uint32_t h = atomic_load_explicit(&ws->hist[i], R) / 2;
      atomic_store_explicit(&ws->hist[i], h, R);
      sum += h;
    }
    atomic_store_explicit(&ws->total, sum, R);
  }
}

void ss_wait_policy_info_get(const ss_segment *seg, ss_wait_policy_info *out) {
  ss_wait_stats_info(&seg->wait, out);
}

void ss_wait_stats_info(const ss_wait_stats *ws, ss_wait_policy_info *out) {
  int64_t w = atomic_load_explicit(&g_wake_ns, memory_order_acquire);
  out->wake_ns = w;
  out->seen_wake_ns = atomic_load_explicit(&ws->wake_ns, R);
  int o = atomic_load_explicit(&g_load_override, R);
  out->contended = o >= 0 ? o : atomic_load_explicit(&g_contended, R);
  if (w > 0 && out->seen_wake_ns > 0 && !atomic_load_explicit(&g_wake_injected, R))
    w = out->seen_wake_ns;
  out->cap_ns = w < 0 ? -1 : (out->contended ? 1 : SS_SPIN_IDLE_PRICE) * w;
  out->budget_ns = atomic_load_explicit(&ws->budget_ns, R);
  for (int i = 0; i < SS_WAIT_BUCKETS; i++) out->hist[i] = atomic_load_explicit(&ws->hist[i], R);
  out->waits = atomic_load_explicit(&ws->waits, R);
  out->spun = atomic_load_explicit(&ws->spun, R);
  out->caught = atomic_load_explicit(&ws->caught, R);
  out->slept = atomic_load_explicit(&ws->slept, R);
  out->slept_at_once = atomic_load_explicit(&ws->slept_at_once, R);
  out->preempted = atomic_load_explicit(&ws->preempted, R);
  out->contended_waits = atomic_load_explicit(&ws->contended, R);
  out->low_ns = atomic_load_explicit(&ws->low_ns, R); /* 0 until a wait moved it */
  out->nap_ns = atomic_load_explicit(&ws->nap_ns, R);
  out->napped = atomic_load_explicit(&ws->napped, R);
}
