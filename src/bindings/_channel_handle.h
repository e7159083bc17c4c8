// The Channel class behind shmstream._channel.Channel: one attached end of
// a ring, the views that pin its bytes, and the DLPack layout of a message.
// Included once, by _channel.cpp (CMakeLists.txt builds each listed _<part>.cpp as a module).
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>
#include "_binding.h"
#include "_dlpack.h"
#include "shmstream.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

using namespace ssb;

// (meta: bytes, buffer) -> ndarray, for copied array messages. A raw, never
// released reference: a global nb::object would be decref'd by a static
// destructor after the interpreter has finalized (a fatal error at exit).
PyObject *g_decode = nullptr;

constexpr size_t kGilFreeCopyBytes = 64 * 1024;

// The dtype text of a DLPack dtype NumPy has no name for (bfloat16, the
// float8 kinds, ...): "dlpack:<code>:<bits>", one lane (docs/ABI.md,
// "Channel", array metadata). dl_text writes it; dl_dtype reads it back.
constexpr char kDLTextPrefix[] = "dlpack:";
constexpr size_t kDLTextPrefixLen = sizeof kDLTextPrefix - 1;

// Reads a decimal number of at most 3 digits (<= 255) from s[*i..n) up to
// `stop` (or the end); false if there is none or it is out of range.
bool dl_number(const char *s, size_t n, size_t *i, char stop, unsigned *out) {
  unsigned v = 0;
  size_t start = *i;
  while (*i < n && s[*i] != stop) {
    if (s[*i] < '0' || s[*i] > '9' || *i - start >= 3) return false;
    v = v * 10 + (unsigned)(s[*i] - '0');
    ++*i;
  }
  if (*i == start || v > 255) return false;
  *out = v;
  return true;
}

// The DLPack dtype of a "dlpack:<code>:<bits>" text: a whole number of
// bytes per element (8..256 bits), one lane.
bool dl_dtype_of_text(const char *s, size_t n, nb::dlpack::dtype *out) {
  if (n <= kDLTextPrefixLen || std::memcmp(s, kDLTextPrefix, kDLTextPrefixLen) != 0) return false;
  size_t i = kDLTextPrefixLen;
  unsigned code, bits;
  if (!dl_number(s, n, &i, ':', &code) || i >= n || s[i] != ':') return false;
  ++i;
  if (!dl_number(s, n, &i, '\0', &bits) || i != n || bits == 0 || bits % 8) return false;
  out->code = (uint8_t)code;
  out->bits = (uint8_t)bits;
  out->lanes = 1;
  return true;
}

// DLPack dtype for NumPy's dtype.str of a plain numeric type ("<f4", "|u1")
// or for a "dlpack:" text; false for anything DLPack cannot describe
// (structured, strings, big-endian). *numpy: whether NumPy names it.
bool dl_dtype(const char *s, size_t n, nb::dlpack::dtype *out, bool *numpy = nullptr) {
  if (numpy) *numpy = false;
  if (dl_dtype_of_text(s, n, out)) return true;
  if (numpy) *numpy = true;
  if (n < 3 || (s[0] != '<' && s[0] != '|' && s[0] != '=')) return false;
  int bytes = 0;
  for (size_t i = 2; i < n; i++) {
    if (s[i] < '0' || s[i] > '9' || bytes > 32) return false; // no int overflow
    bytes = bytes * 10 + (s[i] - '0');
  }
  using C = nb::dlpack::dtype_code;
  C code;
  switch (s[1]) {
    case 'f': code = C::Float; break;
    case 'i': code = C::Int; break;
    case 'u': code = C::UInt; break;
    case 'c': code = C::Complex; break;
    case 'b':
      code = C::Bool;
      if (bytes != 1) return false;
      break;
    default: return false;
  }
  if (bytes <= 0 || bytes > 32) return false;
  out->code = (uint8_t)code;
  out->bits = (uint8_t)(bytes * 8);
  out->lanes = 1;
  return true;
}

// The dtype text a message carries for a DLPack dtype: NumPy's dtype.str
// where NumPy has the type (what dl_dtype maps back to it), else a
// "dlpack:<code>:<bits>" text. Empty: not one a message can carry (lanes,
// or a size that is not a whole number of bytes).
std::string dl_text(nb::dlpack::dtype dt) {
  if (dt.lanes != 1 || dt.bits == 0 || dt.bits % 8) return "";
  using C = nb::dlpack::dtype_code;
  int bytes = dt.bits / 8;
  char kind = 0;
  switch ((C)dt.code) {
    case C::Int: kind = bytes <= 8 ? 'i' : 0; break;
    case C::UInt: kind = bytes <= 8 ? 'u' : 0; break;
    case C::Float: kind = bytes == 2 || bytes == 4 || bytes == 8 ? 'f' : 0; break;
    case C::Complex: kind = bytes == 8 || bytes == 16 ? 'c' : 0; break;
    case C::Bool: kind = bytes == 1 ? 'b' : 0; break;
    default: break;
  }
  if (kind && (bytes & (bytes - 1)) == 0)
    return std::string(bytes == 1 ? "|" : "=") + kind + std::to_string(bytes);
  return std::string(kDLTextPrefix) + std::to_string(dt.code) + ":" + std::to_string(dt.bits);
}

// Bytes the shape and item size describe equal the payload's, without
// overflow: a view built from the metadata stays inside the record.
bool meta_fits(const ss_msg_meta &am, size_t itemsize, size_t size) {
  uint64_t n = itemsize;
  for (uint32_t i = 0; i < am.ndim; i++) {
    if (am.shape[i] && n > UINT64_MAX / am.shape[i]) return false;
    n *= am.shape[i];
  }
  return n == size;
}

// The DLPack layout of a message (a byte message: uint8[size]): 0, or why
// it has none (1: no DLPack dtype, 2: its shape does not match its bytes).
// numpy: NumPy has a dtype for it (not a "dlpack:" text).
struct DLLayout {
  int32_t ndim = 1;
  size_t shape[SS_MAX_NDIM]{};
  nb::dlpack::dtype dt = nb::dtype<uint8_t>();
  bool numpy = true;
};

int dl_layout(uint32_t flags, const uint8_t *meta, uint32_t meta_len, size_t size, DLLayout *out) {
  out->shape[0] = size;
  if (!(flags & SS_MSG_ARRAY)) return 0;
  ss_msg_meta am;
  if (ss_msg_meta_parse(meta, meta_len, &am) != SS_OK ||
      !dl_dtype(am.dtype, am.dtype_len, &out->dt, &out->numpy))
    return 1;
  for (uint32_t i = 0; i < am.ndim; i++) out->shape[i] = (size_t)am.shape[i];
  out->ndim = (int32_t)am.ndim;
  // The metadata is the producer's word: a shape that claims more bytes
  // than the record carries would make a view past it (fuzz_py_recv finding).
  return meta_fits(am, out->dt.bits / 8, size) ? 0 : 2;
}

[[noreturn]] void raise_layout(int why, size_t size) {
  if (why == 1)
    raise_error(g_buffer, "this message's dtype has no DLPack equivalent; use np.asarray");
  raise_error(g_corrupt,
              "a received array message is corrupt: its shape and dtype describe "
              "another size than its " +
                  std::to_string(size) +
                  " payload bytes; "
                  "the producer wrote a bad record");
}

// A DLPack capsule of a message's bytes, pinned by `pin`.
nb::object dl_message(const void *data, const DLLayout &l, nb::handle pin, bool versioned) {
  return versioned ? dl_capsule<DLManagedTensorVersioned>((void *)data, l.ndim, l.shape, l.dt.code,
                                                          l.dt.bits, pin, true)
                   : dl_capsule<DLManagedTensor>((void *)data, l.ndim, l.shape, l.dt.code,
                                                 l.dt.bits, pin, true);
}

class Channel;

// Keeps one received record's bytes from reuse while anything refers to it:
// every view handed out for the record owns a reference to its Pin.
struct Pin {
  nb::object chan_ref;  // keeps the Channel (and the mapping) alive
  Channel *chan;
  uint64_t end;
  ~Pin();
};

// A message received without a copy (recv_zero_copy / drain_zero_copy).
struct RxMessage {
  nb::object pin;  // None once released
  uint32_t type_id = 0, flags = 0;
  size_t size = 0;
  const uint8_t *data = nullptr;
  nb::bytes meta;

  void check() const {
    if (!pin.is_valid() || pin.is_none())
      raise_error(g_handle_closed,
                  "this zero-copy message was released at the end of its 'with' "
                  "block; keep what you need (np.array(msg) copies) inside the block");
  }
  nb::object bytes_view() const {
    check();
    size_t shape[1] = {size};
    return nb::cast(nb::ndarray<nb::ro, nb::memview>(data, 1, shape, pin, nullptr,
                                                     nb::dtype<uint8_t>(), nb::device::cpu::value));
  }
  // A typed, read-only view, or None when the dtype has no DLPack code or
  // no NumPy one (channels/_messages.py's decoder says what to do then).
  nb::object typed_view() const {
    check();
    DLLayout l;
    int why = dl_layout(flags, (const uint8_t *)meta.c_str(), (uint32_t)meta.size(), size, &l);
    if (why == 1 || (why == 0 && !l.numpy)) return nb::none();
    if (why) raise_layout(why, size);
    return nb::cast(nb::ndarray<nb::ro, nb::array_api>(data, (size_t)l.ndim, l.shape, pin, nullptr,
                                                       l.dt, nb::device::cpu::value));
  }
  // The payload as a read-only ndarray view (uint8 for a bytes message);
  // a dtype without a DLPack code (structured, strings, ...) is viewed by
  // channels/_messages.py's decoder (set_decoder).
  nb::object array_view() const {
    nb::object asarray = nb::module_::import_("numpy").attr("asarray");
    nb::object typed = typed_view();
    if (!typed.is_none()) return asarray(typed);
    return nb::handle(g_decode)(meta, bytes_view());
  }
  // A DLPack capsule of the message made here (no ndarray in between),
  // read-only when versioned; the consumer's tensor holds the pin.
  nb::object dlpack(nb::handle max_version, nb::handle dl_device, nb::handle copy) const {
    check();
    bool versioned = dl_check_kwargs(max_version, dl_device, copy);
    DLLayout l;
    int why = dl_layout(flags, (const uint8_t *)meta.c_str(), (uint32_t)meta.size(), size, &l);
    if (why) raise_layout(why, size);
    return dl_message(data, l, pin, versioned);
  }

  void release() { pin = nb::none(); }
};

// A copied message (recv / drain).
struct Message {
  uint32_t type_id = 0, flags = 0;
  nb::object data;  // bytes
  nb::object meta;  // bytes (empty for plain byte messages)
};

class Channel {
 public:
  ss_channel *ch = new_handle();  // the C API's opaque handle
  std::string name_;

  Channel() = default;
  Channel(const Channel &) = delete;
  Channel &operator=(const Channel &) = delete;
  ~Channel() { ss_channel_free(ch); }

  static ss_channel *new_handle() {
    ss_channel *c = ss_channel_new();
    if (!c) throw std::bad_alloc();
    return c;
  }

  bool attached() const { return ss_channel_attached(ch) != 0; }
  void check_open(const char *what) const {
    if (!attached())
      raise_error(g_handle_closed,
                  std::string(what) + " on channel '" + name_ +
                      "', which is closed; attach again with shmstream.open_channel('" + name_ +
                      "')");
  }
  bool producer() const { return ss_channel_role(ch) == SS_ROLE_PRODUCER; }

  // A send while this end's zero-copy send is open: the loan's state, not
  // the end's role, is wrong (LoanStateError).
  [[noreturn]] void raise_loan_open(const char *op) const {
    raise_error(g_loan, std::string(op) + " on channel '" + name_ +
                            "': a zero-copy send on it is already open; end its 'with "
                            "send_zero_copy(...)' block first");
  }

  // What every send checks first: an open producer end with no zero-copy
  // send in progress.
  void check_sender(const char *op) {
    check_open(op);
    if (!producer())
      raise_error(g_role, std::string(op) + " on the consumer end of '" + name_ + "'");
    if (ss_channel_tx_open(ch)) raise_loan_open(op);
  }

  // The array metadata bytes of a send (None: a bytes message, no metadata).
  static void meta_bytes(nb::handle meta, const char *&mp, size_t &ml) {
    mp = nullptr;
    ml = 0;
    if (meta.is_none()) return;
    mp = PyBytes_AsString(meta.ptr());
    if (!mp) throw nb::python_error();
    ml = (size_t)PyBytes_GET_SIZE(meta.ptr());
  }

  [[noreturn]] void raise_status(int rc, const char *op) {
    std::string detail = rc == SS_EROLE && ss_channel_tx_open(ch)
                             ? " (a zero-copy send is still open)"
                             : "";
    const char *when = rc == SS_ECORRUPT ? corrupt_when(ss_channel_segment(ch), &detail) : "";
    if (!*when) when = producer() ? "producer" : "consumer";
    ssb::raise_status(rc, {"channel", name_, op, when, detail});
  }

  // fn(chunk_ns) through the one chunked wait (_binding.h); spins only in
  // the first chunk.
  template <class F>
  int chunked(int64_t timeout_ns, F &&fn) {
    int64_t spin = ss_channel_spin_ns(ch);
    bool first = true;
    int rc;
    try {
      rc = ssb::chunked(timeout_ns, [&](int64_t chunk) {
        if (!first) ss_channel_set_spin_ns(ch, 0);
        first = false;
        return fn(chunk);
      });
    } catch (...) {
      ss_channel_set_spin_ns(ch, spin);
      throw;
    }
    ss_channel_set_spin_ns(ch, spin);
    return rc;
  }

  // ---- producer ----

  void acquire_tx(size_t size, uint32_t meta_len, int64_t timeout_ns, void **payload, void **meta) {
    int rc = ss_channel_acquire_tx(ch, size, meta_len, 0, payload, meta);
    if (rc == SS_ETIMEDOUT && timeout_ns != 0)
      rc = chunked(timeout_ns, [&](int64_t chunk) {
        return ss_channel_acquire_tx(ch, size, meta_len, chunk, payload, meta);
      });
    if (rc) send_failed(rc, size, meta_len, "send");
  }

  // Why a send's acquire failed, in the words of the checks a send skips on
  // its way in (each is a call into the core that every send would pay,
  // issue 48; the core refuses the same cases): this end's role, an open
  // zero-copy send, a message that can never fit; else the status.
  [[noreturn]] void send_failed(int rc, size_t size, size_t meta_len, const char *op) {
    if (rc == SS_EROLE) check_sender(op);
    if (rc == SS_ETOOBIG) check_size(size, meta_len);
    raise_status(rc, op);
  }

  void check_size(size_t size, size_t meta_len) {
    if (meta_len > SS_MSG_MAX_META)
      raise_error(g_value, "array description of " + std::to_string(meta_len) +
                               " bytes is too long for a message header");
    uint64_t max = ss_channel_max_message(ch, (uint32_t)meta_len);
    if (size > max)
      raise_error(g_value, "message of " + std::to_string(size) +
                               " bytes is larger than the "
                               "ring of '" +
                               name_ + "' can hold (at most " + std::to_string(max) +
                               " bytes per message with capacity " +
                               std::to_string(ss_channel_capacity(ch)) +
                               "); create the channel with a larger capacity");
  }

  // One message; its size is checked by the core (send_failed says why).
  void send_one(const void *src, size_t n, const char *meta, size_t meta_len, uint32_t type_id,
                int64_t timeout_ns) {
    if (meta_len > SS_MSG_MAX_META) check_size(n, meta_len);  // before the u32 below
    void *payload, *mp;
    acquire_tx(n, (uint32_t)meta_len, timeout_ns, &payload, &mp);
    if (meta_len) std::memcpy(mp, meta, meta_len);
    if (n >= kGilFreeCopyBytes) {
      nb::gil_scoped_release nogil;
      std::memcpy(payload, src, n);
    } else if (n) {
      std::memcpy(payload, src, n);
    }
    ss_channel_commit_tx(ch, n, type_id, meta_len ? SS_MSG_ARRAY : 0);
  }

  void send(nb::handle obj, uint32_t type_id, nb::handle meta, int64_t timeout_ns) {
    check_open("send");  // the role and an open loan: the core's, on failure
    const char *mp;
    size_t ml;
    meta_bytes(meta, mp, ml);
    if (PyBytes_CheckExact(obj.ptr())) {
      send_one(PyBytes_AS_STRING(obj.ptr()), (size_t)PyBytes_GET_SIZE(obj.ptr()), mp, ml, type_id,
               timeout_ns);
      return;
    }
    Buffer b(obj);
    send_one(b.view.buf, (size_t)b.view.len, mp, ml, type_id, timeout_ns);
  }

  // All items carry the same array metadata `meta` (None for bytes messages).
  size_t send_many(nb::handle items, uint32_t type_id, nb::handle meta, int64_t timeout_ns) {
    check_sender("send_many");
    nb::object seq = nb::steal(PySequence_Fast(items.ptr(),
                                               "send_many takes a sequence of "
                                               "bytes-like objects"));
    if (!seq.is_valid()) throw nb::python_error();
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq.ptr());
    PyObject **it = PySequence_Fast_ITEMS(seq.ptr());
    const char *mp;
    size_t ml;
    meta_bytes(meta, mp, ml);
    // Check every size first: nothing is written if one can never fit.
    uint64_t max = ss_channel_max_message(ch, (uint32_t)ml);
    for (Py_ssize_t i = 0; i < n; i++) {
      Py_ssize_t len = PyBytes_CheckExact(it[i]) ? PyBytes_GET_SIZE(it[i]) : -1;
      if (len < 0) {
        Buffer b(it[i]);
        len = b.view.len;
      }
      if ((uint64_t)len > max) check_size((size_t)len, ml);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
      if (PyBytes_CheckExact(it[i])) {
        send_one(PyBytes_AS_STRING(it[i]), (size_t)PyBytes_GET_SIZE(it[i]), mp, ml, type_id,
                 timeout_ns);
      } else {
        Buffer b(it[i]);
        send_one(b.view.buf, (size_t)b.view.len, mp, ml, type_id, timeout_ns);
      }
    }
    ss_channel_flush(ch);
    return (size_t)n;
  }

  // Zero-copy send: a writable byte view of the loan; commit or rollback.
  nb::object loan(size_t nbytes, nb::handle meta, int64_t timeout_ns) {
    check_sender("send_zero_copy");
    const char *mp;
    size_t ml;
    meta_bytes(meta, mp, ml);
    check_size(nbytes, ml);
    void *payload, *mpp;
    acquire_tx(nbytes, (uint32_t)ml, timeout_ns, &payload, &mpp);
    if (ml) std::memcpy(mpp, mp, ml);
    size_t shape[1] = {nbytes};
    nb::handle owner = nb::find(this);
    return nb::cast(nb::ndarray<uint8_t, nb::memview>(
        payload, 1, shape, owner, nullptr, nb::dtype<uint8_t>(), nb::device::cpu::value));
  }

  // ---- consumer ----

  int acquire_rx(int64_t timeout_ns, ss_msg *m) {
    int rc = ss_channel_acquire_rx(ch, 0, m);
    if (rc == SS_ETIMEDOUT) flush_release();  // the producer may wait for that room
    if (rc == SS_ETIMEDOUT && timeout_ns != 0)
      rc = chunked(timeout_ns, [&](int64_t chunk) { return ss_channel_acquire_rx(ch, chunk, m); });
    return rc;
  }

  void check_consumer(const char *what) {
    check_open(what);
    if (producer())
      raise_error(g_role, std::string(what) + " on the producer end of '" + name_ + "'");
  }

  // After copying a message out: released now unless views pin earlier
  // ones (the core's rule: ss_channel_done_rx).
  void done_copied() {
    ss_channel_skip_rx(ch);
    ss_channel_done_rx(ch);
  }

  static nb::object copy_out(const ss_msg &m, nb::object *meta) {
    *meta = nb::steal(PyBytes_FromStringAndSize((const char *)m.meta, m.meta_len));
    PyObject *b = PyBytes_FromStringAndSize(nullptr, (Py_ssize_t)m.size);
    if (!b) throw nb::python_error();
    if (m.size >= kGilFreeCopyBytes) {
      nb::gil_scoped_release nogil;
      std::memcpy(PyBytes_AS_STRING(b), m.data, m.size);
    } else {
      std::memcpy(PyBytes_AS_STRING(b), m.data, m.size);
    }
    return nb::steal(b);
  }

  // A received message copied out of the ring (the record stays unconsumed).
  Message copied(const ss_msg &m) {
    Message out;
    out.type_id = m.type_id;
    out.flags = m.flags;
    out.data = copy_out(m, &out.meta);
    return out;
  }

  // The next message for recv and recv_zero_copy: waits up to timeout_ns,
  // raises on any failure (a timeout included).
  ss_msg receive_one(const char *op, int64_t timeout_ns) {
    check_consumer(op);
    ss_msg m;
    int rc = acquire_rx(timeout_ns, &m);
    if (rc) raise_status(rc, op);
    return m;
  }

  Message recv(int64_t timeout_ns) {
    Message out = copied(receive_one("recv", timeout_ns));
    done_copied();
    return out;
  }

  // The first message of a drain: false (an empty batch) when max is 0 or
  // a bounded wait ends with nothing; raises on any other failure.
  bool drain_first(const char *op, size_t max, int64_t timeout_ns, ss_msg *m) {
    check_consumer(op);
    if (max == 0) return false;
    int rc = acquire_rx(timeout_ns, m);
    if (rc == SS_ETIMEDOUT && timeout_ns >= 0) return false;
    if (rc) raise_status(rc, op);
    return true;
  }

  nb::list drain(size_t max, int64_t timeout_ns) {
    nb::list out;
    ss_msg m;
    if (!drain_first("drain", max, timeout_ns, &m)) return out;
    for (;;) {
      out.append(nb::cast(copied(m)));
      ss_channel_skip_rx(ch);
      if (out.size() >= max || ss_channel_acquire_rx(ch, 0, &m) != SS_OK) break;
    }
    ss_channel_done_rx(ch);  // the batch at once: one tail publication
    return out;
  }

  // Move past m, holding its bytes until its Pin is gone (ss_channel_hold_rx).
  void hold(const ss_msg &m) {
    if (ss_channel_hold_rx(ch) != SS_OK) throw std::bad_alloc();  // released: no view
  }

  RxMessage pinned(const ss_msg &m) {
    hold(m);
    Pin *p = new Pin{nb::borrow(nb::find(this)), this, m.end};
    RxMessage r;
    r.pin = nb::cast(p, nb::rv_policy::take_ownership);
    r.type_id = m.type_id;
    r.flags = m.flags;
    r.size = m.size;
    r.data = (const uint8_t *)m.data;
    r.meta = nb::bytes((const char *)m.meta, m.meta_len);
    return r;
  }

  RxMessage recv_view(int64_t timeout_ns) {
    return pinned(receive_one("recv_zero_copy", timeout_ns));
  }

  nb::list drain_views(size_t max, int64_t timeout_ns) {
    nb::list out;
    ss_msg m;
    if (!drain_first("drain_zero_copy", max, timeout_ns, &m)) return out;
    for (;;) {
      out.append(nb::cast(pinned(m)));
      if (out.size() >= max || ss_channel_acquire_rx(ch, 0, &m) != SS_OK) break;
    }
    return out;
  }

  // drain_zero_copy's messages as DLPack capsules, each pinning its record
  // until the capsule (or the tensor made of it) is gone. A message with no
  // DLPack layout ends the batch unconsumed; met first, it raises.
  nb::list drain_capsules(size_t max, int64_t timeout_ns) {
    nb::list out;
    ss_msg m;
    if (!drain_first("drain_dlpack", max, timeout_ns, &m)) return out;
    nb::handle self = nb::find(this);
    for (;;) {
      DLLayout l;
      int why = dl_layout(m.flags, (const uint8_t *)m.meta, m.meta_len, m.size, &l);
      if (why) {
        if (out.size() == 0) raise_layout(why, m.size);
        break;
      }
      hold(m);
      nb::object pin = nb::cast(new Pin{nb::borrow(self), this, m.end},
                                nb::rv_policy::take_ownership);
      out.append(dl_message(m.data, l, pin, false));
      if (out.size() >= max || ss_channel_acquire_rx(ch, 0, &m) != SS_OK) break;
    }
    return out;
  }

  // A pin died: the core releases the longest prefix nobody holds.
  void unpin(uint64_t end) { ss_channel_unhold_rx(ch, end); }

  void flush_release() { ss_channel_flush_rx(ch); }

  void close() {
    if (ss_channel_role(ch) == SS_ROLE_CONSUMER) flush_release();
    ss_channel_cancel(ch);  // wake our own waiters in other threads
    ss_channel_detach(ch);
    // The mapping stays until the last view (Pin) is gone: see ~Channel.
  }
};

Pin::~Pin() { chan->unpin(end); }

// (pid, state, attaches, takeovers, alive, pidns_ino) of one end of a ring,
// from the ring words the core read and judged (ss_ring_words_get: by
// lease, or by pid for a layout-1 channel). pidns_ino: the owner's PID
// namespace (layout 3; 0 unknown), so its pid can be read by a human.
nb::tuple end_info(const ss_ring_words &w, int role) {
  const ss_ring_end_words &e = role == SS_ROLE_PRODUCER ? w.producer : w.consumer;
  return nb::make_tuple(e.pid, e.state, e.attaches, e.takeovers, e.alive != 0, e.pidns_ino);
}

// The ring words of a channel that is still mapped (attached, or detached
// with views alive); zeros once it is closed.
ss_ring_words ring_words(const Channel &c) {
  ss_ring_words w{};
  const ss_segment *seg = ss_channel_segment(c.ch);
  if (ss_segment_mapped(seg)) ss_ring_words_get(seg, &w);
  return w;
}

// The capacities a ring may have, from the core's limits (one copy:
// include/shmstream_channel.h): "4096 to 2**40".
inline std::string capacity_rule() {
  int max_log2 = 0;
  while ((1ull << (max_log2 + 1)) <= SS_CHANNEL_MAX_CAPACITY) max_log2++;
  return std::to_string(SS_CHANNEL_MIN_CAPACITY) + " to 2**" + std::to_string(max_log2);
}

void check_create_rc(Channel *c, int rc, const std::string &name, bool creating) {
  if (rc == SS_OK) return;
  std::string detail = rc == SS_ENAME             ? name_rule()
                       : rc == SS_EATTACHED       ? (creating ? "end" : "end of that role")
                       : rc == EINVAL && creating ? capacity_rule()
                                                  : ssb::open_detail(rc, ss_channel_segment(c->ch));
  delete c;
  ssb::raise_status(rc, {"channel", name, creating ? "create" : "open", "", detail});
}

}  // namespace
