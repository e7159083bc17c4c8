// shmstream._testhooks: the suite's hooks into the core, built beside the
// production extensions from a checkout (CMake option SHMSTREAM_TEST_HOOKS,
// on by default) and left out of a build from the sdist, so the release
// wheel carries none of them (pyproject.toml, tests/repo/test_release.py). Crash
// points, the wait policy's injected wake-up cost and the compiled offsets
// of the shared layout (docs/ABI.md), which the ABI tests compare with the
// document and with live segments.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <cstddef>
#include <string>

#include "_binding.h"
#include "shmstream_unstable.h"

namespace nb = nanobind;
using namespace nb::literals;
using namespace ssb;

NB_MODULE(_testhooks, m) {
  m.doc() = "shmstream's test hooks (the suite only; not in the release wheel)";
  load_error_types();

  // The crash points of the core (docs/ABI.md, "Crash points"). The core is
  // one shared library that every extension links (CMakeLists.txt), so one
  // arming covers streams, channels and GPU streams alike.

  m.def(
      "fault_arm",
      [](const std::string &point, uint32_t nth, bool exit) {
        if (ss_fault_arm(point.c_str(), nth, exit ? SS_FAULT_EXIT : SS_FAULT_SIGKILL) != SS_OK)
          raise_error(g_value, "unknown crash point '" + point + "'; see fault_points()");
      },
      nb::arg("point"), nb::arg("nth") = 1, nb::arg("exit") = false,
      "Die (SIGKILL, or _exit(86) with exit=True) the nth time this process passes the point.");
  m.def("fault_disarm", &ss_fault_disarm);
  m.def("fault_points", []() {
    size_t n = 0;
    const char *const *names = ss_fault_points(&n);
    nb::list out;
    for (size_t i = 0; i < n; i++) out.append(nb::str(names[i]));
    return out;
  });

  m.def("wait_policy_override", &ss_wait_policy_override, "wake_ns"_a = -1, "load"_a = -1,
        "docs/waiting.md: wake_ns >= 0 replaces the measured wake-up cost, -1 measures it "
        "again; load 1 or 0 fixes the contention state, -1 measures it.");

  // Offsets of every documented header field, for the ABI test.
  m.def("layout", []() {
    nb::dict d;
#define F(path, field) \
  d[#field] = nb::make_tuple(offsetof(ss_header, path), sizeof(((ss_header *)0)->path))
    F(id.magic, magic);
    F(id.layout_version, layout_version);
    F(id.kind, kind);
    F(id.header_bytes, header_bytes);
    F(id.flags, flags);
    F(id.payload_offset, payload_offset);
    F(id.payload_bytes, payload_bytes);
    F(id.slot_stride, slot_stride);
    F(id.slot_count, slot_count);
    F(id.ndim, ndim);
    F(id.shape, shape);
    F(id.itemsize, itemsize);
    F(id.creator_pid, creator_pid);
    F(id.mode, mode);
    F(id.creator_start_ticks, creator_start_ticks);
    F(id.instance_id, instance_id);
    F(id.created_ns, created_ns);
    F(id.name_len, name_len);
    F(id.dtype_len, dtype_len);
    F(id.name, name);
    F(id.dtype, dtype);
    F(id.gpu, gpu);
    F(id.history, history);
    F(id.pidns_dev, pidns_dev);
    F(id.pidns_ino, pidns_ino);
    F(id.creator_lease, creator_lease);
    F(id.reserved, identity_reserved);
    F(id.checksum, checksum);
    F(lock.reserved, lock_reserved);
    F(lock.owner_pid, owner_pid);
    F(lock.owner_tid, owner_tid);
    F(lock.acquisitions, acquisitions);
    F(pub.seq, seq);
    F(pub.count, count);
    F(pub.frame_id, frame_id);
    F(pub.write_time_ns, write_time_ns);
    F(pub.state, state);
    F(pub.writer_pid, writer_pid);
    F(pub.aborted, aborted);
    F(pub.slot, slot);
    F(pub.writer_start_ticks, writer_start_ticks);
    F(stream.slots.seq, slot_seq);
    F(stream.undo.count, undo_count);
    F(stream.undo.frame_id, undo_frame_id);
    F(stream.undo.write_time_ns, undo_write_time_ns);
    F(stream.undo.aborted, undo_aborted);
    F(stream.undo.slot, undo_slot);
    F(stream.undo.state, undo_state);
    F(notify.wake_seq, wake_seq);
    F(notify.waiters, waiters);
    F(notify.lock_readers, lock_readers);
    F(notify.sleepers, sleepers);
    F(stream.lock_lease, lock_lease);
    F(stream.lock_wake, lock_wake);
    F(stream.read_pending, read_pending);
    F(stream.sleeper, sleeper);
#undef F
    return d;
  });
  // Offsets within one slot record of a history stream, for the ABI test.
  m.def("slot_record_layout", []() {
    nb::dict d;
#define R(field) \
  d[#field] = nb::make_tuple(offsetof(ss_slot_record, field), sizeof(((ss_slot_record *)0)->field))
    R(seq);
    R(count);
    R(frame_id);
    R(write_time_ns);
    R(reserved_);
#undef R
    return d;
  });

  // Offsets of the ring control words and the record header, for the ABI test.
  m.def("channel_layout", []() {
    nb::dict d;
    size_t base = SS_RING_CONTROL_OFFSET;
    d["head"] = base + offsetof(ss_ring_control, head);
    d["tail"] = base + offsetof(ss_ring_control, tail);
    d["producer"] = base + offsetof(ss_ring_control, producer);
    d["consumer"] = base + offsetof(ss_ring_control, consumer);
    d["space"] = base + offsetof(ss_ring_control, space);
    d["space_want"] = base + offsetof(ss_ring_control, space) + offsetof(ss_ring_sleep_line, want);
    d["notify"] = offsetof(ss_header, notify);
    d["end_state"] = offsetof(ss_ring_end_line, state);
    d["end_attaches"] = offsetof(ss_ring_end_line, attaches);
    d["end_takeovers"] = offsetof(ss_ring_end_line, takeovers);
    d["msg_type_id"] = offsetof(ss_msg_header, type_id);
    d["msg_flags"] = offsetof(ss_msg_header, flags);
    d["msg_meta_len"] = offsetof(ss_msg_header, meta_len);
    d["msg_payload_off"] = offsetof(ss_msg_header, payload_off);
    d["msg_header_bytes"] = sizeof(ss_msg_header);
    d["ring_offset"] = SS_HEADER_BYTES;
    return d;
  });
}
