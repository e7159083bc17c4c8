// The Segment class behind shmstream._native.Segment: one mapped stream or
// shared array and the calls on it, each converting arguments, releasing
// the GIL around blocking and bulk-copy core calls, and raising on status.
// Included once, by _native.cpp (CMakeLists.txt builds each listed _<part>.cpp as a module).
#pragma once

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
#include "_ndarray.h"
#include "shmstream.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

using namespace ssb;

// Copies at least this large release the GIL; smaller ones finish faster
// than the release/re-acquire round trip would.
constexpr size_t kGilFreeCopyBytes = 32 * 1024;

const char *kind_text(int kind) {
  switch (kind) {
    case SS_KIND_STREAM: return "stream";
    case SS_KIND_CHANNEL: return "channel";
    case SS_KIND_ARRAY: return "shared array";
    default: return "shared-memory object";
  }
}

class Segment {
 public:
  // The opaque handle of the C API (include/shmstream.h); its fields are
  // read through the core's accessors.
  ss_segment *seg = new_handle();

  Segment() = default;
  Segment(const Segment &) = delete;
  Segment &operator=(const Segment &) = delete;
  ~Segment() { ss_segment_free(seg); }

  static ss_segment *new_handle() {
    ss_segment *s = ss_segment_new();
    if (!s) throw std::bad_alloc();
    return s;
  }

  // The identity as validated at open (never re-read from shared memory).
  const ss_identity &id() const { return *ss_segment_identity(seg); }
  std::string name() const { return std::string(id().name, id().name_len); }
  size_t payload_bytes() const { return (size_t)id().payload_bytes; }

  // "stream" or "shared array": the kind the error messages name.
  const char *kind_name() const { return kind_text(id().kind); }

  [[noreturn]] void raise_status(int rc, const char *op, std::string detail = "") {
    const char *when = "";
    uint32_t state = ss_segment_state(seg);
    if (rc == SS_ECORRUPT) {
      when = corrupt_when(seg, &detail);
    } else if (state == SS_STATE_ABANDONED) {
      when = "abandoned";
    } else if (rc == SS_EINCONSISTENT && state != SS_STATE_ABORTED && state != SS_STATE_VALID) {
      when = "bad state";  // no process of ours writes this value
      detail = std::to_string(state);
    }
    ssb::raise_status(rc, {kind_name(), name(), op, when, detail});
  }

  // Returns true if the lock was taken over from a dead owner.
  bool lock(int64_t timeout_ns) {
    int rc = ss_lock(seg, 0);
    if (rc == SS_ETIMEDOUT && timeout_ns != 0)
      rc = chunked(timeout_ns, [&](int64_t chunk) { return ss_lock(seg, chunk); });
    if (rc == SS_OK) return false;
    if (rc == SS_EOWNERDEAD) return true;
    ss_segment_words w;
    ss_segment_words_get(seg, &w);
    raise_status(rc, "lock", std::to_string(w.owner_pid));
  }

  void unlock() {
    int rc = ss_unlock(seg);
    if (rc) raise_status(rc, "unlock");
  }

  // After a bulk access: a file that shrank under it (src/core/guard.c)
  // made it touch zero pages; the call fails.
  void check_mapping(const char *op) {
    if (ss_segment_status(seg) != SS_OK) raise_status(SS_ECORRUPT, op);
  }

  void check_len(const Buffer &b, const char *what) {
    if ((size_t)b.view.len != payload_bytes())
      raise_error(g_value, std::string(what) + " buffer of " + std::to_string(b.view.len) +
                               " bytes does not match the payload of '" + name() + "' (" +
                               std::to_string(payload_bytes()) + " bytes)");
  }

  // count (0: count + 1) and write_time_ns (0: now) are a mirror's or a
  // replay's explicit metadata; a count must exceed the current one.
  uint64_t write(nb::handle src, std::optional<uint64_t> frame_id, bool locked, int64_t timeout_ns,
                 uint64_t count = 0, uint64_t write_time_ns = 0) {
    Buffer b(src, false);
    check_len(b, "source");
    return publish(b.view.buf, frame_id ? &*frame_id : nullptr, locked, timeout_ns, count,
                   write_time_ns);
  }

  // Publishes payload_bytes() from src (the caller keeps it alive).
  uint64_t publish(const void *src, const uint64_t *frame_id, bool locked, int64_t timeout_ns,
                   uint64_t count = 0, uint64_t write_time_ns = 0) {
    if (!locked) lock(timeout_ns);
    // The count check and the write are one core call (the core owns the
    // limit); the lock is ours to take and give back.
    ss_publish_meta meta{frame_id, write_time_ns, count};
    uint64_t c = 0;
    int rc;
    if (payload_bytes() >= kGilFreeCopyBytes) {
      nb::gil_scoped_release nogil;
      rc = ss_publish_locked(seg, src, payload_bytes(), &meta, &c);
    } else {
      rc = ss_publish_locked(seg, src, payload_bytes(), &meta, &c);
    }
    if (rc) {
      if (!locked) unlock();
      raise_count(rc, count, c, name());
    }
    // Without the caller's lock, unlock() reports a shrunk file (ss_unlock).
    if (locked) check_mapping("write");
    if (!locked) unlock();
    return c;
  }

  // ---- the hot path of a handle (stream.py write/read/read_new): one call
  // that checks the array against the bound dtype and shape and does the
  // work, or answers None for "not the fast case" (the handle's checked
  // path then converts or raises). ----

  ArraySpec spec;

  nb::object put(nb::handle src, nb::handle frame_id, nb::handle timeout) {
    const char *data = spec.data_of(src, false);
    uint64_t fid = 0;
    if (!data || (!frame_id.is_none() && !u64_of(frame_id, &fid))) return nb::none();
    return nb::int_(publish(data, frame_id.is_none() ? nullptr : &fid, false, to_ns(timeout)));
  }

  nb::object get(nb::handle dst, nb::handle timeout) {
    char *data = spec.data_of(dst, true);
    if (!data) return nb::none();
    return nb::int_(read_bytes(data, to_ns(timeout), false).count);
  }

  // spin_us: the call's (microseconds) or None for the handle's spin_ns.
  nb::object get_new(nb::handle dst, uint64_t after, nb::handle timeout, nb::handle spin_us,
                     int64_t spin_ns) {
    char *data = spec.data_of(dst, true);
    if (!data || (!spin_us.is_none() && !spin_ns_of(spin_us, &spin_ns)) ||
        ss_segment_state(seg) != SS_STATE_VALID)
      return nb::none();
    return nb::int_(read_new_bytes(data, after, to_ns(timeout), spin_ns).count);
  }

  uint64_t clear(bool locked, int64_t timeout_ns) {
    if (!locked) lock(timeout_ns);
    {
      nb::gil_scoped_release nogil;
      ss_clear_locked(seg);
    }
    if (locked) check_mapping("clear");
    uint64_t c = ss_segment_count(seg);
    if (!locked) unlock();
    return c;
  }

  std::tuple<uint64_t, uint64_t, uint64_t> read(nb::handle dst, int64_t timeout_ns,
                                                bool holds_lock) {
    Buffer b(dst, true);
    check_len(b, "destination");
    ss_pubinfo info = read_bytes(b.view.buf, timeout_ns, holds_lock);
    return {info.count, info.frame_id, info.write_time_ns};
  }

  // A consistent copy of payload_bytes() into dst (the caller keeps it alive).
  ss_pubinfo read_bytes(void *dst, int64_t timeout_ns, bool holds_lock) {
    ss_pubinfo info{};
    int rc;
    if (holds_lock || payload_bytes() < kGilFreeCopyBytes) {
      // Fast path with the GIL held: a small copy, retried a few times.
      rc = ss_read(seg, dst, payload_bytes(), 0, holds_lock, &info);
      if (rc == SS_ETIMEDOUT && timeout_ns != 0)
        rc = chunked(timeout_ns, [&](int64_t chunk) {
          return ss_read(seg, dst, payload_bytes(), chunk, 0, &info);
        });
    } else {
      rc = chunked(timeout_ns, [&](int64_t chunk) {
        return ss_read(seg, dst, payload_bytes(), chunk, 0, &info);
      });
    }
    if (rc) raise_status(rc, "read");
    return info;
  }

  // The last complete publication whatever the state: (count, frame_id,
  // write_time_ns, state).
  std::tuple<uint64_t, uint64_t, uint64_t, uint32_t> read_last_complete(nb::handle dst,
                                                                        int64_t timeout_ns,
                                                                        bool holds_lock) {
    Buffer b(dst, true);
    check_len(b, "destination");
    ss_pubinfo info{};
    int rc = holds_lock ? ss_read_last_complete(seg, b.view.buf, payload_bytes(), 0, 1, &info)
                        : chunked(timeout_ns, [&](int64_t chunk) {
                            return ss_read_last_complete(seg, b.view.buf, payload_bytes(), chunk, 0,
                                                         &info);
                          });
    if (rc) raise_status(rc, "read_last_complete");
    return {info.count, info.frame_id, info.write_time_ns, info.state};
  }

  // Raises InconsistentStreamError if the published frame is aborted, or
  // its writer died mid-write (the trylock takes over and repairs).
  void check_writer() {
    int rc = ss_check_writer(seg);
    if (rc) raise_status(rc, "read");
  }

  // One chunk of waiting; between chunks, look for a writer that died
  // mid-write (its frame is then marked abandoned and we stop waiting).
  int wait_chunk(uint64_t after, int64_t chunk, int64_t spin_ns, uint64_t *c) {
    int r = ss_wait_count(seg, after, chunk, spin_ns, c);
    if (r == SS_ETIMEDOUT && ss_check_writer(seg) == SS_EINCONSISTENT) return SS_EINCONSISTENT;
    return r;
  }

  uint64_t wait_count(uint64_t after, int64_t timeout_ns, int64_t spin_ns) {
    uint64_t c = 0;
    int rc = chunked_spinning(timeout_ns, spin_ns, [&](int64_t chunk, int64_t spin) {
      return wait_chunk(after, chunk, spin, &c);
    });
    if (rc) raise_status(rc, "wait", std::to_string(after));
    return c;
  }

  // Zero-copy: locates the published frame (the first one newer than after
  // when wait_new) without copying; the caller views the slot.
  std::tuple<uint32_t, uint64_t, uint64_t, uint64_t, uint64_t> view(uint64_t after, bool wait_new,
                                                                    int64_t timeout_ns,
                                                                    int64_t spin_ns,
                                                                    bool holds_lock) {
    ss_pubinfo info{};
    ss_frame frame{};
    int rc = wait_new ? chunked_spinning(timeout_ns, spin_ns,
                                         [&](int64_t chunk, int64_t spin) {
                                           return ss_read_new_view(seg, after, chunk, spin, &info,
                                                                   &frame);
                                         })
                      : chunked(timeout_ns, [&](int64_t chunk) {
                          return ss_view_begin(seg, chunk, holds_lock, &info, &frame);
                        });
    if (rc) raise_status(rc, wait_new ? "read_new" : "read");
    return {frame.slot, frame.slot_seq, info.count, info.frame_id, info.write_time_ns};
  }

  // ---- history (docs/history.md): every publication newer than `after` ----

  // A new uint8 array of n frames (n x payload_bytes).
  nb::object empty_frames(size_t n) {
    return nb::module_::import_("numpy").attr("empty")(nb::make_tuple(n, payload_bytes()), "uint8");
  }

  // Bytes of `frames` (a C-contiguous writable buffer), checked to hold n frames.
  void check_room(const Buffer &b, size_t n) {
    if ((size_t)b.view.len < n * payload_bytes())
      raise_error(g_value, "out holds " + std::to_string(b.view.len) + " bytes, not the " +
                               std::to_string(n) + " frame(s) of '" + name() + "' it must take");
  }

  // (count, frame_id, write_time_ns) of each kept frame, as a (n, 3) uint64 array.
  static nb::object meta_array(const std::vector<ss_history_frame> &f, uint32_t n, bool located) {
    size_t cols = located ? 5 : 3;
    nb::object a = nb::module_::import_("numpy").attr("empty")(nb::make_tuple(n, cols), "uint64");
    Buffer b(a, true);
    auto *out = (uint64_t *)b.view.buf;
    for (uint32_t i = 0; i < n; i++, out += cols) {
      out[0] = f[i].count;
      out[1] = f[i].frame_id;
      out[2] = f[i].write_time_ns;
      if (located) {
        out[3] = f[i].at.slot;
        out[4] = f[i].at.slot_seq;
      }
    }
    return a;
  }

  // Copies of the publications newer than `after` the stream still holds,
  // oldest first (the newest complete one without history): (frames, meta,
  // last). frames: `out` or a new uint8 (n, payload_bytes) array; last: the
  // caller's next `after`.
  std::tuple<nb::object, nb::object, uint64_t> read_since(uint64_t after, uint32_t max_frames,
                                                          int64_t timeout_ns, int64_t spin_ns,
                                                          nb::handle out) {
    uint32_t depth = ss_history_depth(seg);
    std::vector<ss_history_frame> f(depth + 1);
    uint32_t n = 0;
    uint64_t last = after;
    nb::object frames;
    if (depth == 0) {
      frames = out.is_none() ? empty_frames(1) : nb::borrow(out);
      Buffer b(frames, true);
      check_room(b, 1);
      ss_pubinfo info{};
      int rc = chunked_spinning(timeout_ns, spin_ns, [&](int64_t chunk, int64_t spin) {
        return ss_read_new_complete(seg, b.view.buf, payload_bytes(), after, chunk, spin, &info);
      });
      if (rc) raise_status(rc, "read_new");
      f[0] = ss_history_frame{{0, 0}, info.count, info.frame_id, info.write_time_ns};
      n = 1;
      last = info.count;
    } else {
      // Locate, copy and the retries are one core call (ss_history_read);
      // the room for the frames is allocated here, under the GIL, when the
      // core knows how many it located.
      HistoryDst dst{this, out, {}, {}};
      int rc = chunked_spinning(timeout_ns, spin_ns, [&](int64_t chunk, int64_t spin) {
        return ss_history_read(seg, after, max_frames, chunk, spin, f.data(), &HistoryDst::room,
                               &dst, &n, &last);
      });
      if (dst.error) throw std::move(*dst.error);  // raised while making the room
      if (rc) raise_status(rc, "read_new");
      frames = dst.frames.is_valid() ? dst.frames : empty_frames(0);
    }
    return {frames, meta_array(f, n, false), last};
  }

  // The room ss_history_read asks for: `out`, or a new array of n frames,
  // made with the GIL (the core calls this from a wait that released it).
  struct HistoryDst {
    Segment *s;
    nb::handle out;
    nb::object frames;
    std::optional<nb::python_error> error;
    static void *room(void *ctx, uint32_t n) {
      auto *d = static_cast<HistoryDst *>(ctx);
      nb::gil_scoped_acquire gil;
      try {
        d->frames = d->out.is_none() ? d->s->empty_frames(n) : nb::borrow(d->out);
        Buffer b(d->frames, true);
        d->s->check_room(b, n);
        // The array keeps its memory while frames holds it. Zero frames copy
        // nothing, but NULL would read as a failed allocation.
        return b.view.buf ? b.view.buf : static_cast<void *>(d);
      } catch (nb::python_error &e) {
        d->error.emplace(std::move(e));
        return nullptr;
      }
    }
  };

  // The zero-copy form: the publications located, not copied: (meta, last),
  // meta (n, 5): count, frame_id, write_time_ns, slot, slot_seq.
  std::tuple<nb::object, uint64_t> locate(uint64_t after, uint32_t max_frames, int64_t timeout_ns,
                                          int64_t spin_ns) {
    std::vector<ss_history_frame> f(ss_history_depth(seg) + 1);
    uint32_t n = 0;
    uint64_t last = after;
    int rc = chunked_spinning(timeout_ns, spin_ns, [&](int64_t chunk, int64_t spin) {
      return ss_history_locate(seg, after, max_frames, chunk, spin, f.data(), &n, &last);
    });
    if (rc) raise_status(rc, "read_new");
    return {meta_array(f, n, true), last};
  }

  std::tuple<uint64_t, uint64_t, uint64_t> read_new(nb::handle dst, uint64_t after,
                                                    int64_t timeout_ns, int64_t spin_ns) {
    Buffer b(dst, true);
    check_len(b, "destination");
    ss_pubinfo info = read_new_bytes(b.view.buf, after, timeout_ns, spin_ns);
    return {info.count, info.frame_id, info.write_time_ns};
  }

  ss_pubinfo read_new_bytes(void *dst, uint64_t after, int64_t timeout_ns, int64_t spin_ns) {
    ss_pubinfo info{};
    int rc = chunked_spinning(timeout_ns, spin_ns, [&](int64_t chunk, int64_t spin) {
      return ss_read_new(seg, dst, payload_bytes(), after, chunk, spin, &info);
    });
    if (rc) raise_status(rc, "read_new");
    return info;
  }
};

Segment *make_segment() { return new Segment(); }

// create, open or peek failed: the error names what was asked for.
void check_open_rc(Segment *s, int rc, const std::string &name, int kind, const char *op) {
  if (rc == SS_OK) return;
  std::string detail = rc == SS_ENAME ? name_rule() : ssb::open_detail(rc, s->seg);
  delete s;
  ssb::raise_status(rc, {kind_text(kind), name, op, "", detail});
}

// Bytes from shared memory or a directory listing as a str, the way Python
// decodes file names: invalid UTF-8 becomes lone surrogates
// (surrogateescape), so a planted name never fails a listing.
nb::str text_of(const std::string &bytes) {
  PyObject *o = PyUnicode_DecodeUTF8(bytes.data(), (Py_ssize_t)bytes.size(), "surrogateescape");
  if (!o) throw nb::python_error();
  return nb::steal<nb::str>(o);
}

// peek by segment name; errors name it with anything outside printable
// ASCII as '?' (a file name in /dev/shm can hold any bytes).
Segment *peek_segment(const std::string segname) {
  std::string shown = segname;
  for (char &c : shown)
    if ((unsigned char)c < 0x20 || (unsigned char)c > 0x7e) c = '?';
  Segment *s = make_segment();
  int rc = segname.find('\0') == std::string::npos ? ss_segment_peek(s->seg, segname.c_str())
                                                   : (int)SS_ENAME;
  check_open_rc(s, rc, shown, 0, "peek");
  return s;
}

}  // namespace
