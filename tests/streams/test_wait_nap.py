"""Napping (docs/waiting.md, "Napping"): a wait whose publications come on
a clock sleeps until shortly before the next is due, then spins for it. L,
the 1-in-10 quantile of the handle's recent wait lengths, says when that
is; the nap lasts L - (S + 2W) (S the thread's timer slack) and is taken
when it costs less than the best budget. Checked with the core's own
functions on chosen inputs, and from real waits' counters with W and the
contention state injected; never from wall-clock margins."""

from __future__ import annotations

import os
import subprocess
import threading
import time

import numpy as np
import pytest

import shmstream
import shmstream.milk
from shmstream import _testhooks

import support

# Waits on a clock that nap, then spin: run with the machine to themselves.
pytestmark = pytest.mark.serial

PRICE = 10  # k = 1/10 with a spare core
QUANTILE = 10  # L is the 1-in-10 quantile
STEP = 16  # D moves 1/16 of the way to |T - L|; L steps 9 D/16 down, D/16 up
SETTLE = 16  # a handle naps once 16 waits have moved L
us = 1000


@pytest.fixture(autouse=True)
def _measured_policy():
    yield
    _testhooks.wait_policy_override(-1, -1)


def predicted_nap(low, moves, total, best, w, cap, price, slack, timeout) -> int:
    """docs/waiting.md's rule for the nap, written out from the document."""
    if moves < SETTLE or low <= 0 or w <= 0 or total == 0:
        return 0
    if 0 <= timeout <= low:
        return 0
    margin = slack + 2 * w
    nap = low - margin
    if nap <= w or margin > cap:
        return 0
    return nap if total * (price * w // QUANTILE + margin) < best else 0


def predicted_low(ts: list[int]) -> tuple[int, int]:
    """(L, D) after waits of lengths ts, as the document moves them (C's
    integer division truncates towards zero)."""
    low = d = 0
    for t_seen in ts:
        t = max(t_seen, 1)
        if low <= 0:
            low, d = t, t // STEP + 1
            continue
        d += int((abs(t - low) - d) / STEP)
        d = max(d, 1)
        down, up = (QUANTILE - 1) * d // STEP + 1, d // STEP + 1
        low = low - min(low - t, down) if t < low else low + min(t - low, up)
    return low, d


NAP_PROGRAM = r"""
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include "core_helpers.h"

/* "nap LOW MOVES TOTAL BEST W CAP PRICE SLACK TIMEOUT": ss_wait_nap's answer.
 * "waits W SLACK T1 T2 ...": waits on one handle (W injected, no
 * contention, this thread's timer slack set to SLACK), each ending in its
 * spin T ns after it began; then "LOW NAP_NS NAPPED END_AFTER_NAP" of a last
 * wait: L, the nap it chose, the napped count, and where its spin ends
 * if its nap ends at once (relative to its start). */
int main(void) {
  char what[16];
  while (scanf("%15s", what) == 1) {
    if (!strcmp(what, "preempt")) { /* "preempt W GAP": after a nap, a spin's gap */
      long long w, gap;
      if (scanf("%lld %lld", &w, &gap) != 2) return 2;
      ss_wait_policy_override(w, 0);
      ss_wait_stats ws;
      memset(&ws, 0, sizeof ws);
      int64_t now = 1000000000LL;
      for (int i = 0; i < 20; i++) { /* 5 ms waits: L settles, the last one naps */
        ss_spin sp;
        ss_spin_begin(&ws, -1, -1, now, &sp);
        now += 5000000;
        ss_spin_end(&ws, &sp, SS_WAIT_CAUGHT, now, -1);
      }
      ss_spin sp;
      ss_spin_begin(&ws, -1, -1, now, &sp);
      ss_wait_policy_override(w, -1); /* the load measured again: preemption counts */
      ss_spin_nap_over(&sp, sp.nap_end);
      printf("%d %d\n", sp.nap_end > sp.start, ss_spin_preempted(&ws, &sp, sp.nap_end + gap));
    } else if (!strcmp(what, "nap")) {
      long long a[9];
      for (int i = 0; i < 9; i++)
        if (scanf("%lld", &a[i]) != 1) return 2;
      printf("%lld\n", (long long)ss_wait_nap(a[0], (uint32_t)a[1], (uint32_t)a[2], a[3], a[4],
                                              a[5], a[6], a[7], a[8]));
    } else {
      long long w, slack, n;
      if (scanf("%lld %lld %lld", &w, &slack, &n) != 3) return 2;
      ss_wait_policy_override(w, 0);
      prctl(PR_SET_TIMERSLACK, (unsigned long)slack, 0, 0, 0);
      ss_wait_stats ws;
      memset(&ws, 0, sizeof ws);
      int64_t now = 1000000000LL;
      for (long long i = 0; i < n; i++) {
        long long t;
        if (scanf("%lld", &t) != 1) return 2;
        ss_spin sp;
        ss_spin_begin(&ws, -1, -1, now, &sp);
        if (sp.nap_end > sp.start) ss_spin_nap_over(&sp, sp.nap_end);
        now += t;
        ss_spin_end(&ws, &sp, SS_WAIT_CAUGHT, now, -1);
        now += 1000;
      }
      ss_spin sp;
      ss_spin_begin(&ws, -1, -1, now, &sp);
      ss_wait_policy_info info;
      ss_wait_stats_info(&ws, &info);
      long long end = 0;
      if (sp.nap_end > sp.start) {
        ss_spin_nap_over(&sp, sp.start);
        end = sp.end - sp.start;
      }
      printf("%lld %lld %llu %lld\n", (long long)info.low_ns, (long long)info.nap_ns,
             (unsigned long long)info.napped, end);
    }
  }
  return 0;
}
"""


@pytest.fixture(scope="module")
def nap_program(tmp_path_factory):
    d = tmp_path_factory.mktemp("nap")
    src = d / "nap.c"
    src.write_text(NAP_PROGRAM)
    return support.compile_c(
        str(d / "nap"), [str(src)], flags=("-I", os.path.join(support.ROOT, "src", "core"))
    )


def run(exe: str, text: str) -> list[str]:
    r = subprocess.run([exe], input=text, capture_output=True, text=True, timeout=60, check=True)
    return r.stdout.splitlines()


def test_the_core_picks_the_nap_docs_waiting_md_describes(nap_program):
    w, slack, total = 40 * us, 50 * us, 1024
    sleep_cost = total * PRICE * w  # B = 0: every wait pays a wake-up
    cases = [
        # (low, moves, total, best, w, cap, price, slack, timeout)
        (430 * us, 16, total, sleep_cost, w, 10 * w, PRICE, slack, -1),  # 2 kHz: nap 300 us
        (430 * us, 15, total, sleep_cost, w, 10 * w, PRICE, slack, -1),  # L not settled
        (430 * us, 16, total, sleep_cost, w, w, 1, slack, -1),  # contended: never pays
        (430 * us, 16, total, sleep_cost, w, 10 * w, PRICE, slack, 400 * us),  # timeout < L
        (430 * us, 16, total, sleep_cost, w, 10 * w, PRICE, slack, 500 * us),  # timeout > L
        (150 * us, 16, total, sleep_cost, w, 10 * w, PRICE, slack, -1),  # nap of 20 us < W
        (430 * us, 16, total, sleep_cost, w, 100 * us, PRICE, slack, -1),  # spin_us below S + 2W
        # a prompt peer: spinning 5 us costs less than napping's margin
        (5 * us, 16, total, total * 5 * us, w, 10 * w, PRICE, slack, -1),
        (20 * 1000 * us, 16, total, sleep_cost, w, 10 * w, PRICE, 0, -1),  # 50 Hz, FIFO: S = 0
    ]
    text = "".join("nap " + " ".join(map(str, c)) + "\n" for c in cases)
    got = [int(x) for x in run(nap_program, text)]
    assert got == [predicted_nap(*c) for c in cases]
    assert got[0] == 430 * us - (slack + 2 * w) and got[4] == got[0]
    assert got[1:4] == [0, 0, 0] and got[5:8] == [0, 0, 0]
    assert got[8] == 20 * 1000 * us - 2 * w


def waits_line(w: int, slack: int, ts: list[int]) -> str:
    return f"waits {w} {slack} {len(ts)} {' '.join(map(str, ts))}\n"


def test_l_settles_at_the_1_in_10_quantile_of_a_steady_producer(nap_program):
    # waits of 420-440 us (a 2 kHz producer with jitter), in a fixed order
    rng = np.random.default_rng(7)
    ts = [int(x) for x in rng.integers(420 * us, 440 * us, 400)]
    w, slack = 40 * us, 50 * us
    low, nap, napped, end = map(int, run(nap_program, waits_line(w, slack, ts))[0].split())
    assert low == predicted_low(ts)[0]
    assert 418 * us <= low <= 430 * us, "within the jitter, not an eighth below it"
    share = sum(t < low for t in ts[-200:]) / 200
    assert 0.02 <= share <= 0.25, f"{share:.0%} of the waits came before L"
    # the handle naps from its 17th wait on (the first sets L, 16 move it),
    # L - S - 2W, and after the nap spins up to 10 W past L
    assert nap == low - (slack + 2 * w)
    assert napped == len(ts) + 1 - SETTLE
    assert end == low + 10 * w


def test_one_early_publication_barely_moves_l_and_a_new_period_is_followed(nap_program):
    w, slack = 40 * us, 50 * us
    rng = np.random.default_rng(3)
    steady = [int(x) for x in rng.integers(420 * us, 440 * us, 60)]

    def low_after(ts: list[int]) -> int:
        low = int(run(nap_program, waits_line(w, slack, ts))[0].split()[0])
        assert low == predicted_low(ts)[0]
        return low

    before = low_after(steady)
    # a producer catching up: one wait of ~0 moves L by 9/16 of D, which
    # has taken in 1/16 of that wait's deviation: ~25 us here, not to 0
    after = low_after([*steady, 0])
    assert 0 < before - after < 40 * us
    # the period ten times longer: L passes the old period within 30 waits
    assert low_after(steady + [4300 * us] * 30) > 2 * before
    assert 3800 * us < low_after(steady + [4300 * us] * 60) <= 4300 * us
    # and ten times shorter: within 10 waits
    assert low_after(steady + [43 * us] * 10) <= 43 * us


def test_a_spin_after_a_nap_that_loses_its_core_stops(nap_program):
    # Its spin began at the nap's end: a gap longer than its cap (10 W)
    # between two clock reads is a lost core, however long the nap was.
    w = 50 * us
    assert run(nap_program, f"preempt {w} {10 * w + 1}\n") == ["1 1"]
    assert run(nap_program, f"preempt {w} {5 * w}\n") == ["1 0"]


def test_a_timed_out_wait_leaves_l_alone(name):
    _testhooks.wait_policy_override(50_000, 0)
    with shmstream.create(name, shape=(1,), dtype=np.int64), shmstream.open(name) as r:
        with pytest.raises(TimeoutError):
            r.read_new(timeout=0.01)
        p = r.spin_policy
        assert p["low_ns"] == 0 and p["waits"] == 1 and p["napped"] == 0


# ---- real waits: a stream, a channel and a milk stream -------------------------


class Kind:
    """A publisher and a reader of one kind, on one thread each."""

    def __init__(self, kind: str, name: str, tmp: str) -> None:
        self.kind = kind
        if kind == "stream":
            self.w = shmstream.create(name, shape=(1,), dtype=np.int64)
            self.r = shmstream.open(name)
        elif kind == "milk":
            self.w = shmstream.milk.create(name, (1,), np.int64, dir=tmp)
            self.r = shmstream.milk.open(name, dir=tmp)
        else:
            self.w = shmstream.channel(name, support.CHANNEL_PAIR_CAPACITY)
            self.r = shmstream.open_channel(name)

    def publish(self, i: int) -> None:
        if self.kind == "channel":
            self.w.send(np.int64(i).tobytes())
        else:
            self.w.write(np.full(1, i, np.int64))

    def take(self) -> int:
        if self.kind == "channel":
            return int(np.frombuffer(bytes(self.r.recv(timeout=10).data), np.int64)[0])
        return int(self.r.read_new(timeout=10)[0])

    def policy(self) -> dict:
        return dict(self.r.spin_policy)

    def close(self) -> None:
        self.r.close()
        if self.kind == "milk":
            self.w.unlink()
        self.w.close()  # the name fixture unlinks a stream's and a channel's name


@pytest.fixture(params=["stream", "channel", "milk"])
def pair(request, name, tmp_path):
    k = Kind(request.param, name, str(tmp_path))
    yield k
    k.close()


PERIOD = 0.02  # 50 Hz: a nap of ~20 ms that a scheduling hiccup cannot outlast


def test_a_clocked_producer_is_waited_for_by_napping_and_an_early_one_wakes_the_nap(pair):
    _testhooks.wait_policy_override(50_000, 0)  # W = 50 us, a spare core
    trained = SETTLE + 16
    counted, early = threading.Event(), threading.Event()
    napped_before = [0]

    def produce() -> None:
        start = time.monotonic()
        for i in range(1, trained + 1):  # on a clock: each due PERIOD after the last
            time.sleep(max(0.0, start + i * PERIOD - time.monotonic()))
            pair.publish(i)
        # then one early: as soon as the reader's next wait has begun its nap
        counted.wait(10)
        give_up = time.monotonic() + 10
        while pair.policy()["napped"] == napped_before[0] and time.monotonic() < give_up:
            pass
        early.set()
        pair.publish(trained + 1)

    t = threading.Thread(target=produce)
    t.start()
    try:
        got = [pair.take() for _ in range(trained)]
        p = pair.policy()
        napped_before[0] = p["napped"]
        counted.set()
        assert got == list(range(1, trained + 1)), "every publication, in order"
        assert p["low_ns"] > 0 and p["napped"] >= 1, p
        assert p["napped"] + p["spun"] + p["slept_at_once"] == p["waits"], p
        # the next publication comes most of a period early: the reader's
        # nap (~20 ms) is woken by it, not ended by its timer
        assert pair.take() == trained + 1
    finally:
        counted.set()
        t.join()
    q = pair.policy()
    assert early.is_set()
    assert q["napped"] == p["napped"] + 1, q
    assert q["caught"] == p["caught"] and q["slept"] == p["slept"] + 1, (p, q)


def test_spin_us_0_never_naps(pair):
    _testhooks.wait_policy_override(50_000, 0)
    if pair.kind == "channel":
        pair.r.spin_ns = 0
    else:
        pair.r.spin_us = 0
    start = time.monotonic()
    for i in range(1, SETTLE + 6):

        def later(i: int = i) -> None:
            time.sleep(max(0.0, start + i * 0.005 - time.monotonic()))
            pair.publish(i)

        t = threading.Thread(target=later)
        t.start()
        assert pair.take() == i
        t.join()
    p = pair.policy()
    assert p["napped"] == 0 and p["spun"] == 0 and p["nap_ns"] == 0, p
