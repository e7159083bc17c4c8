"""Where a stream stands: its counters (``count``, ``missed_writes``, …),
the last write's time, id and age, whether its creator lives, and
``describe``. A mixin of :class:`shmstream.SharedMemory`; every value comes
from the segment's published words or from what the handle copied at open.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

from ..common import _proc
from ._checks import check_positive_seconds
from .publication import STATE_NAMES

if TYPE_CHECKING:
    from ._handle import HandleState as _Handle
else:
    _Handle = object  # the protocol is for mypy only


class Status(_Handle):
    """Counter and status properties of a stream handle."""

    __slots__ = ()

    @property
    def count(self) -> int:
        """Completed writes since the stream was created."""
        seg = self._seg
        if seg is None:
            raise self._closed_error("read count from")
        return seg.count

    @property
    def spin_policy(self) -> dict:
        """This handle's wait policy (docs/waiting.md): the process's measured
        wake-up cost ``wake_ns``, this handle's observed one ``seen_wake_ns``
        (0: none yet), the spin cap ``cap_ns``, whether it is
        ``contended``, the ``budget_ns`` chosen for the last wait, the
        ``histogram`` of wait lengths, ``low_ns`` (when its publications are
        due, 0 until known) and ``nap_ns`` (the last wait's nap, 0: none),
        and the counters ``waits``, ``spun``, ``napped``, ``caught`` (ended
        in the spin), ``slept``, ``slept_at_once``, ``preempted`` and
        ``contended_waits``."""
        return self._check_open("read spin_policy from").spin_policy

    @property
    def last_read_count(self) -> int:
        """The count of the publication this handle read last (or the count
        when it was opened)."""
        self._check_open("read last_read_count from")
        return self._last_read

    @property
    def missed_writes(self) -> int:
        """Writes skipped between this handle's last two reads."""
        self._check_open("read missed_writes from")
        return self._missed

    @property
    def total_missed_writes(self) -> int:
        """All writes this handle's reads have skipped."""
        self._check_open("read total_missed_writes from")
        return self._total_missed

    @property
    def write_time(self) -> float:
        """UNIX time of the last completed write (0.0 before the first)."""
        seg = self._check_open("read write_time from")
        return seg.write_time_ns / 1e9

    @property
    def write_sequence(self) -> int:
        """The seqlock word: odd while a write is in progress."""
        seg = self._check_open("read write_sequence from")
        return seg.seq

    @property
    def frame_id(self) -> int:
        """The frame id of the last write (0 until a write sets one)."""
        seg = self._check_open("read frame_id from")
        return seg.frame_id

    @property
    def creator_pid(self) -> int:
        self._check_open("read creator_pid from")
        return self._creator_pid

    @property
    def age(self) -> float:
        """Seconds since the last completed write; ``inf`` before the first."""
        seg = self._check_open("read age from")
        ns = seg.write_time_ns
        if ns == 0:
            return math.inf
        return max(0.0, time.time() - ns / 1e9)

    def is_stale(self, max_age: float) -> bool:
        """True if the last write is older than ``max_age`` seconds (always
        True before the first write)."""
        return self.age > check_positive_seconds("max_age", max_age)

    def creator_alive(self) -> bool:
        """Whether the process that CREATED the stream still runs: its
        creator, not whoever writes it now (a stream made by a set-up
        script and written by another process reads False while frames
        flow). Checked by pid and start time, so a reused pid does not
        count. From another PID namespace (a container sharing /dev/shm),
        where that pid means nothing, whether the creator's handle is still
        open: its lease (docs/ABI.md, "Stream lock by lease")."""
        seg = self._check_open("check creator liveness for")
        if int(seg.pidns_match) == 0:
            return int(seg.leases()[0]) == 1
        return _proc.alive(self._creator_pid, self._creator_ticks)

    def producer_alive(self) -> bool:
        """pyshmem's name for :meth:`creator_alive`: whether the stream's
        CREATOR runs, not its writer (``describe()``'s ``producer:`` line)."""
        return self.creator_alive()

    def describe(self) -> str:
        """A human-readable, multi-line summary of the stream."""
        seg = self._check_open("describe")
        owner_pid = seg.owner_pid
        lines = [
            f"name:         {self.name}",
            f"shape:        {self.shape}",
            f"dtype:        {self.dtype}",
            f"size:         {self.size} bytes",
            f"gpu_enabled:  {self.gpu_enabled}",
            f"gpu_device:   {self.gpu_device}",
            f"cpu_mirror:   {self.cpu_mirror}",
            f"count:        {seg.count}",
            f"write_time:   {seg.write_time_ns / 1e9}",
            f"write_seq:    {seg.seq}",
            f"owner:        {self.owner}",
            f"readonly:     {self.readonly}",
            f"creator_pid:  {self._creator_pid}",
            f"producer:     {'alive' if self.producer_alive() else 'dead'}",
            f"age:          {self.age:.3f} s",
            f"notify:       {self.notify}",
            f"history:      {seg.history}",
            f"frame_id:     {seg.frame_id}",
            f"state:        {STATE_NAMES.get(seg.read_state, seg.read_state)}",
            f"lock_owner:   {owner_pid if owner_pid else None}",
            f"instance_id:  {self._instance_id}",
            f"segment:      {self._segname}",
        ]
        return "\n".join(lines)
