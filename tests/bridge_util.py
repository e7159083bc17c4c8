"""Bridge processes for the bridge tests: each runs ``shmstream.bridge.Bridge``
in a spawned child on 127.0.0.1 and answers the test over queues (ready,
wait for an import, stop), so tests synchronise on the bridge's own state,
never on sleeps. The suite's bridges authenticate each other with one
private password file (``AUTH``), as users are told to."""

from __future__ import annotations

import atexit
import functools
import os
import secrets
import shutil
import socket
import tempfile
import traceback
from typing import Any

import support

#: The importing side of a test waits this long for an export to show up.
WAIT = support.WAIT


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def endpoint(port: int) -> str:
    return f"tcp/127.0.0.1:{port}"


def write_password_file(path: Any, user: str, password: str, mode: int = 0o600) -> str:
    """A ``user:password`` file with ``mode``; returns its path as a str."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"{user}:{password}\n")
    os.chmod(path, mode)
    return str(path)


@functools.cache
def password_file() -> str:
    """This test process's password file (a fresh random password, mode
    0600), removed at exit; spawned bridges get its path."""
    d = tempfile.mkdtemp(prefix="shmstream-bridge-auth-")
    atexit.register(shutil.rmtree, d, True)
    return write_password_file(os.path.join(d, "pw"), "suite", secrets.token_hex(16))


def auth() -> dict[str, str]:
    """The keyword arguments that make a Bridge or remote_exports one of the
    suite's authenticated peers."""
    return {"password_file": password_file()}


def auth_argv() -> list[str]:
    """The same for the ``shmstream`` command."""
    return ["--password-file", password_file()]


_AUTH_KEYS = ("password_file", "tls_cert", "tls_key", "tls_ca", "insecure", "config")


def _bridge_main(kwargs: dict, commands: Any, replies: Any) -> None:
    import logging

    from shmstream.bridge import Bridge

    logging.basicConfig(
        level=logging.WARNING, format=f"bridge {kwargs.get('namespace')}: %(message)s"
    )
    try:
        bridge = Bridge(**kwargs).start()
    except BaseException:  # noqa: BLE001 - reported to the parent
        replies.put(("error", traceback.format_exc()))
        return
    replies.put(("ready", bridge.id))
    try:
        while True:
            cmd, *args = commands.get()
            if cmd == "stop":
                break
            try:
                if cmd == "wait_import":
                    bridge.wait_for_import(args[0], timeout=args[1])
                    replies.put(("ok", None))
                elif cmd == "wait_export":
                    bridge.wait_for_export(args[0], timeout=args[1])
                    replies.put(("ok", None))
                elif cmd == "imported":
                    replies.put(("ok", bridge.imported))
                elif cmd == "refused":  # local name -> why its import was refused
                    replies.put(("ok", dict(bridge._failed)))
                else:
                    replies.put(("error", f"unknown command {cmd!r}"))
            except BaseException:  # noqa: BLE001 - reported to the parent
                replies.put(("error", traceback.format_exc()))
    finally:
        bridge.close()
        replies.put(("closed", None))


class BridgeProc:
    """A bridge in a child process. ``kill()`` is SIGKILL (no clean-up at
    all, as when a host dies); ``stop()`` closes it cleanly."""

    def __init__(self, **kwargs: Any) -> None:
        if not any(k in kwargs for k in _AUTH_KEYS):
            kwargs.update(auth())
        self.kwargs = kwargs
        self.commands = support.SPAWN.Queue()
        self.replies = support.SPAWN.Queue()
        self.process = support.SPAWN.Process(
            target=_bridge_main, args=(kwargs, self.commands, self.replies), daemon=True
        )
        self.process.start()
        self.id = self._reply("ready", 60)

    def _reply(self, expected: str, timeout: float) -> Any:
        try:
            kind, value = self.replies.get(timeout=timeout)
        except Exception as exc:  # queue.Empty
            raise AssertionError(
                f"bridge {self.kwargs.get('namespace')} answered nothing in {timeout} s "
                f"(alive={self.process.is_alive()}, exitcode={self.process.exitcode})"
            ) from exc
        if kind == "error":
            raise AssertionError(f"bridge {self.kwargs.get('namespace')} failed:\n{value}")
        assert kind == expected, (kind, value)
        return value

    def call(self, cmd: str, *args: Any, timeout: float = WAIT) -> Any:
        self.commands.put((cmd, *args))
        return self._reply("ok", timeout + 10)

    def wait_import(self, local: str, timeout: float = WAIT) -> None:
        self.call("wait_import", local, timeout, timeout=timeout)

    def wait_export(self, name: str, timeout: float = WAIT) -> None:
        self.call("wait_export", name, timeout, timeout=timeout)

    def stop(self) -> None:
        if self.process.is_alive():
            self.commands.put(("stop",))
            try:
                self._reply("closed", WAIT)
            except AssertionError:
                pass
            self.process.join(WAIT)
        self.kill()

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(WAIT)
