"""The on-memory layout is an ABI: docs/ABI.md, the compiled header
(``_testhooks.layout()``) and the raw bytes of a live segment must agree.

The field tables of docs/ABI.md are parsed (rows ``| offset | size | field
| ... |``) and compared with the layout compiled into the extension; then a
segment's /dev/shm file is read byte by byte at the documented offsets.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import numpy as np
import pytest

import shmstream
from shmstream import _native, _testhooks

import support

ABI_MD = Path(__file__).resolve().parents[2] / "docs" / "ABI.md"

ROW = re.compile(
    r"^\|\s*(0x[0-9a-fA-F]+|\d+)\s*\|\s*(0x[0-9a-fA-F]+|\d+)\s*\|\s*`?([A-Za-z_][\w.\[\]]*)`?\s*\|"
)


def documented_fields() -> dict[str, tuple[int, int]]:
    """{field: (offset, size)} from every field-table row of docs/ABI.md."""
    assert ABI_MD.is_file(), f"{ABI_MD} is missing: the layout must be documented"
    fields: dict[str, tuple[int, int]] = {}
    for line in ABI_MD.read_text(encoding="utf-8").splitlines():
        m = ROW.match(line.strip())
        if not m:
            continue
        offset, size = int(m.group(1), 0), int(m.group(2), 0)
        field = re.sub(r"\[.*\]$", "", m.group(3)).split(".")[-1]
        assert field not in fields, f"{field} is documented twice in ABI.md"
        fields[field] = (offset, size)
    return fields


def compiled_fields() -> dict[str, tuple[int, int]]:
    return {k: (int(v[0]), int(v[1])) for k, v in _testhooks.layout().items()}


# ---- the document and the compiled layout ---------------------------------------


def test_abi_md_documents_every_compiled_header_field_at_its_offset_and_size():
    documented = documented_fields()
    compiled = compiled_fields()
    missing = sorted(set(compiled) - set(documented))
    assert not missing, f"fields not documented in docs/ABI.md: {missing}"
    wrong = {
        f: {"doc": documented[f], "code": compiled[f]}
        for f in compiled
        if documented[f] != compiled[f]
    }
    assert not wrong, f"docs/ABI.md disagrees with the compiled layout: {wrong}"


def test_abi_md_documents_no_field_that_the_code_does_not_have():
    extra = sorted(set(documented_fields()) - set(compiled_fields()))
    assert not extra, f"docs/ABI.md documents fields the code lacks: {extra}"


def test_documented_fields_do_not_overlap_and_fit_in_the_4096_byte_header():
    spans = sorted(documented_fields().items(), key=lambda kv: kv[1][0])
    end = 0
    for field, (offset, size) in spans:
        assert offset >= end, f"{field} at {offset} overlaps the previous field (ends {end})"
        end = offset + size
    assert end <= _native.HEADER_BYTES == 4096


def test_control_words_sit_on_their_own_cache_lines():
    layout = compiled_fields()
    lines = {
        "lock": ["lock_reserved", "owner_pid", "owner_tid", "acquisitions"],
        "publish": [
            "seq",
            "count",
            "frame_id",
            "write_time_ns",
            "state",
            "writer_pid",
            "aborted",
            "slot",
        ],
        "notify": ["wake_seq", "waiters"],
        "slot seqs": ["slot_seq"],
    }
    starts = {}
    for line, fields in lines.items():
        first = layout[fields[0]][0]
        assert first % 64 == 0, f"the {line} line starts at {first}, not on a 64-byte boundary"
        for f in fields:
            offset, size = layout[f]
            assert first <= offset and offset + size <= first + 64, f"{f} leaves the {line} line"
        starts[line] = first
    assert len(set(starts.values())) == len(lines)
    # the immutable, checksummed identity block ends before the first control line
    assert layout["checksum"][0] + 8 <= min(starts.values())


def test_every_shared_counter_is_naturally_aligned():
    layout = compiled_fields()
    for f in (
        "magic",
        "seq",
        "count",
        "frame_id",
        "write_time_ns",
        "aborted",
        "acquisitions",
        "owner_pid",
        "owner_tid",
        "state",
        "writer_pid",
        "wake_seq",
        "waiters",
        "slot",
    ):
        offset, size = layout[f]
        assert size in (4, 8) and offset % size == 0, (f, offset, size)


# ---- a live segment, byte by byte ----------------------------------------------------


def u(raw: bytes, field: str) -> int:
    offset, size = compiled_fields()[field]
    return int.from_bytes(raw[offset : offset + size], "little")


@pytest.fixture
def live(make_name):
    stream_name = make_name("abi/ü")
    h = shmstream.create(stream_name, shape=(3, 5), dtype=np.float32)
    frames = [np.full((3, 5), v, np.float32) for v in (1.5, 2.5, 3.5)]
    for i, f in enumerate(frames):
        h.write(f, frame_id=100 + i)
    yield h, frames[-1]
    h.close()


def test_the_segment_file_name_is_prefix_readable_part_and_fnv1a_hash(live):
    h, _ = live
    name_bytes = h.name.encode()
    assert _native.segment_name(h.name) == "/" + support.segment_name(h.name)
    base = support.segment_name(h.name)
    assert re.fullmatch(r"shmstream-[A-Za-z0-9._-]{1,32}-[0-9a-f]{16}", base), base
    assert base.endswith(f"-{support.fnv1a64(name_bytes):016x}")
    assert os.path.isfile(support.segment_path(h.name))


def test_a_segment_is_created_0600_and_sized_header_plus_page_rounded_slots(live):
    h, _ = live
    st = os.stat(support.segment_path(h.name))
    assert stat.S_IMODE(st.st_mode) == 0o600
    # 60 payload bytes round up to one page per slot
    assert st.st_size == 4096 + 4096 * _native.DEFAULT_SLOTS


def test_the_mode_argument_sets_the_segment_permission_bits(name):
    h = shmstream.create(name, shape=(4,), mode=0o640)
    try:
        path = support.segment_path(name)
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
        assert support.read_u(path, *compiled_fields()["mode"]) == 0o640
    finally:
        h.close()


@pytest.mark.parametrize("slots", [1, 3])
def test_the_slots_argument_sets_the_number_of_page_aligned_payload_slots(name, slots):
    h = shmstream.create(name, shape=(5000,), dtype=np.uint8, slots=slots)
    try:
        path = support.segment_path(name)
        assert support.read_u(path, *compiled_fields()["slot_count"]) == slots
        assert support.read_u(path, *compiled_fields()["slot_stride"]) == 8192
        assert os.stat(path).st_size == 4096 + 8192 * slots
        for v in range(1, 2 * slots + 2):  # wraps around every slot
            h.write(np.full(5000, v, np.uint8))
            assert (h.read() == v).all()
    finally:
        h.close()


def test_raw_header_bytes_match_the_documented_layout(live):
    h, last = live
    with open(support.segment_path(h.name), "rb") as f:
        raw = f.read()
    assert raw[0:8] == b"SHMSTRM1"
    assert u(raw, "magic") == 0x314D5254534D4853
    # a stream is locked by lease (docs/ABI.md, "Stream lock by lease")
    assert u(raw, "layout_version") == 4 == _native.LAYOUT_VERSION_STREAM
    assert 2**62 <= u(raw, "creator_lease") <= 2**63 - 2
    assert u(raw, "lock_lease") == 0  # free; the reserved bytes before it stay zero
    assert raw[2048:2096] == bytes(48)
    assert u(raw, "kind") == _native.KIND_STREAM == 1
    assert u(raw, "header_bytes") == 4096
    assert u(raw, "payload_offset") == 4096
    assert u(raw, "payload_bytes") == 60
    assert u(raw, "slot_stride") == 4096
    assert u(raw, "slot_count") == _native.DEFAULT_SLOTS
    assert u(raw, "ndim") == 2
    shape_off = compiled_fields()["shape"][0]
    shape = [
        int.from_bytes(raw[shape_off + 8 * i : shape_off + 8 * i + 8], "little") for i in range(8)
    ]
    assert shape == [3, 5, 0, 0, 0, 0, 0, 0]
    assert u(raw, "itemsize") == 4
    assert u(raw, "creator_pid") == os.getpid()
    assert u(raw, "mode") == 0o600
    name_bytes = h.name.encode()
    assert u(raw, "name_len") == len(name_bytes)
    name_off = compiled_fields()["name"][0]
    assert raw[name_off : name_off + len(name_bytes) + 1] == name_bytes + b"\0"
    dtype_off = compiled_fields()["dtype"][0]
    assert u(raw, "dtype_len") == 3
    assert raw[dtype_off : dtype_off + 4] == b"<f4\0"
    iid_off, iid_size = compiled_fields()["instance_id"]
    assert raw[iid_off : iid_off + iid_size].hex() == h.instance_id
    # publish line after three writes
    assert u(raw, "count") == 3
    assert u(raw, "seq") % 2 == 0 and u(raw, "seq") >= 6
    assert u(raw, "frame_id") == 102
    assert u(raw, "state") == 0
    assert u(raw, "writer_pid") == os.getpid()
    assert u(raw, "aborted") == 0
    assert abs(u(raw, "write_time_ns") / 1e9 - h.write_time) < 1e-6
    # the published frame is in slot `slot`; slots start at 4096
    slot = u(raw, "slot")
    assert 0 <= slot < _native.DEFAULT_SLOTS
    start = 4096 + slot * u(raw, "slot_stride")
    assert raw[start : start + 60] == last.tobytes()
    slot_seq_off = compiled_fields()["slot_seq"][0] + 8 * slot
    assert int.from_bytes(raw[slot_seq_off : slot_seq_off + 8], "little") % 2 == 0


def test_the_header_checksum_is_fnv1a_over_bytes_8_to_2039(live):
    h, _ = live
    with open(support.segment_path(h.name), "rb") as f:
        raw = f.read(4096)
    checksum_offset = compiled_fields()["checksum"][0]
    assert checksum_offset == 2040
    assert u(raw, "checksum") == support.fnv1a64(raw[8:checksum_offset])


def test_the_lock_owner_words_show_the_holder_and_clear_on_release(live):
    h, _ = live
    path = support.segment_path(h.name)
    with h.locked():
        assert support.read_u(path, *compiled_fields()["owner_pid"]) == os.getpid()
        assert support.read_u(path, *compiled_fields()["owner_tid"]) != 0
    assert support.read_u(path, *compiled_fields()["owner_pid"]) == 0
    assert support.read_u(path, *compiled_fields()["owner_tid"]) == 0


def test_an_aborted_write_view_is_recorded_in_state_and_aborted(live):
    h, _ = live
    path = support.segment_path(h.name)
    with pytest.raises(ZeroDivisionError):
        with h.write_view():
            raise ZeroDivisionError
    assert support.read_u(path, *compiled_fields()["state"]) == _native.STATE_ABORTED == 1
    assert support.read_u(path, *compiled_fields()["aborted"]) == 1
    assert support.read_u(path, *compiled_fields()["count"]) == 3
    assert support.read_u(path, *compiled_fields()["seq"]) % 2 == 0
    h.write(np.zeros((3, 5), np.float32))
    assert support.read_u(path, *compiled_fields()["state"]) == _native.STATE_VALID == 0


# ---- history streams: slot records after the slots ---------------------------------------


def documented_record_fields() -> dict[str, tuple[int, int]]:
    """{field: (offset, size)} of the slot record table in docs/ABI.md's
    "History" section (rows ``| +n | size | field | ...``)."""
    text = ABI_MD.read_text(encoding="utf-8")
    section = text[text.index("### History") :]
    section = section[: section.index("\n### ", 1)]
    rows = re.findall(r"^\| \+(\d+) \| (\d+) \| (\w+) \|", section, flags=re.M)
    return {f: (int(o), int(s)) for o, s, f in rows}


def test_abi_md_documents_the_slot_record_as_compiled():
    compiled = {k: (int(v[0]), int(v[1])) for k, v in _testhooks.slot_record_layout().items()}
    compiled["reserved"] = compiled.pop("reserved_")
    assert documented_record_fields() == compiled
    assert sum(size for _, size in compiled.values()) == 64


def test_a_history_segment_is_version_4_with_its_records_after_the_slots(name):
    h = shmstream.create(name, shape=(3, 5), dtype=np.float32, history=6)
    try:
        for k in range(1, 10):
            h.write(np.full((3, 5), k, np.float32), frame_id=100 + k)
        path = support.segment_path(name)
        with open(path, "rb") as f:
            raw = f.read()
        assert u(raw, "layout_version") == 4 == _native.LAYOUT_VERSION_STREAM
        assert u(raw, "history") == 6 and u(raw, "slot_count") == 7
        stride = u(raw, "slot_stride")
        table = 4096 + 7 * stride
        assert len(raw) == table + 4096  # 7 records of 64 bytes, rounded up to a page
        # the header's slot line is unused; each slot's seq is in its record
        off, size = compiled_fields()["slot_seq"]
        assert raw[off : off + size] == bytes(size)
        held = {}
        for i in range(7):
            rec = raw[table + 64 * i : table + 64 * i + 64]
            seq, count, fid, t = (int.from_bytes(rec[j : j + 8], "little") for j in (0, 8, 16, 24))
            assert seq % 2 == 0 and rec[32:] == bytes(32)
            payload = np.frombuffer(raw[4096 + i * stride : 4096 + i * stride + 60], np.float32)
            assert payload.tolist() == [count] * 15 and fid == 100 + count and t > 0
            held[count] = i
        # the seven newest publications, the newest in the published slot
        assert sorted(held) == list(range(3, 10)) and held[9] == u(raw, "slot")
        st = shmstream.stat(name)
        assert (st["history"], st["slots"]) == (6, 7)
    finally:
        h.close()


def test_a_stream_without_history_is_version_4_with_a_zero_history_field(live):
    h, _ = live
    with open(support.segment_path(h.name), "rb") as f:
        raw = f.read()
    assert u(raw, "layout_version") == 4 and u(raw, "history") == 0
    assert len(raw) == 4096 + 4096 * _native.DEFAULT_SLOTS


# ---- one layout version per kind ------------------------------------------------------------


def _stream(name):
    h = shmstream.create(name, shape=(3,), dtype=np.int64)
    return lambda: shmstream.open(name), h.close, lambda: shmstream.unlink(name)


def _history_stream(name):
    h = shmstream.create(name, shape=(3,), dtype=np.int64, history=3)
    return lambda: shmstream.open(name), h.close, lambda: shmstream.unlink(name)


def _channel(name):
    tx = shmstream.channel(name, 4096, role="producer")
    return (
        lambda: shmstream.open_channel(name),
        tx.close,
        lambda: shmstream.unlink_channel(name),
    )


def _array(name):
    a = shmstream.share(np.arange(3), name)
    return lambda: shmstream.SharedArray.open(name), lambda: None, a.close


def _loader_pool(name):
    from shmstream.loader import _loader_pool as lp

    pool = lp.Pool(nslots=1, max_bytes=1 << 16)
    assert pool.table is not None, pool.broken
    root = lp.root_name(pool.token)
    return lambda: lp.PoolClient(pool.token, pool.instance_id), lambda: None, pool.destroy, root


KINDS = {
    "stream": (_stream, _native.LAYOUT_VERSION_STREAM),
    "history stream": (_history_stream, _native.LAYOUT_VERSION_STREAM),
    "channel": (_channel, _native.LAYOUT_VERSION_CHANNEL),
    "shared array": (_array, _native.LAYOUT_VERSION_ARRAY),
    "loader pool": (_loader_pool, _native.LAYOUT_VERSION_LOADER_POOL),
}


def _made(kind, name):
    made = KINDS[kind][0](name)
    return (*made[:3], made[3] if len(made) > 3 else name)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kind_is_made_with_its_one_layout_version(name, kind):
    _open, close, remove, segment = _made(kind, name)
    try:
        path = support.segment_path(segment)
        assert support.read_u(path, *support.field("layout_version")) == KINDS[kind][1]
    finally:
        close()
        remove()


@pytest.mark.parametrize(
    "kind,found",
    [(k, v) for k in sorted(KINDS) for v in (1, 2, 3, 4, 5, 99) if v != KINDS[k][1]],
)
def test_any_other_layout_version_is_refused_naming_found_and_wanted(name, kind, found):
    # No compatibility for layouts that were never released: one version
    # per kind (docs/ABI.md, "Layout versions"), every other refused.
    wanted = KINDS[kind][1]
    open_it, close, remove, segment = _made(kind, name)
    path = support.segment_path(segment)
    try:
        support.patch_identity(
            path, support.field("layout_version")[0], found.to_bytes(4, "little")
        )
        with pytest.raises(shmstream.LayoutVersionError) as info:
            open_it()
        assert isinstance(info.value, shmstream.CorruptStreamError)
        assert f"layout version {found}; this shmstream version reads layout {wanted}" in str(
            info.value
        )
        with pytest.raises(shmstream.LayoutVersionError):
            shmstream.stat(segment)
    finally:
        support.patch_identity(
            path, support.field("layout_version")[0], wanted.to_bytes(4, "little")
        )
        close()
        remove()


def test_the_lock_line_holds_no_platform_sized_word(live):
    # The lock is the stream area's lease word: the first 48 bytes of the
    # lock line are reserved zero, never a pthread_mutex_t (whose size
    # differs between platforms).
    h, _ = live
    with h.locked():
        with open(support.segment_path(h.name), "rb") as f:
            raw = f.read(4096)
        off, size = support.field("lock_reserved")
        assert (off, size) == (2048, 48) and raw[off : off + size] == bytes(48)
        assert u(raw, "lock_lease") != 0
