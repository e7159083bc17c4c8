"""Two bridges over Eclipse Zenoh, as on two hosts, here on 127.0.0.1.

The "camera host" bridge exports the stream ``ex-<pid>-cam``; the "real-time
computer" bridge mirrors it as ``ex-<pid>-remote/ex-<pid>-cam``. A reader of
the mirror gets the source's frames with their count, frame id and write
time, and learns from the mirror's status stream when the source goes away.
The two bridges let in only each other: both hold the same private password
file (one ``user:password`` line, mode 0600). On two real hosts, with that
file copied to both, run the two halves as

    shmstream bridge --export 'cam/*' --listen tcp/0.0.0.0:7447 --password-file ~/.bridge-pw
    shmstream bridge --import 'cam/*' --local-prefix remote/ --connect tcp/camhost:7447 \
        --password-file ~/.bridge-pw

Needs Zenoh: ``pip install ".[zenoh]"`` from a checkout, ``pip install
"shmstream[zenoh]"`` once released.
"""
import os
import secrets
import socket
import tempfile

import numpy as np

import shmstream
from shmstream.bridge import Bridge, mirror_status, status_name


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_password_file(directory: str) -> str:
    path = os.path.join(directory, "bridge-pw")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # private from the start
    with os.fdopen(fd, "w") as f:
        f.write(f"rig:{secrets.token_urlsafe(24)}\n")
    return path


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        run(write_password_file(d))


def run(password_file: str) -> None:
    tag = f"ex-{os.getpid()}-"
    name, prefix = tag + "cam", tag + "remote/"
    endpoint = f"tcp/127.0.0.1:{free_port()}"
    cam = shmstream.create(name, shape=(120, 160), dtype=np.uint16)
    cam.write(np.zeros((120, 160), np.uint16), frame_id=0)
    camhost = Bridge(exports=name, namespace="camhost", listen=[endpoint],
                     password_file=password_file).start()
    rtc = Bridge(imports=name, local_prefix=prefix, connect=[endpoint],
                 password_file=password_file, unlink_on_close=True).start()
    try:
        rtc.wait_for_import(prefix + name, timeout=30)
        mirror = shmstream.open(prefix + name, readonly=True)
        mirror.read_after(0, timeout=30)  # the frame written before the bridges started
        crossed = 0
        for i in range(1, 101):  # one frame at a time, so none is skipped
            cam.write(np.full((120, 160), i, np.uint16), frame_id=1000 + i)
            pub = mirror.read_after_publication(cam.count - 1, timeout=30)
            assert (pub.payload == i).all() and pub.frame_id == 1000 + i
            assert pub.count == cam.count and abs(pub.write_time - cam.write_time) < 1e-6
            crossed += 1
        alive = mirror_status(prefix + name)["source_alive"]
        auth = mirror_status(prefix + name)["auth"]

        status = shmstream.open(status_name(prefix + name), readonly=True)
        camhost.close()  # the camera host goes away
        while mirror_status(prefix + name)["exporter_alive"]:
            status.read_new(timeout=30)  # wakes on each change of the status
        gone = not mirror_status(prefix + name)["source_alive"]
        status.close()
        mirror.close()
        print(f"bridge: {crossed} frames crossed with their count, frame id and write time; "
              f"peers authenticated by {auth}; source alive {alive}; after the exporter "
              f"stopped, source gone {gone}")
    finally:
        rtc.close()
        camhost.close()
        cam.unlink()


if __name__ == "__main__":
    main()
