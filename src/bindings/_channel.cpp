// Thin binding over the channel core (src/core/ring.c): converts arguments,
// releases the GIL while waiting, hands out views that pin their ring bytes,
// and turns status codes into exceptions. The ring protocol lives in C.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "_binding.h"
#include "_channel_handle.h"
#include "_dlpack.h"
#include "shmstream.h"

namespace nb = nanobind;
using namespace nb::literals;
using namespace ssb;

NB_MODULE(_channel, m) {
  m.doc() = "shmstream channel binding (internal; use shmstream.channel)";
  m.attr("ROLE_PRODUCER") = (int)SS_ROLE_PRODUCER;
  m.attr("ROLE_CONSUMER") = (int)SS_ROLE_CONSUMER;
  m.attr("MIN_CAPACITY") = SS_CHANNEL_MIN_CAPACITY;
  m.attr("MAX_CAPACITY") = SS_CHANNEL_MAX_CAPACITY;
  m.attr("MSG_HEADER_BYTES") = SS_MSG_HEADER_BYTES;
  m.attr("MSG_ALIGN") = SS_MSG_ALIGN;
  m.attr("MSG_ARRAY") = (int)SS_MSG_ARRAY;
  m.attr("MAX_META") = SS_MSG_MAX_META;
  m.attr("DLPACK_TEXT_PREFIX") = kDLTextPrefix;
  m.def(
      "dlpack_import",
      [](nb::ndarray<nb::ro> a) {
    // A DLPack producer's tensor described from its own DLPack dtype (NumPy
    // need not know it): (dtype text, shape, bytes), bytes a read-only
    // memoryview of the whole tensor that keeps it alive, or None when it
    // is not C-contiguous.
        if (a.device_type() != nb::device::cpu::value)
          raise_error(g_value,
                      "send takes tensors in CPU memory; copy a device tensor to the host first "
                      "(e.g. t.cpu())");
        std::string text = dl_text(a.dtype());
        if (text.empty())
          raise_error(g_value, "a tensor of DLPack dtype (code " + std::to_string(a.dtype().code) +
                                   ", " + std::to_string(a.dtype().bits) + " bits, " +
                                   std::to_string(a.dtype().lanes) +
                                   " lanes) cannot be sent: its elements are not whole bytes");
        nb::list shape;
        bool contiguous = true;  // C order (a dim of 1 any stride; no elements: any)
        int64_t step = 1;
        for (size_t i = a.ndim(); i-- > 0;) {
          if (a.shape(i) != 1 && a.stride(i) != step) contiguous = false;
          step *= (int64_t)a.shape(i);
        }
        if (a.size() == 0) contiguous = true;
        for (size_t i = 0; i < a.ndim(); i++) shape.append(a.shape(i));
        if (!contiguous) return nb::make_tuple(text, nb::tuple(shape), nb::none());
        size_t nbytes[1] = {a.nbytes()};
        nb::object owner = nb::cast(a);  // keeps the producer's tensor alive
        nb::object view = nb::cast(nb::ndarray<nb::ro, nb::memview>(
            a.data(), 1, nbytes, owner, nullptr, nb::dtype<uint8_t>(), nb::device::cpu::value));
        return nb::make_tuple(text, nb::tuple(shape), view);
      },
      "tensor"_a);
  m.def(
      "dlpack_dtype",
      [](const std::string &text) -> nb::object {
        nb::dlpack::dtype dt;
        if (!dl_dtype_of_text(text.data(), text.size(), &dt)) return nb::none();
        return nb::make_tuple(dt.code, dt.bits);
      },
      "text"_a, nb::sig("def dlpack_dtype(text: str) -> tuple[int, int] | None"),
      "(code, bits) of a 'dlpack:<code>:<bits>' dtype text, or None.");

  // A message's array metadata, encoded and parsed by the core (one copy of
  // the format: docs/ABI.md, "Channels").
  m.def(
      "encode_meta",
      [](const std::string &dtype, const std::vector<uint64_t> &shape) -> nb::object {
        ss_msg_meta meta{};
        meta.ndim = (uint32_t)std::min<size_t>(shape.size(), SS_MAX_NDIM + 1);
        if (meta.ndim > SS_MAX_NDIM) return nb::none();
        for (uint32_t i = 0; i < meta.ndim; i++) meta.shape[i] = shape[i];
        meta.dtype = dtype.data();
        meta.dtype_len = (uint32_t)std::min<size_t>(dtype.size(), SS_MSG_MAX_META + 1);
        char out[SS_MSG_MAX_META];
        size_t n = ss_msg_meta_encode(&meta, out, sizeof out);
        if (n == 0) return nb::none();
        return nb::bytes(out, n);
      },
      "dtype"_a, "shape"_a,
      nb::sig("def encode_meta(dtype: str, shape: tuple[int, ...]) -> bytes | None"),
      "An array message's metadata for dtype text and shape; None if it does not fit "
      "(more than MAX_NDIM dimensions, or more than MAX_META bytes).");
  m.def(
      "parse_meta",
      [](nb::bytes meta) -> nb::object {
        ss_msg_meta m;
        if (ss_msg_meta_parse(meta.c_str(), meta.size(), &m) != SS_OK) return nb::none();
        nb::list shape;
        for (uint32_t i = 0; i < m.ndim; i++) shape.append(m.shape[i]);
        return nb::make_tuple(nb::bytes(m.dtype, m.dtype_len), nb::tuple(shape));
      },
      "meta"_a, nb::sig("def parse_meta(meta: bytes) -> tuple[bytes, tuple[int, ...]] | None"),
      "(dtype text bytes, shape) of an array message's metadata; None if malformed.");

  load_error_types();
  m.def("set_decoder", [](nb::handle decode) {
    Py_XINCREF(decode.ptr());
    Py_XDECREF(g_decode);
    g_decode = decode.ptr();
  });

  // A channel's ring words read from its header alone (no attach, no ring
  // mapping): for shmstream.stat and the registry.
  m.def(
      "peek",
      [](const std::string &segname) {
        std::unique_ptr<ss_segment, void (*)(ss_segment *)> seg(ss_segment_new(), ss_segment_free);
        if (!seg) throw std::bad_alloc();
        int rc = ss_segment_peek(seg.get(), segname.c_str());
        if (rc == SS_OK && ss_segment_identity(seg.get())->kind != SS_KIND_CHANNEL) rc = SS_EKIND;
        if (rc != SS_OK) ssb::raise_status(rc, {"channel", segname, "peek", "", ""});
        ss_ring_words w;
        ss_ring_words_get(seg.get(), &w);
        nb::dict d;
        d["capacity"] = ss_segment_payload_bytes(seg.get());
        d["head"] = w.head;
        d["tail"] = w.tail;
        d["producer"] = end_info(w, SS_ROLE_PRODUCER);
        d["consumer"] = end_info(w, SS_ROLE_CONSUMER);
        return d;
      },
      "segname"_a,
      "capacity, head, tail and both ends (pid, state, "
      "attaches, takeovers, alive, pidns_ino).");

  nb::class_<Message>(m, "Message",
                      "A received message: type_id, data (bytes) and, for arrays, .array.")
      .def_ro("type_id", &Message::type_id)
      .def_ro("data", &Message::data)
      .def_ro("meta", &Message::meta)
      .def_prop_ro("is_array", [](const Message &s) { return (s.flags & SS_MSG_ARRAY) != 0; })
      .def_prop_ro(
          "array",
          [](const Message &s) -> nb::object {
            if (!(s.flags & SS_MSG_ARRAY)) return nb::none();
            return nb::handle(g_decode)(s.meta, s.data);
          },
          "The message as a read-only ndarray (None for a bytes message).")
      .def(
          "__dlpack__",
          [](const Message &s, nb::handle, nb::handle max_version, nb::handle dl_device,
             nb::handle copy) {
            bool versioned = dl_check_kwargs(max_version, dl_device, copy);
            size_t size = (size_t)PyBytes_GET_SIZE(s.data.ptr());
            DLLayout l;
            int why = dl_layout(s.flags, (const uint8_t *)PyBytes_AS_STRING(s.meta.ptr()),
                                (uint32_t)PyBytes_GET_SIZE(s.meta.ptr()), size, &l);
            if (why) raise_layout(why, size);
            return dl_message(PyBytes_AS_STRING(s.data.ptr()), l, s.data, versioned);
          },
          nb::kw_only(), "stream"_a = nb::none(), "max_version"_a = nb::none(),
          "dl_device"_a = nb::none(), "copy"_a = nb::none(),
          "A DLPack capsule of the copied message (any dtype, bfloat16 included), read-only; "
          "it keeps the message's bytes alive.")
      .def("__dlpack_device__", [](const Message &) { return nb::make_tuple(1, 0); })
      .def("__len__", [](const Message &s) { return nb::len(s.data); })
      .def("__repr__", [](const Message &s) {
        return "Message(type_id=" + std::to_string(s.type_id) + ", " +
               std::to_string(nb::len(s.data)) + " bytes" +
               ((s.flags & SS_MSG_ARRAY) ? ", array)" : ")");
      });

  nb::class_<Pin>(m, "_Pin", "Keeps one received record from reuse (internal).");

  nb::class_<RxMessage>(
      m, "ZeroCopyMessage",
      "A message read in place. Valid inside its 'with' block; views taken from it "
      "(np.asarray, torch.from_dlpack, .data) keep its ring bytes from reuse until "
      "they are gone.")
      .def_ro("type_id", &RxMessage::type_id)
      .def_ro("meta", &RxMessage::meta)
      .def_prop_ro("nbytes", [](const RxMessage &r) { return r.size; })
      .def_prop_ro("is_array", [](const RxMessage &r) { return (r.flags & SS_MSG_ARRAY) != 0; })
      .def_prop_ro("released",
                   [](const RxMessage &r) { return !r.pin.is_valid() || r.pin.is_none(); })
      .def_prop_ro("data", &RxMessage::bytes_view,
                   "The payload as a read-only memoryview (pins the ring bytes while alive).")
      .def_prop_ro("array", &RxMessage::array_view,
                   "The payload as a read-only ndarray view (uint8 for a bytes message).")
      .def(
          "__array__",
          [](const RxMessage &r, nb::handle dtype, nb::handle copy) {
            nb::object a = r.array_view();
            if (!dtype.is_none()) {
              nb::object want = nb::module_::import_("numpy").attr("dtype")(dtype);
              if (!want.equal(a.attr("dtype"))) return nb::object(a.attr("astype")(want));
            }
            int c = PyObject_IsTrue(copy.ptr());
            if (c < 0) throw nb::python_error();
            return c ? nb::object(a.attr("copy")()) : a;
          },
          "dtype"_a = nb::none(), "copy"_a = nb::none(),
          "The payload as an ndarray (numpy's array protocol): the view, converted to dtype "
          "or copied when asked.")
      .def("release", &RxMessage::release,
           "Drop this message's hold on its ring bytes (views keep theirs).")
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__exit__",
           [](RxMessage &r, nb::args) {
             r.release();
             return false;
           })
      .def(
          "__dlpack__",
          [](const RxMessage &r, nb::handle, nb::handle max_version, nb::handle dl_device,
             nb::handle copy) { return r.dlpack(max_version, dl_device, copy); },
          nb::kw_only(), "stream"_a = nb::none(), "max_version"_a = nb::none(),
          "dl_device"_a = nb::none(), "copy"_a = nb::none(),
          "A DLPack capsule of the message (no copy); it and the consumer's tensor keep the "
          "ring bytes pinned until they are gone.")
      .def("__dlpack_device__", [](RxMessage &) { return nb::make_tuple(1, 0); });

  m.def(
      "release_all",
      [](nb::handle msgs) {
    // ZeroCopyBatch's exit: every message's hold dropped in one call.
        nb::object seq = nb::steal(PySequence_Fast(msgs.ptr(), "release_all takes a list"));
        if (!seq.is_valid()) throw nb::python_error();
        Py_ssize_t n = PySequence_Fast_GET_SIZE(seq.ptr());
        PyObject **it = PySequence_Fast_ITEMS(seq.ptr());
        for (Py_ssize_t i = 0; i < n; i++) nb::cast<RxMessage &>(nb::handle(it[i])).release();
      },
      "msgs"_a, "Release every ZeroCopyMessage of msgs (views keep their own holds).");

  nb::class_<Channel>(m, "Channel")
      .def_static(
          "create",
          [](const std::string &name, uint64_t capacity, int role, int mode) {
            Channel *c = new Channel();
            c->name_ = name;
            int rc = SS_ENAME;
            if (name.find('\0') == std::string::npos) {
              nb::gil_scoped_release nogil;
              rc = ss_channel_create(c->ch, name.c_str(), capacity, role, (uint32_t)mode);
            }
            check_create_rc(c, rc, name, true);
            return c;
          },
          "name"_a, "capacity"_a, "role"_a, "mode"_a = 0600, nb::rv_policy::take_ownership)
      .def_static(
          "open",
          [](const std::string &name, int role, const std::vector<uint32_t> &allow_owners) {
            Channel *c = new Channel();
            c->name_ = name;
            ss_open_opts opts = ssb::open_opts(allow_owners);
            int rc;
            {
              nb::gil_scoped_release nogil;
              rc = ss_channel_open_ex(c->ch, name.data(), name.size(), role, &opts);
            }
            check_create_rc(c, rc, name, false);
            return c;
          },
          "name"_a, "role"_a, "allow_owners"_a = std::vector<uint32_t>(),
          nb::rv_policy::take_ownership)
      .def_prop_ro("name", [](Channel &c) { return c.name_; })
      .def_prop_ro(
          "segname",
          [](Channel &c) { return std::string(ss_segment_segname(ss_channel_segment(c.ch))); })
      .def_prop_ro("capacity", [](Channel &c) { return ss_channel_capacity(c.ch); })
      .def_prop_ro("role", [](Channel &c) { return ss_channel_role(c.ch); })
      .def_prop_ro("closed", [](Channel &c) { return !c.attached(); })
      .def(
          "max_message",
          [](Channel &c, uint32_t meta_len) { return ss_channel_max_message(c.ch, meta_len); },
          "meta_len"_a = 0)
      .def_prop_rw(
          "batch", [](Channel &c) { return ss_channel_batch(c.ch); },
          [](Channel &c, uint32_t b) { ss_channel_set_batch(c.ch, b); })
      .def_prop_rw(
          "spin_ns", [](Channel &c) { return ss_channel_spin_ns(c.ch); },
          [](Channel &c, int64_t s) { ss_channel_set_spin_ns(c.ch, s); })
      .def_prop_ro(
          "spin_policy", [](Channel &c) { return wait_policy_dict(ss_channel_segment(c.ch)); },
          "This end's wait policy (docs/waiting.md), as Segment.spin_policy.")
      .def_prop_ro("head", [](Channel &c) { return ring_words(c).head; })
      .def_prop_ro("tail", [](Channel &c) { return ring_words(c).tail; })
      .def_prop_ro("pending", [](Channel &c) { return ss_channel_pending(c.ch); })
      .def(
          "end_info",
          [](Channel &c, int role) {
            // (pid, state, attaches, takeovers, alive, pidns_ino) of one end, for stat and tests.
            if (!ss_segment_mapped(ss_channel_segment(c.ch)))
              raise_error(g_handle_closed, "channel is closed");
            return end_info(ring_words(c), role);
          },
          "role"_a)
      .def("peer_status",
           [](Channel &c) {
             // 0 ok, or the negative status (dead / closed), and the peer's pid.
             if (!c.attached()) raise_error(g_handle_closed, "channel is closed");
             int32_t pid = 0;
             int rc = ss_channel_peer_status(c.ch, &pid);
             return nb::make_tuple(rc, pid);
           })
      .def(
          "send",
          [](Channel &c, nb::handle obj, uint32_t type_id, nb::handle meta, nb::handle timeout) {
            c.send(obj, type_id, meta, to_ns(timeout));
          },
          "obj"_a, "type_id"_a = 0, "meta"_a = nb::none(), "timeout"_a = nb::none())
      .def(
          "send_many",
          [](Channel &c, nb::handle items, uint32_t type_id, nb::handle meta, nb::handle timeout) {
            return c.send_many(items, type_id, meta, to_ns(timeout));
          },
          "items"_a, "type_id"_a = 0, "meta"_a = nb::none(), "timeout"_a = nb::none())
      .def(
          "loan",
          [](Channel &c, size_t nbytes, nb::handle meta, nb::handle timeout) {
            return c.loan(nbytes, meta, to_ns(timeout));
          },
          "nbytes"_a, "meta"_a = nb::none(), "timeout"_a = nb::none())
      .def(
          "commit",
          [](Channel &c, size_t nbytes, uint32_t type_id, bool array) {
            if (!ss_channel_tx_open(c.ch)) raise_error(g_loan, "no zero-copy send is open");
            ss_channel_commit_tx(c.ch, nbytes, type_id, array ? SS_MSG_ARRAY : 0);
          },
          "nbytes"_a, "type_id"_a = 0, "array"_a = false)
      .def("rollback", [](Channel &c) { ss_channel_rollback_tx(c.ch); })
      .def("flush", [](Channel &c) { ss_channel_flush(c.ch); })
      .def(
          "recv", [](Channel &c, nb::handle timeout) { return c.recv(to_ns(timeout)); },
          "timeout"_a = nb::none())
      .def(
          "drain",
          [](Channel &c, size_t max, nb::handle timeout) { return c.drain(max, to_ns(timeout)); },
          "max_messages"_a, "timeout"_a.none() = 0.0)
      .def(
          "recv_view", [](Channel &c, nb::handle timeout) { return c.recv_view(to_ns(timeout)); },
          "timeout"_a = nb::none())
      .def(
          "drain_capsules",
          [](Channel &c, size_t max, nb::handle timeout) {
            return c.drain_capsules(max, to_ns(timeout));
          },
          "max_messages"_a, "timeout"_a.none() = 0.0)
      .def(
          "drain_views",
          [](Channel &c, size_t max, nb::handle timeout) {
            return c.drain_views(max, to_ns(timeout));
          },
          "max_messages"_a, "timeout"_a.none() = 0.0)
      .def("close", &Channel::close)
      .def("cancel", [](Channel &c) { ss_channel_cancel(c.ch); });
}
