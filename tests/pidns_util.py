"""Processes in their own PID namespace, as in two containers that share
/dev/shm and nothing else (a Kubernetes pod's memory emptyDir, docker
--ipc): ``unshare --pid --fork --mount-proc python -c CODE``. The Python
process is pid 1 of its namespace, with its own /proc.

The test talks to it by lines: the child prints a line when it reaches a
point (``say("ready")``), the test sends it lines on stdin
(``child.tell("go")``, read by the child's ``hear()``). Nothing waits on a
sleep. ``kill()`` SIGKILLs the Python process from the test's namespace
(an ancestor's SIGKILL reaches a namespace's pid 1; its own does not)."""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

import support

#: Prepended to every child's code: how it talks to the test.
PRELUDE = """
import sys
def say(*words):
    print(*words, flush=True)
def hear():
    return sys.stdin.readline().strip()
"""


def _skip_reason(stderr: str) -> str | None:
    if "Operation not permitted" in stderr or "unshare failed" in stderr:
        return f"unshare --pid is not permitted here: {stderr.strip()[-200:]}"
    return None


class NsChild:
    """``code`` run by Python as pid 1 of a new PID namespace. ``kill()``
    SIGKILLs unshare's child: the Python process, or for a nested one the
    inner unshare, pid 1 of the outer namespace, whose death ends all."""

    def __init__(self, code: str, depth: int = 1) -> None:
        """``depth`` 2: in a namespace nested in a new one (unshare twice)."""
        if shutil.which("unshare") is None:
            pytest.skip("unshare(1) is not installed")
        unshare = ["unshare", "--pid", "--fork", "--mount-proc"]
        self.proc = subprocess.Popen(
            [
                *unshare * (depth - 1),
                *unshare,
                sys.executable,
                "-c",
                PRELUDE + textwrap.dedent(code),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.stderr = ""
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)  # end of output

    def expect(self, prefix: str, timeout: float = support.WAIT) -> str:
        """The next line, which must start with ``prefix``; its rest."""
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no {prefix!r} from the child in {timeout} s") from None
        if line is None:
            self.proc.wait(support.WAIT)
            err = self.proc.stderr.read() if self.proc.stderr else ""
            reason = _skip_reason(err)
            if reason:
                pytest.skip(reason)
            raise AssertionError(
                f"the child ended (exit {self.proc.returncode}) before {prefix!r}:\n{err}"
            )
        assert line.startswith(prefix), f"expected {prefix!r}, got {line!r}"
        return line[len(prefix) :].strip()

    def tell(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def python_pid(self) -> int:
        """The Python process's pid in the test's namespace (unshare's child)."""
        upid = self.proc.pid
        try:
            with open(f"/proc/{upid}/task/{upid}/children") as f:
                kids = f.read().split()
        except OSError:
            kids = []
        if not kids:  # no CONFIG_PROC_CHILDREN: scan for unshare's child
            for d in os.listdir("/proc"):
                if d.isdigit():
                    try:
                        with open(f"/proc/{d}/stat") as f:
                            fields = f.read().rsplit(")", 1)[1].split()
                    except OSError:
                        continue
                    if int(fields[1]) == upid:
                        kids.append(d)
        assert kids, "the namespace's Python process is gone"
        return int(kids[0])

    def kill(self) -> None:
        """SIGKILL the Python process (pid 1 there) and wait for its namespace to end."""
        os.kill(self.python_pid(), signal.SIGKILL)
        self.proc.wait(support.WAIT)

    def finish(self, timeout: float = support.WAIT) -> str:
        """Close its stdin, wait for it to exit 0; its output not yet expected."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout)
        err = self.proc.stderr.read() if self.proc.stderr else ""
        rest = []
        while (line := self.lines.get(timeout=timeout)) is not None:
            rest.append(line)
        reason = _skip_reason(err)
        if self.proc.returncode != 0 and reason:
            pytest.skip(reason)
        assert self.proc.returncode == 0, f"exit {self.proc.returncode}:\n{err}"
        return "\n".join(rest)

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            try:
                os.kill(self.python_pid(), signal.SIGKILL)
            except (AssertionError, OSError):
                self.proc.kill()
            self.proc.wait(support.WAIT)
