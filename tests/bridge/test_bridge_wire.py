"""The bridge's pieces that need no network: key layout, wire formats, the
ring positions channel exports rely on, the status stream, and the package
without zenoh installed. (End to end over Zenoh: test_bridge.py.)"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import shmstream
from shmstream.bridge import _keys, _wire
from shmstream.bridge._count_window import DUP_WINDOW, MAX_JUMP, mirror_count
from shmstream.bridge._status import STATUS_DTYPE, StatusWriter, mirror_status, status_name

NAMES = [
    "cam/left",
    "a b",
    "温度",
    "/x",
    "a//b",
    "x/",
    "*",
    "**",
    "@meta",
    "%41",
    "$*",
    "q?#",
    "a/b/c.d-e_f~g",
    "x" * 255,
]
# Zenoh's rule for a key chunk: not empty, none of * $ ? # and no leading @
# (the bridge's own chunks start with @; names never do once encoded).
CHUNK = re.compile(r"^[^*$?#@/][^*$?#/]*$")


@pytest.mark.parametrize("name", NAMES)
def test_every_name_becomes_valid_key_chunks_and_comes_back(name):
    encoded = _keys.encode_name(name)
    assert all(CHUNK.match(c) for c in encoded.split("/")), encoded
    assert _keys.decode(encoded) == name
    keys = _keys.Keys("shmstream", "host-1")
    live = keys.live("abc123", "stream", name)
    assert keys.parse_live(live) == ("host-1", "abc123", "stream", name)


def test_plain_names_keep_their_slashes_in_the_key():
    keys = _keys.Keys("lab/shmstream", "cam.host")
    assert keys.data("cam/left") == "lab/shmstream/cam.host/cam/left"
    assert keys.meta("cam/left") == "lab/shmstream/@meta/cam.host/cam/left"
    assert _keys.Keys("shmstream", "my host").ns == "my%20host"


@pytest.mark.parametrize("prefix", ["", "a/", "/a", "a//b", "a/*", "a/@x", "a b", 5])
def test_bad_key_prefixes_are_refused(prefix):
    with pytest.raises(ValueError, match="key prefix"):
        _keys.Keys(prefix, "ns")


def test_keys_of_other_shapes_do_not_parse_as_tokens():
    keys = _keys.Keys("shmstream", "h")
    assert keys.parse_live("shmstream/@live/h/b/blob/x") is None  # unknown kind
    assert keys.parse_live("shmstream/@live/h/b") is None
    assert keys.parse_live("other/@live/h/b/stream/x") is None
    assert keys.parse_importer("shmstream/@imp/h/b1/cam/left") == ("b1", "cam/left")


def test_frame_headers_round_trip_and_bad_ones_are_refused():
    head = _wire.pack_frame_head(7, 2**64 - 1, 1_700_000_000_123_456_789, 11, 12)
    assert _wire.unpack_frame_head(head) == (7, 2**64 - 1, 1_700_000_000_123_456_789, 11, 12)
    for bad in (
        None,
        b"",
        head[:-1],
        head + b"x",
        b"XXXX" + head[4:],
        _wire.pack_frame_head(0, 1, 1, 1, 1),
    ):
        with pytest.raises(_wire.BadSample):
            _wire.unpack_frame_head(bad)


def test_layout_id_tells_shapes_and_dtypes_apart():
    a = _wire.layout_id([4, 4], "float32")
    assert a == _wire.layout_id((4, 4), "float32")
    assert a != _wire.layout_id([16], "float32")
    assert a != _wire.layout_id([4, 4], "int32")


def test_record_positions_match_the_ring(name):
    """The exporter numbers messages by their end position in the source
    ring, computed from record_span; it must equal the ring's own tail."""
    tx = shmstream.channel(name, 1 << 16)
    rx = shmstream.open_channel(name)
    try:
        msgs = [
            b"",
            b"x",
            b"y" * 47,
            b"z" * 48,
            b"w" * 1000,
            np.arange(3, dtype=np.float64),
            np.zeros((2, 3), "<u2"),
            np.zeros(4, [("a", "<i4"), ("b", "S3")]),
        ]
        pos = rx.stat()["tail"]
        for round_ in range(3):  # wraps the ring a few times
            for m in msgs * 10:
                tx.send(m, type_id=round_)
            batch = rx.drain_zero_copy(1000, timeout=5)
            assert len(batch) == len(msgs) * 10
            for m in batch:
                pos += _wire.record_span(len(m.meta), m.nbytes)
                m.release()
            assert rx.stat()["tail"] == pos
    finally:
        tx.close()
        rx.close()


def _batch(records):
    out = bytearray()
    _wire.pack_records(out, records)
    return bytes(out)


def test_channel_batches_parse_and_bad_ones_are_refused():
    r1 = (_wire.record_span(0, 5), 3, b"", b"hello")
    r2 = (r1[0] + _wire.record_span(0, 2), 4, b"", b"hi")
    got = list(_wire.iter_records(_batch([r1, r2]), 2, 1000))
    assert [(r.end, r.type_id, bytes(r.data)) for r in got] == [
        (r1[0], 3, b"hello"),
        (r2[0], 4, b"hi"),
    ]
    gap = (r1[0] + 128, 4, b"", b"hi")  # not contiguous with r1
    for payload, count, most in (
        (_batch([r1, r2]), 3, 1000),  # fewer records than announced
        (_batch([r1, r2]), 1, 1000),  # bytes after the last record
        (_batch([r1, r2])[:-1], 2, 1000),  # truncated
        (_batch([r1, gap]), 2, 1000),  # positions not contiguous
        (_batch([r1]), 1, 4),  # larger than the mirror ring takes
        (_batch([(3, 1, b"", b"hello")]), 1, 1000),  # end before its own size
    ):
        with pytest.raises(_wire.BadSample):
            list(_wire.iter_records(payload, count, most))


def test_a_mirror_counts_on_from_the_source_and_drops_what_it_has():
    # The generation's first frame sets the offset: the source's count, or
    # the mirror's next one where the mirror is already past it.
    assert mirror_count(5, 0, 0, None) == (5, 0, False)
    assert mirror_count(5, 0, 100, None) == (101, 96, False)
    # Next frames keep the offset; a re-send or a late frame is dropped.
    assert mirror_count(8, 5, 101, 96) == (104, 96, False)
    for resent in (8, 7, 8 - DUP_WINDOW + 1):
        assert mirror_count(resent, 8, 104, 96)[0] is None


def test_no_frame_can_freeze_a_mirror_or_wrap_its_count():
    """A forged count near 2**64 moves the mirror by one step of at most
    MAX_JUMP (no more), and the genuine frame after it is not taken for a
    duplicate of it: the mirror counts on by one."""
    target, offset, jumped = mirror_count(2**64 - 2, 10, 10, 0)
    assert (target, jumped) == (10 + MAX_JUMP, True)
    assert mirror_count(11, 2**64 - 2, target, offset) == (target + 1, target + 1 - 11, True)
    # A count far below the last one (the source was lost for long, or lied).
    assert mirror_count(3, 10 + DUP_WINDOW, 50, 0) == (51, 48, True)


def test_status_stream_reports_and_survives_a_restarted_importer(make_name):
    mirror = make_name("mirror")  # its status stream is unlinked below
    w = StatusWriter(mirror, "stream")
    try:
        assert w.previous is None
        st = mirror_status(mirror)
        assert st["source_alive"] is False and st["importer_alive"] is True
        w.set(exporter_alive=1, producer_alive=1, generation=99, count_offset=5)
        w.add("bad_samples", 2)
        st = mirror_status(mirror)
        assert st["source_alive"] is True and st["bad_samples"] == 2 and st["kind"] == "stream"
        w.close()
        w = StatusWriter(mirror, "stream")  # a restarted importer finds where it was
        assert w.previous == {"generation": 99, "count_offset": 5, "delivered": 0}
    finally:
        w.close(unlink=True)
    with pytest.raises(FileNotFoundError, match="not a bridge mirror"):
        mirror_status(mirror)


def test_a_foreign_stream_under_a_status_name_is_refused(make_name):
    mirror = make_name("m")
    h = shmstream.create(status_name(mirror), shape=(3,), dtype=np.int32)
    try:
        with pytest.raises(ValueError, match="not a bridge status stream"):
            StatusWriter(mirror, "stream")
        with pytest.raises(ValueError, match="not a bridge status stream"):
            mirror_status(mirror)
    finally:
        h.unlink()
    assert STATUS_DTYPE.itemsize == 62


def test_list_channels_lists_channels_only(make_name):
    s, c = make_name("s"), make_name("c")
    h = shmstream.create(s, shape=(1,))
    ch = shmstream.channel(c, 4096)
    try:
        assert c in shmstream.list_channels() and s not in shmstream.list_channels()
        assert s in shmstream.list_streams() and c not in shmstream.list_streams()
    finally:
        ch.close()
        shmstream.unlink_channel(c)
        h.unlink()


def test_without_zenoh_the_package_works_and_the_bridge_says_how_to_install_it():
    script = textwrap.dedent("""
        import sys
        sys.modules["zenoh"] = None          # as if eclipse-zenoh were not installed
        import shmstream, shmstream.bridge, shmstream.cli
        assert not shmstream.bridge.zenoh_available()
        try:
            shmstream.bridge.Bridge(exports="x")
        except ModuleNotFoundError as exc:
            assert 'pip install "shmstream[zenoh]"' in str(exc), exc
            assert 'pip install ".[zenoh]" from a checkout' in str(exc), exc  # both forms
        else:
            raise AssertionError("Bridge() without zenoh did not raise")
        assert shmstream.cli.main(["bridge", "--export", "x"]) == 1
        assert shmstream.cli.main(["list", "--remote"]) == 1
        assert shmstream.cli.main(["list"]) == 0
    """)
    r = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stderr.count('pip install "shmstream[zenoh]"') == 2, r.stderr


def test_bridge_arguments_are_checked_before_anything_starts():
    from shmstream.bridge import Bridge

    pytest.importorskip(
        "zenoh", reason="eclipse-zenoh is not installed (pip install shmstream[zenoh])"
    )
    with pytest.raises(TypeError, match="exports"):
        Bridge(exports=[""])
    with pytest.raises(TypeError, match="imports"):
        Bridge(imports=5)
    with pytest.raises(ValueError, match="key prefix"):
        Bridge(exports="x", key_prefix="a/*")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        Bridge(exports="x", config="/nonexistent/zenoh.json5")
    with pytest.raises(TypeError, match="endpoint"):
        Bridge(exports="x", listen="tcp/127.0.0.1:7447")  # a str, not a list
    with pytest.raises(TypeError, match="max_mirrors"):
        Bridge(imports="x", max_mirrors=2.5)
    with pytest.raises(ValueError, match="max_mirror_bytes"):
        Bridge(imports="x", max_mirror_bytes=-1)


def test_default_configuration_listens_nowhere_and_does_not_scout():
    pytest.importorskip(
        "zenoh", reason="eclipse-zenoh is not installed (pip install shmstream[zenoh])"
    )
    import json

    from shmstream.bridge._session import make_config

    cfg = make_config()
    assert json.loads(cfg.get_json("listen/endpoints")) == []
    assert json.loads(cfg.get_json("scouting/multicast/enabled")) is False
    assert json.loads(cfg.get_json("connect/endpoints")) == []
    cfg = make_config(listen=["tcp/127.0.0.1:7447"], connect=["tcp/10.0.0.1:7447"])
    assert json.loads(cfg.get_json("listen/endpoints")) == ["tcp/127.0.0.1:7447"]
    assert json.loads(cfg.get_json("connect/endpoints")) == ["tcp/10.0.0.1:7447"]
