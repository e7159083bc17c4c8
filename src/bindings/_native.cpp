// Thin binding over the C core: converts arguments, releases the GIL around
// blocking and bulk-copy calls, and turns status codes into exceptions.
// No protocol logic lives here; it is all in src/core/, reached through
// include/ only (the public headers and shmstream_unstable.h).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "_binding.h"
#include "_file_map.h"
#include "_ndarray.h"
#include "_segment.h"
#include "shmstream.h"

namespace nb = nanobind;
using namespace nb::literals;
using namespace ssb;

namespace {
// The header words a status report shows, read by the core (one load each,
// its memory orders; include/shmstream_unstable.h).
ss_segment_words words(const Segment &s) {
  ss_segment_words w;
  ss_segment_words_get(s.seg, &w);
  return w;
}
}  // namespace

NB_MODULE(_native, m) {
  m.doc() = "shmstream C core binding (internal; use the shmstream package)";
  bind_file_mapping(m);
  m.attr("HEADER_BYTES") = SS_HEADER_BYTES;
  m.attr("MAX_NAME_BYTES") = SS_MAX_NAME_BYTES;
  m.attr("MAX_DTYPE_BYTES") = SS_MAX_DTYPE_BYTES;
  m.attr("MAX_NDIM") = SS_MAX_NDIM;
  m.attr("MAX_SLOTS") = SS_MAX_SLOTS;
  m.attr("DEFAULT_SLOTS") = SS_DEFAULT_SLOTS;
  m.attr("MAX_HISTORY") = SS_MAX_HISTORY;
  m.attr("MAX_COUNT") = SS_MAX_COUNT;
  // The one layout version of each kind (docs/ABI.md, "Layout versions").
  m.attr("LAYOUT_VERSION_ARRAY") = SS_LAYOUT_VERSION_ARRAY;
  m.attr("LAYOUT_VERSION_CHANNEL") = SS_LAYOUT_VERSION_CHANNEL;
  m.attr("LAYOUT_VERSION_STREAM") = SS_LAYOUT_VERSION_STREAM;
  m.attr("LAYOUT_VERSION_LOADER_POOL") = SS_LAYOUT_VERSION_LOADER_POOL;
  m.attr("SEGMENT_PREFIX") = SS_SEGMENT_PREFIX;
  m.def(
      "pidns_self",
      []() {
        uint32_t dev = 0;
        uint64_t ino = 0;
        ss_pidns_self(&dev, &ino);
        return nb::make_tuple(dev, ino);
      },
      "(st_dev, st_ino) of /proc/self/ns/pid; (0, 0) if unknown.");
  m.attr("KIND_STREAM") = (int)SS_KIND_STREAM;
  m.attr("KIND_CHANNEL") = (int)SS_KIND_CHANNEL;
  m.attr("KIND_ARRAY") = (int)SS_KIND_ARRAY;
  m.attr("FLAG_NOTIFY") = (int)SS_FLAG_NOTIFY;
  m.attr("FLAG_GPU") = (int)SS_FLAG_GPU;
  m.attr("FLAG_CPU_MIRROR") = (int)SS_FLAG_CPU_MIRROR;
  m.attr("FLAG_LOADER_POOL") = (int)SS_FLAG_LOADER_POOL;
  m.attr("STATE_VALID") = (int)SS_STATE_VALID;
  m.attr("STATE_ABORTED") = (int)SS_STATE_ABORTED;
  m.attr("STATE_ABANDONED") = (int)SS_STATE_ABANDONED;

  load_error_types();
  load_ndarray_type();
  m.attr("NAME_RULE") = name_rule();

  m.def(
      "segment_name",
      [](const std::string &name) {
        char out[SS_SEGMENT_NAME_MAX];
        int rc = ss_segment_name(name.data(), name.size(), out);
        if (rc != SS_OK)
          ssb::raise_status(rc, {"shared-memory object", name, "name", "", name_rule()});
        return std::string(out);
      },
      "name"_a);

  // True if something was removed, False if the name did not exist.
  m.def(
      "unlink_segname",
      [](const std::string &segname) {
        int rc = ss_segment_unlink_segname(segname.c_str());
        if (rc == ENOENT) return false;
        if (rc) raise_os(rc, "unlink " + segname);
        return true;
      },
      "segname"_a);

  m.def(
      "proc_alive",
      [](int32_t pid, uint64_t start_ticks) { return ss_proc_alive(pid, start_ticks) != 0; },
      "pid"_a, "start_ticks"_a = 0,
      "True if pid runs (not a zombie) and, when start_ticks is given, started then.");
  m.def("proc_start_ticks", &ss_proc_start_ticks, "pid"_a,
        "Start time of pid in clock ticks since boot (/proc/<pid>/stat field 22), 0 if unknown.");
  m.def("default_spin_ns", &ss_default_spin_ns);
  m.def(
      "segment_bytes",
      [](uint64_t payload, uint32_t slots, uint32_t history) {
        uint64_t n = ss_segment_bytes(payload, slots, history);
        if (n == 0) raise_error(g_value, "a segment of that size cannot be addressed");
        return n;
      },
      nb::arg("payload"), nb::arg("slots"), nb::arg("history") = 0,
      "Bytes of a segment with slots payload slots (history: history + 1 slots and records).");
  m.def("monotonic_ns", &ss_monotonic_ns);

  nb::class_<Segment>(m, "Segment")
      .def_static(
          "create",
          [](const std::string &name, int kind, std::vector<uint64_t> shape, uint64_t itemsize,
             const std::string &dtype, int flags, int mode, uint64_t payload_bytes, uint32_t slots,
             uint32_t history) {
            // The limits (shape, slots, history, dtype) are the core's: it
            // refuses them (EINVAL) and the Python API checked them first,
            // naming the argument (src/shmstream/streams/_checks.py and
            // common/_checks.py's check_ndim, from the constants above).
            Segment *s = make_segment();
            ss_create_args a{};
            a.name = name.c_str();
            a.kind = (uint32_t)kind;
            a.flags = (uint32_t)flags;
            a.ndim = (uint32_t)shape.size();
            a.shape = shape.data();
            a.itemsize = itemsize;
            a.dtype = dtype.c_str();
            a.payload_bytes = payload_bytes;
            a.mode = (uint32_t)mode;
            a.slots = slots;
            a.history = history;
            int rc;
            {
              nb::gil_scoped_release nogil;
              rc = ss_segment_create(s->seg, &a);
            }
            check_open_rc(s, rc, name, kind, "create");
            return s;
          },
          "name"_a, "kind"_a, "shape"_a, "itemsize"_a, "dtype"_a, "flags"_a = 0, "mode"_a = 0600,
          "payload_bytes"_a = 0, "slots"_a = SS_DEFAULT_SLOTS, "history"_a = 0,
          nb::rv_policy::take_ownership)
      .def_static(
          "open",
          [](const std::string &name, int kind, bool readonly,
             const std::vector<uint32_t> &allow_owners) {
            Segment *s = make_segment();
            ss_open_opts opts = ssb::open_opts(allow_owners);
            int rc;
            {
              nb::gil_scoped_release nogil;
              rc = ss_segment_open_ex(s->seg, name.data(), name.size(), (uint32_t)kind, readonly,
                                      &opts);
            }
            check_open_rc(s, rc, name, kind, "open");
            return s;
          },
          "name"_a, "kind"_a = 0, "readonly"_a = false, "allow_owners"_a = std::vector<uint32_t>(),
          nb::rv_policy::take_ownership,
          "Open by user name; a segment owned by another uid than this process's effective uid "
          "is refused (SegmentOwnerError) unless its owner is in allow_owners or "
          "SHMSTREAM_ALLOW_OWNERS.")
      .def_static(
          "peek", [](const std::string &segname) { return peek_segment(segname); }, "segname"_a,
          nb::rv_policy::take_ownership,
          "Map only the header of a segment, by segment name (for list and stat).")
      .def_static(
          "peek",
          [](nb::bytes segname) {
            return peek_segment(std::string(segname.c_str(), segname.size()));
          },
          "segname"_a, nb::rv_policy::take_ownership,
          "peek by the file name's bytes (os.fsencode of a name listed in /dev/shm).")
      .def_prop_ro("name", [](Segment &s) { return text_of(s.name()); })
      .def_prop_ro("segname", [](Segment &s) { return text_of(ss_segment_segname(s.seg)); })
      .def_prop_ro("kind", [](Segment &s) { return s.id().kind; })
      .def_prop_ro("flags", [](Segment &s) { return s.id().flags; })
      .def_prop_ro("shape",
                   [](Segment &s) {
                     nb::list l;
                     for (uint32_t i = 0; i < s.id().ndim; i++) l.append(s.id().shape[i]);
                     return nb::tuple(l);
                   })
      .def_prop_ro("itemsize", [](Segment &s) { return s.id().itemsize; })
      .def_prop_ro("dtype",
                   [](Segment &s) {
        // Another process wrote these bytes: undecodable ones become U+FFFD,
        // and the dtype parser then refuses the text with its own message.
                     PyObject *t = PyUnicode_DecodeUTF8(s.id().dtype, s.id().dtype_len, "replace");
                     if (!t) throw nb::python_error();
                     return nb::steal<nb::str>(t);
                   })
      .def_prop_ro("payload_bytes", [](Segment &s) { return s.id().payload_bytes; })
      .def_prop_ro("creator_pid", [](Segment &s) { return s.id().creator_pid; })
      .def_prop_ro("creator_start_ticks", [](Segment &s) { return s.id().creator_start_ticks; })
      .def_prop_ro("created_ns", [](Segment &s) { return s.id().created_ns; })
      .def_prop_ro("mode", [](Segment &s) { return s.id().mode; })
      // The file's owner and permission bits, from fstat at open or peek.
      .def_prop_ro("owner_uid", [](Segment &s) { return ss_segment_owner_uid(s.seg); })
      .def_prop_ro("file_mode", [](Segment &s) { return ss_segment_file_mode(s.seg); })
      // The creator's PID namespace inode (0: unknown), and whether it is
      // this process's: 1 yes, 0 no, -1 unknown (docs/ABI.md).
      .def_prop_ro("pidns_ino", [](Segment &s) { return s.id().pidns_ino; })
      .def_prop_ro("pidns_match", [](Segment &s) { return ss_pidns_match(&s.id()); })
      // The kind's one layout version (LAYOUT_VERSION_*): an open refuses others.
      .def_prop_ro("layout_version", [](Segment &s) { return s.id().layout_version; })
      .def_prop_ro("instance_id",
                   [](Segment &s) {
                     static const char hex[] = "0123456789abcdef";
                     std::string out;
                     for (uint8_t b : s.id().instance_id) {
                       out += hex[b >> 4];
                       out += hex[b & 15];
                     }
                     return out;
                   })
      .def_prop_ro(
          "gpu_area",
          [](Segment &s) { return nb::bytes((const char *)s.id().gpu, sizeof s.id().gpu); })
      .def_prop_ro("readonly", [](Segment &s) { return ss_segment_access(s.seg); })
      .def_prop_ro("count", [](Segment &s) { return ss_segment_count(s.seg); })
      // pyshmem's write sequence: odd while a write is in progress, which
      // here is the filling slot's seqlock or the metadata update.
      .def_prop_ro("seq",
                   [](Segment &s) { return words(s).seq | (uint64_t)ss_write_in_flight(s.seg); })
      .def_prop_ro("frame_id", [](Segment &s) { return words(s).frame_id; })
      .def_prop_ro("write_time_ns", [](Segment &s) { return words(s).write_time_ns; })
      .def_prop_ro("state", [](Segment &s) { return ss_segment_state(s.seg); })
      .def_prop_ro(
          "read_state", [](Segment &s) { return ss_read_state(s.seg); },
          "The state a read finds now (ss_read_state): 'state', or abandoned while a write is "
          "in flight and the lock's owner died. Changes nothing.")
      .def_prop_ro("writer_pid", [](Segment &s) { return words(s).writer_pid; })
      .def_prop_ro("writer_start_ticks", [](Segment &s) { return words(s).writer_start_ticks; })
      .def_prop_ro("aborted", [](Segment &s) { return words(s).aborted; })
      .def_prop_ro("owner_pid", [](Segment &s) { return words(s).owner_pid; })
      .def_prop_ro("owner_tid", [](Segment &s) { return words(s).owner_tid; })
      .def_prop_ro("acquisitions", [](Segment &s) { return words(s).acquisitions; })
      .def(
          "leases",
          [](Segment &s) {
            ss_stream_leases l;
            ss_stream_leases_get(s.seg, &l);
            return nb::make_tuple(l.creator_alive, l.lock_holder_alive, l.any_held);
          },
          "A stream's or loader pool's (creator, lock holder, any handle) leases: 1 alive, 0 "
          "gone, -1 cannot tell (another kind, a free lock). One F_OFD_GETLK each.")
      .def_prop_ro(
          "lease", [](Segment &s) { return ss_segment_lease(s.seg); },
          "This handle's lease (0: none), for a payload table that names holders by lease (a "
          "loader pool's slot lines).")
      .def(
          "lease_alive",
          [](Segment &s, uint64_t word) {
            nb::gil_scoped_release nogil;
            return ss_segment_lease_alive(s.seg, word);
          },
          "word"_a, "Whether the lease word is held: 1 alive, 0 gone, -1 cannot tell (l2).")
      .def_prop_ro("waiters",
                   [](Segment &s) {
        // readers asleep: the sleeper bits, and those without a slot
                     return words(s).waiters;
                   })
      .def("publication",
           [](Segment &s) {
             ss_pubinfo info{};
             ss_publication(s.seg, &info);  // count, frame id, time of one publication
             return std::make_tuple(info.count, info.frame_id, info.write_time_ns);
           })
      .def(
          "lock", [](Segment &s, nb::handle timeout) { return s.lock(to_ns(timeout)); },
          "timeout"_a = nb::none(),
          "Take the cross-process lock. Returns True if it was taken over from a dead owner.")
      .def("unlock", &Segment::unlock)
      .def(
          "write",
          [](Segment &s, nb::handle src, std::optional<uint64_t> frame_id, bool locked,
             nb::handle timeout, uint64_t count, uint64_t write_time_ns) {
            return s.write(src, frame_id, locked, to_ns(timeout), count, write_time_ns);
          },
          "src"_a, "frame_id"_a = nb::none(), "locked"_a = false, "timeout"_a = nb::none(),
          "count"_a = 0, "write_time_ns"_a = 0,
          "Publish src (frame_id None keeps the previous frame id; count and write_time_ns 0: "
          "count + 1 and now). Returns the new count.")
      .def(
          "write_begin", [](Segment &s) { return ss_write_begin(s.seg); },
          "Start a write (lock held); returns the slot to fill.")
      .def(
          "write_end",
          [](Segment &s, std::optional<uint64_t> frame_id) {
            ss_write_end(s.seg, frame_id ? &*frame_id : nullptr);
            s.check_mapping("write_end");
            return ss_segment_count(s.seg);
          },
          "frame_id"_a = nb::none())
      .def("write_abort", [](Segment &s) { ss_write_abort(s.seg); })
      .def(
          "clear",
          [](Segment &s, bool locked, nb::handle timeout) {
            return s.clear(locked, to_ns(timeout));
          },
          "locked"_a = false, "timeout"_a = nb::none())
      .def(
          "read",
          [](Segment &s, nb::handle dst, nb::handle timeout, bool holds_lock) {
            return s.read(dst, to_ns(timeout), holds_lock);
          },
          "dst"_a, "timeout"_a = nb::none(), "holds_lock"_a = false)
      .def(
          "read_last_complete",
          [](Segment &s, nb::handle dst, nb::handle timeout, bool holds_lock) {
            return s.read_last_complete(dst, to_ns(timeout), holds_lock);
          },
          "dst"_a, "timeout"_a = nb::none(), "holds_lock"_a = false,
          "Copy the last complete publication whatever the state: (count, frame_id, "
          "write_time_ns, state).")
      .def("check_writer", &Segment::check_writer)
      .def(
          "bind_array",
          [](Segment &s, nb::handle dtype, std::vector<Py_ssize_t> shape) {
        // The dtype and shape put/get/get_new accept; their bytes must be
        // the payload's (else nothing is the fast case).
            size_t n = (size_t)nb::cast<Py_ssize_t>(dtype.attr("itemsize"));
            for (Py_ssize_t d : shape) n *= (size_t)d;
            if (n != s.payload_bytes()) return false;
            s.spec.dtype = nb::borrow(dtype);
            s.spec.shape = std::move(shape);
            return true;
          },
          "dtype"_a, "shape"_a,
          "Bind the array type of the hot path (put, get, get_new). False if its bytes are not "
          "the payload's.")
      .def("put", &Segment::put, "src"_a, "frame_id"_a = nb::none(), "timeout"_a = nb::none(),
           nb::sig("def put(self, src: object, frame_id: object | None = None, timeout: object "
                   "| None = None) -> int | None"),
           "write() of a C-contiguous ndarray of the bound dtype and shape without the lock "
           "held (waiting for it up to timeout): the new count, or None if src is not such an "
           "array (or frame_id not a plain int in [0, 2**64)).")
      .def("get", &Segment::get, "dst"_a, "timeout"_a = nb::none(),
           nb::sig("def get(self, dst: object, timeout: object | None = None) -> int | None"),
           "read() into a writable C-contiguous ndarray of the bound dtype and shape: the count "
           "read, or None if dst is not such an array.")
      .def("get_new", &Segment::get_new, "dst"_a, "after"_a, "timeout"_a = nb::none(),
           "spin_us"_a = nb::none(), "spin_ns"_a = -1,
           nb::sig("def get_new(self, dst: object, after: int, timeout: object | None = None, "
                   "spin_us: object | None = None, spin_ns: int = -1) -> int | None"),
           "read_new() into a writable C-contiguous ndarray of the bound dtype and shape: the "
           "count read, or None if dst is not such an array, spin_us not a number >= 0, or the "
           "stream's last write failed.")
      .def(
          "read_new",
          [](Segment &s, nb::handle dst, uint64_t after, nb::handle timeout, int64_t spin_ns) {
            return s.read_new(dst, after, to_ns(timeout), spin_ns);
          },
          "dst"_a, "after"_a, "timeout"_a = nb::none(), "spin_ns"_a = -1)
      .def(
          "view",
          [](Segment &s, uint64_t after, bool wait_new, nb::handle timeout, int64_t spin_ns,
             bool holds_lock) {
            return s.view(after, wait_new, to_ns(timeout), spin_ns, holds_lock);
          },
          "after"_a, "wait_new"_a, "timeout"_a = nb::none(), "spin_ns"_a = -1,
          "holds_lock"_a = false,
          "Locate the published frame without copying: (slot, slot_seq, count, frame_id, "
          "write_time_ns).")
      .def(
          "view_valid",
          [](Segment &s, uint32_t slot, uint64_t slot_seq) {
            if (slot >= s.id().slot_count) raise_error(g_index, "no such slot");
            ss_frame f{slot, slot_seq};
            bool valid = ss_view_valid(s.seg, &f);
            s.check_mapping("read_view");  // a shrunk file is not an overwrite
            return valid;
          },
          "slot"_a, "slot_seq"_a, "True while the slot still holds the frame view() located.")
      .def(
          "wait_count",
          [](Segment &s, uint64_t after, nb::handle timeout, int64_t spin_ns) {
            return s.wait_count(after, to_ns(timeout), spin_ns);
          },
          "after"_a, "timeout"_a = nb::none(), "spin_ns"_a = -1)
      .def(
          "payload",
          [](Segment &s, uint32_t slot) {
        // A writable byte view of one slot; it keeps this Segment (and so
        // the mapping) alive for as long as the view exists.
            if (slot >= s.id().slot_count) raise_error(g_index, "no such slot");
            nb::handle owner = nb::find(&s);
            size_t shape[1] = {s.payload_bytes()};
            return nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>(ss_slot(s.seg, slot), 1, shape,
                                                                owner);
          },
          "slot"_a = 0, nb::rv_policy::reference_internal)
      .def_prop_ro(
          "spin_policy", [](Segment &s) { return wait_policy_dict(s.seg); },
          "This handle's wait policy (docs/waiting.md): the process's wake-up cost "
          "wake_ns and cap_ns, contended, the budget_ns chosen for the last wait, the "
          "histogram of wait lengths, when publications are due (low_ns) and the last "
          "nap (nap_ns), and the counters waits, spun, napped, caught, slept, "
          "slept_at_once, preempted, contended_waits.")
      .def_prop_ro("write_in_flight", [](Segment &s) { return (bool)ss_write_in_flight(s.seg); })
      .def_prop_ro("published_slot", [](Segment &s) { return ss_published_slot(s.seg); })
      .def_prop_ro("slot_count", [](Segment &s) { return s.id().slot_count; })
      .def_prop_ro("history", [](Segment &s) { return ss_history_depth(s.seg); })
      .def(
          "read_since",
          [](Segment &s, uint64_t after, uint32_t max_frames, nb::handle timeout, int64_t spin_ns,
             nb::handle out) {
            return s.read_since(after, max_frames, to_ns(timeout), spin_ns, out);
          },
          "after"_a, "max_frames"_a = 0, "timeout"_a = nb::none(), "spin_ns"_a = -1,
          "out"_a = nb::none(),
          nb::sig("def read_since(self, after: int, max_frames: int = 0, timeout: object | None = "
                  "None, spin_ns: int = -1, out: object | None = None) -> "
                  "tuple[numpy.ndarray, numpy.ndarray, int]"),
          "Copies of the publications newer than after still held, oldest first: (frames, meta, "
          "last); meta (n, 3) uint64: count, frame_id, write_time_ns.")
      .def(
          "locate",
          [](Segment &s, uint64_t after, uint32_t max_frames, nb::handle timeout, int64_t spin_ns) {
            return s.locate(after, max_frames, to_ns(timeout), spin_ns);
          },
          "after"_a, "max_frames"_a = 0, "timeout"_a = nb::none(), "spin_ns"_a = -1,
          nb::sig("def locate(self, after: int, max_frames: int = 0, timeout: object | None = "
                  "None, spin_ns: int = -1) -> tuple[numpy.ndarray, int]"),
          "read_since without copying: (meta, last); meta (n, 5) uint64: count, frame_id, "
          "write_time_ns, slot, slot_seq.")
      .def(
          "frames_valid",
          [](Segment &s, nb::handle meta) {
        // For each located frame (a row of locate()'s meta): does its slot
        // still hold it?
            Buffer b(meta, false);
            size_t n = (size_t)b.view.len / (5 * sizeof(uint64_t));
            auto *row = (const uint64_t *)b.view.buf;
            nb::list out;
            for (size_t i = 0; i < n; i++, row += 5) {
              if (row[3] >= s.id().slot_count) raise_error(g_index, "no such slot");
              ss_frame f{(uint32_t)row[3], row[4]};
              out.append((bool)ss_view_valid(s.seg, &f));
            }
            s.check_mapping("read_since_view");
            return out;
          },
          "meta"_a, "For each row of locate()'s meta: True while its slot still holds that frame.")
      .def(
          "cancel", [](Segment &s) { ss_cancel(s.seg); },
          "Make this handle's waiters give up (RuntimeError) and wake them.")
      .def("wake", [](Segment &s) { ss_wake_all(s.seg); });
}
