"""Two bridges over Eclipse Zenoh, as on two hosts, here on 127.0.0.1.

The "camera host" bridge exports the stream ``ex-<pid>-cam``; the "real-time
computer" bridge mirrors it as ``ex-<pid>-remote/ex-<pid>-cam``. A reader of
the mirror gets the source's frames with their count, frame id and write
time, and learns from the mirror's status stream when the source goes away.
On two real hosts, run the two halves as

    shmstream bridge --export 'cam/*' --listen tcp/0.0.0.0:7447           # camera host
    shmstream bridge --import 'cam/*' --local-prefix remote/ --connect tcp/camhost:7447

Needs Zenoh: ``pip install ".[zenoh]"`` from a checkout, ``pip install
"shmstream[zenoh]"`` once released.
"""
import os
import socket

import numpy as np

import shmstream
from shmstream.bridge import Bridge, mirror_status, status_name


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    tag = f"ex-{os.getpid()}-"
    name, prefix = tag + "cam", tag + "remote/"
    endpoint = f"tcp/127.0.0.1:{free_port()}"
    cam = shmstream.create(name, shape=(120, 160), dtype=np.uint16)
    cam.write(np.zeros((120, 160), np.uint16), frame_id=0)
    camhost = Bridge(exports=name, namespace="camhost", listen=[endpoint]).start()
    rtc = Bridge(imports=name, local_prefix=prefix, connect=[endpoint],
                 unlink_on_close=True).start()
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

        status = shmstream.open(status_name(prefix + name), readonly=True)
        camhost.close()  # the camera host goes away
        while mirror_status(prefix + name)["exporter_alive"]:
            status.read_new(timeout=30)  # wakes on each change of the status
        gone = not mirror_status(prefix + name)["source_alive"]
        status.close()
        mirror.close()
        print(f"bridge: {crossed} frames crossed with their count, frame id and write time; "
              f"source alive {alive}; after the exporter stopped, source gone {gone}")
    finally:
        rtc.close()
        camhost.close()
        cam.unlink()


if __name__ == "__main__":
    main()
