// Thin binding over milk/CACAO ImageStreamIO streams (src/core/milk.c):
// converts arguments, releases the GIL around every call that touches the
// file, waits in 100 ms slices (Ctrl-C) and raises. The API, the directory
// milk uses and the dtype map live in shmstream/milk/.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "_binding.h"
#include "shmstream_milk.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

using namespace ssb;

// The file's version field for a message: printable ASCII as is, any
// other byte as \xNN (it is another process's bytes).
std::string shown(const char *p, size_t n) {
  std::string out;
  for (size_t i = 0; i < n && p[i]; i++) {
    unsigned char c = (unsigned char)p[i];
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += (char)c;
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

// A fixed-size text field of the file (another process's bytes): up to its
// NUL, decoded as UTF-8 with U+FFFD for what is not (milk writes ASCII).
nb::str text(const char *p, size_t n) {
  PyObject *s = PyUnicode_DecodeUTF8(p, (Py_ssize_t)strnlen(p, n), "replace");
  if (!s) throw nb::python_error();
  return nb::steal<nb::str>(s);
}

// One sentence per status; Python's open() adds the path where it helps.
[[noreturn]] void raise_milk(int rc, const std::string &what, const ss_milk_layout *l = nullptr) {
  switch (rc) {
    case SS_EVERSION:
      raise_error(g_version, what + ": milk stream of version '" +
                                 (l ? shown(l->version, sizeof l->version) : "?") +
                                 "'; shmstream reads version '" SS_MILK_VERSION
                                 "' (ImageStreamIO 2.x): recreate the stream with a current milk");
    case SS_ECORRUPT:
      raise_error(g_corrupt,
                  what +
                      ": the metadata block is not a valid milk stream (a size, axis count "
                      "or datatype milk refuses, or stored sizes that disagree), or the "
                      "file shrank under the mapping; recreate the stream");
    case EMSGSIZE:
      raise_error(g_corrupt,
                  what +
                      ": the file's size is not the size its metadata describes (truncated, "
                      "or written by another build of milk); recreate the stream");
    case SS_EKIND:
      raise_error(g_value,
                  what +
                      ": the stream's pixels live in GPU memory (location >= 0); shmstream "
                      "reads CPU-located milk streams only");
    case SS_EINCONSISTENT:
      raise_error(g_inconsistent,
                  what +
                      ": the write flag stayed set for the whole read budget: a writer "
                      "is in the middle of a frame or died there; read again, or "
                      "restart the writer");
    case SS_EBUSY:
      raise_os_sentence(EBUSY, what +
                                   ": every semaphore of the stream is claimed by a live "
                                   "reader; create the stream with more semaphores (nsem=) or "
                                   "close a reader");
    case SS_ECANCELLED:
      raise_error(g_cancelled, what + ": the handle was closed by another thread while waiting");
    case SS_ETIMEDOUT: raise_error(g_timeout, what + ": no new frame before the timeout");
    case SS_ENAME: raise_error(g_value, what + ": a milk name is 1 to 79 bytes");
    case EINVAL:
      raise_error(g_value, what +
                               ": invalid shape or datatype for a milk stream (1 to 3 axes of at "
                               "least 1, datatype codes 1 to 13)");
    case EOVERFLOW: raise_error(g_value, what + ": the stream would be too big");
    case ERANGE: raise_error(g_index, what + ": keyword index out of range");
    default:
      if (rc > 0) raise_os(rc, what);
      raise_error(g_error, what + " failed: status " + std::to_string(rc));
  }
}

nb::dict layout_dict(const ss_milk_layout &l) {
  nb::dict d;
  d["version"] = text(l.version, sizeof l.version);
  d["name"] = text(l.name, sizeof l.name);
  d["naxis"] = (int)l.naxis;
  d["size"] = nb::make_tuple(l.size[0], l.size[1], l.size[2]);
  d["datatype"] = (int)l.datatype;
  d["location"] = (int)l.location;
  d["nsem"] = (int)l.nsem;
  d["nkw"] = (int)l.nkw;
  d["nproctrace"] = (int)l.nproctrace;
  d["cbsize"] = l.cbsize;
  d["imagetype"] = l.imagetype;
  d["itemsize"] = l.itemsize;
  d["nelement"] = l.nelement;
  d["frame_bytes"] = l.frame_bytes;
  d["total_bytes"] = l.total_bytes;
  nb::dict off;
  off["data"] = l.off_data;
  off["keywords"] = l.off_kw;
  off["semaphores"] = l.off_sem;
  off["semlog"] = l.off_semlog;
  off["semReadPID"] = l.off_readpid;
  off["semWritePID"] = l.off_writepid;
  off["semctrl"] = l.off_semctrl;
  off["semstatus"] = l.off_semstatus;
  off["streamproctrace"] = l.off_trace;
  off["atimearray"] = l.off_atimes;
  off["writetimearray"] = l.off_wtimes;
  off["cntarray"] = l.off_cnts;
  off["CircBuff_md"] = l.off_cbmd;
  off["CBimdata"] = l.off_cbdata;
  d["offsets"] = off;
  return d;
}

nb::tuple info_tuple(const ss_milk_pubinfo &i) {
  return nb::make_tuple(i.cnt0, i.cnt1, i.writetime_ns, i.atime_ns);
}

class Stream {
 public:
  Stream(ss_milk *m, const ss_milk_layout &l, std::string path)
      : m_(m), l_(l), path_(std::move(path)) {}
  ~Stream() { ss_milk_close(m_); }
  Stream(const Stream &) = delete;
  Stream &operator=(const Stream &) = delete;

  static Stream *open(const std::string &path) {
    ss_milk *m = nullptr;
    ss_milk_layout l{};
    int rc;
    {
      nb::gil_scoped_release nogil;
      rc = ss_milk_open(path.c_str(), &m, &l);
    }
    if (rc) raise_milk(rc, "open milk stream '" + path + "'", &l);
    return new Stream(m, l, path);
  }

  static Stream *create(const std::string &path, const std::string &name,
                        const std::vector<uint32_t> &size, int datatype, int nsem, int nkw,
                        uint32_t cbsize, unsigned mode) {
    ss_milk_layout l{};
    if (size.empty() || size.size() > 3 || datatype < 0 || datatype > 255 || nsem < 0 ||
        nsem > 65535 || nkw < 0 || nkw > 65535)
      raise_milk(EINVAL, "create milk stream '" + path + "'");
    l.naxis = (uint8_t)size.size();
    for (size_t i = 0; i < size.size(); i++) l.size[i] = size[i];
    l.datatype = (uint8_t)datatype;
    l.nsem = (uint16_t)nsem;
    l.nkw = (uint16_t)nkw;
    l.cbsize = cbsize;
    l.imagetype = SS_MILK_MATH_DATA;
    ss_milk *m = nullptr;
    int rc;
    {
      nb::gil_scoped_release nogil;
      rc = ss_milk_create(path.c_str(), name.c_str(), mode, &l, &m);
    }
    if (rc) raise_milk(rc, "create milk stream '" + path + "'");
    return new Stream(m, l, path);
  }

  ss_milk *live(const char *op) {
    if (!m_ || closing_.load(std::memory_order_relaxed))
      raise_error(g_handle_closed, std::string(op) + ": the milk stream handle '" + path_ +
                                       "' is closed; open it again");
    return m_;
  }

  // A call that releases the GIL holds a Use: close() from another thread
  // meanwhile only marks the handle (a wait sees it within 100 ms and
  // raises WaitCancelledError), and the last Use unmaps. Users are counted
  // under the GIL.
  struct Use {
    Stream *s;
    explicit Use(Stream *st) : s(st) { s->users_++; }
    ~Use() {
      if (--s->users_ == 0 && s->closing_.load(std::memory_order_relaxed)) s->finish_close();
    }
    Use(const Use &) = delete;
    Use &operator=(const Use &) = delete;
  };

  void finish_close() {
    ss_milk *m = m_;
    m_ = nullptr;
    ss_milk_close(m);  // munmap and one CAS: quick, no GIL release needed
  }

  void close() {
    if (!m_) return;
    closing_.store(true, std::memory_order_relaxed);
    if (users_ == 0) finish_close();
  }
  bool closed() const { return m_ == nullptr || closing_.load(std::memory_order_relaxed); }
  nb::dict layout() const { return layout_dict(l_); }

  nb::tuple read_into(nb::handle out, double budget_s) {
    ss_milk *m = live("read");
    Use use(this);
    Buffer b(out, true);
    ss_milk_pubinfo info{};
    int rc;
    {
      nb::gil_scoped_release nogil;
      rc = ss_milk_read(m, b.view.buf, (size_t)b.view.len, (int64_t)(budget_s * 1e9), &info);
    }
    if (rc) raise_milk(rc, "read milk stream '" + path_ + "'");
    return info_tuple(info);
  }

  // Wait for a frame newer than `last` (read_new_view: the view follows).
  void wait_newer(uint64_t last, nb::handle timeout, int64_t spin_ns) {
    ss_milk *m = live("read_new_view");
    Use use(this);
    int rc = chunked_spinning(to_ns(timeout), spin_ns, [&](int64_t chunk, int64_t spin) {
      if (closing_.load(std::memory_order_relaxed)) return (int)SS_ECANCELLED;
      return ss_milk_wait_newer(m, last, chunk, spin);
    });
    if (rc) raise_milk(rc, "read_new_view from milk stream '" + path_ + "'");
  }

  // read_new's hot path: the wait (spin, then the semaphore) and the checked
  // copy in one GIL release (ss_milk_read_new); cnt0 of the frame read. The
  // caller checked `out`; budget_ns: the busy timeout.
  uint64_t read_new_into(nb::handle out, uint64_t last, nb::handle timeout, int64_t budget_ns,
                         int64_t spin_ns) {
    return read_new(out, last, timeout, budget_ns, spin_ns).cnt0;
  }

  // The same with (cnt0, cnt1, writetime_ns, atime_ns), for a Publication.
  nb::tuple read_new_info(nb::handle out, uint64_t last, nb::handle timeout, int64_t budget_ns,
                          int64_t spin_ns) {
    return info_tuple(read_new(out, last, timeout, budget_ns, spin_ns));
  }

  nb::dict spin_policy() {
    ss_wait_policy_info w;
    ss_milk_spin_policy(live("spin_policy"), &w);
    return wait_policy_dict(w);
  }

  // The circular buffer's frames after `after` (at most max) into out
  // (max frames) and counts (max uint64): (how many, cnt0 at the copy).
  nb::tuple read_since_into(nb::handle out, nb::handle counts, uint64_t after, double budget_s) {
    ss_milk *m = live("read_since");
    Use use(this);
    Buffer b(out, true), c(counts, true);
    uint64_t fb = l_.frame_bytes ? l_.frame_bytes : 1;
    uint32_t max = (uint32_t)std::min<uint64_t>((uint64_t)b.view.len / fb,
                                                (uint64_t)c.view.len / sizeof(uint64_t));
    uint32_t n = 0;
    uint64_t last = 0;
    int rc;
    {
      nb::gil_scoped_release nogil;
      rc = ss_milk_read_since(m, after, max, b.view.buf, (uint64_t *)c.view.buf, &n, &last,
                              (int64_t)(budget_s * 1e9));
    }
    if (rc == EINVAL)
      raise_error(g_value, "read_since on milk stream '" + path_ +
                               "': it keeps no circular buffer of 2 frames or more; create it with "
                               "cb_size >= 2");
    if (rc) raise_milk(rc, "read_since from milk stream '" + path_ + "'");
    return nb::make_tuple(n, last);
  }

  void write(nb::handle src, int64_t atime_ns) {
    ss_milk *m = live("write");
    Use use(this);
    Buffer b(src);
    int rc;
    {
      nb::gil_scoped_release nogil;
      rc = ss_milk_write(m, b.view.buf, (size_t)b.view.len, atime_ns);
    }
    if (rc) raise_milk(rc, "write milk stream '" + path_ + "'");
  }

  // read_view: the metadata of a frame whose pixels can be looked at in
  // place, then view_valid(cnt0) after the look (docs/milk.md).
  nb::tuple view_begin(double budget_s) {
    ss_milk *m = live("read_view");
    Use use(this);
    ss_milk_pubinfo info{};
    int rc;
    {
      nb::gil_scoped_release nogil;
      rc = ss_milk_view_begin(m, (int64_t)(budget_s * 1e9), &info);
    }
    if (rc) raise_milk(rc, "read_view of milk stream '" + path_ + "'");
    return info_tuple(info);
  }
  nb::tuple identity() {
    uint64_t ino = 0;
    int64_t created = 0;
    int32_t creator = 0;
    ss_milk_identity(live("identity"), &ino, &created, &creator);
    return nb::make_tuple(ino, created, creator);
  }
  // m_ stays mapped while a view of the pixels exists (they count as users).
  bool view_valid(uint64_t cnt0) { return m_ && ss_milk_view_valid(m_, cnt0) != 0; }

  // A read-only byte view of the pixels. It counts as a user of the
  // mapping (close() leaves the unmap to the last one) and keeps this
  // object alive, so the memory stays mapped while the view exists.
  nb::ndarray<nb::numpy, const uint8_t, nb::ndim<1>> pixels() {
    ss_milk *m = live("read_view");
    nb::handle self = nb::find(this);
    self.inc_ref();
    users_++;
    nb::capsule owner(this, [](void *p) noexcept {
      Stream *s = static_cast<Stream *>(p);
      if (--s->users_ == 0 && s->closing_.load(std::memory_order_relaxed)) s->finish_close();
      nb::find(s).dec_ref();
    });
    size_t shape[1] = {(size_t)l_.frame_bytes};
    return nb::ndarray<nb::numpy, const uint8_t, nb::ndim<1>>(ss_milk_data(m), 1, shape, owner);
  }

  uint64_t count() { return ss_milk_count(live("count")); }
  bool writing() { return ss_milk_writing(live("writing")) != 0; }

  int claim(int preferred) {
    int rc = ss_milk_claim(live("claim"), preferred);
    if (rc < 0) raise_milk(rc, "claim a semaphore of milk stream '" + path_ + "'");
    return rc;
  }
  int claimed() { return ss_milk_claimed(live("claimed")); }
  void release() { ss_milk_release(live("release")); }

  nb::tuple keyword(uint32_t i) {
    ss_milk_kw k{};
    int rc = ss_milk_kw_get(live("keyword"), i, &k);
    if (rc) raise_milk(rc, "read keyword of milk stream '" + path_ + "'");
    std::string type(1, k.type ? k.type : 'N');
    nb::object value;
    if (k.type == 'L')
      value = nb::int_(k.value.numl);
    else if (k.type == 'D')
      value = nb::float_(k.value.numf);
    else if (k.type == 'S')
      value = text(k.value.valstr, 16);
    else
      value = nb::none();
    return nb::make_tuple(text(k.name, 16), type, value, text(k.comment, 80), k.cnt);
  }

  void set_keyword(uint32_t i, const std::string &name, const std::string &type, nb::handle value,
                   const std::string &comment) {
    ss_milk_kw k{};
    std::memcpy(k.name, name.data(), std::min<size_t>(name.size(), 15));
    k.type = type.empty() ? 'N' : type[0];
    if (k.type == 'L')
      k.value.numl = nb::cast<int64_t>(value);
    else if (k.type == 'D')
      k.value.numf = nb::cast<double>(value);
    else if (k.type == 'S') {
      std::string s = nb::cast<std::string>(value);
      std::memcpy(k.value.valstr, s.data(), std::min<size_t>(s.size(), 15));
    }
    std::memcpy(k.comment, comment.data(), std::min<size_t>(comment.size(), 79));
    int rc = ss_milk_kw_set(live("set_keyword"), i, &k);
    if (rc) raise_milk(rc, "write keyword of milk stream '" + path_ + "'");
  }

 private:
  ss_milk_pubinfo read_new(nb::handle out, uint64_t last, nb::handle timeout, int64_t budget_ns,
                           int64_t spin_ns) {
    ss_milk *m = live("read_new");
    Use use(this);
    Buffer b(out, true);
    ss_milk_pubinfo info{};
    int rc = chunked_spinning(to_ns(timeout), spin_ns, [&](int64_t chunk, int64_t spin) {
      if (closing_.load(std::memory_order_relaxed)) return (int)SS_ECANCELLED;
      return ss_milk_read_new(m, last, chunk, spin, b.view.buf, (size_t)b.view.len, budget_ns,
                              &info);
    });
    if (rc) raise_milk(rc, "read_new from milk stream '" + path_ + "'");
    return info;
  }

  ss_milk *m_;
  int users_ = 0;
  std::atomic<bool> closing_{false};
  ss_milk_layout l_;
  std::string path_;
};

// The metadata parser on bytes (tests, the fuzz harness): the layout dict,
// or the exception open() would raise.
nb::dict parse_metadata(nb::bytes md, uint64_t file_bytes) {
  ss_milk_layout l{};
  int rc = ss_milk_layout_parse(md.c_str(), md.size(), file_bytes, &l);
  if (rc) raise_milk(rc, "parse milk metadata", &l);
  return layout_dict(l);
}

// What list and stat show of a milk file, read without mapping it: the
// layout dict with the live words of its metadata block added.
nb::dict peek(const std::string &path) {
  ss_milk_layout l{};
  ss_milk_peek_info info{};
  std::vector<int32_t> pids(65535);
  int rc;
  {
    nb::gil_scoped_release nogil;
    rc = ss_milk_peek(path.c_str(), &l, &info, pids.data(), (uint32_t)pids.size());
  }
  if (rc) raise_milk(rc, "read milk stream '" + path + "'", &l);
  nb::dict d = layout_dict(l);
  d["cnt0"] = info.cnt0;
  d["cnt1"] = info.cnt1;
  d["write"] = (bool)info.write;
  d["CBindex"] = info.cbindex;
  d["CBcycle"] = info.cbcycle;
  d["inode"] = info.inode;
  d["creationtime_ns"] = info.creation_ns;
  d["writetime_ns"] = info.write_ns;
  d["atime_ns"] = info.atime_ns;
  d["creatorPID"] = info.creator_pid;
  d["ownerPID"] = info.owner_pid;
  d["file_bytes"] = info.file_bytes;
  d["file_mode"] = info.file_mode;
  d["file_uid"] = info.file_uid;
  nb::list readers;
  for (uint32_t i = 0; i < info.npids; i++) readers.append(pids[i]);
  d["semReadPID"] = readers;
  return d;
}

// The compiled mirror of IMAGE_METADATA: {field: (offset, size)}.
nb::dict md_fields() {
  nb::dict d;
#define F(f) d[#f] = nb::make_tuple(offsetof(ss_milk_md, f), sizeof(((ss_milk_md *)0)->f))
  F(version);
  F(name);
  F(naxis);
  F(size);
  F(nelement);
  F(datatype);
  F(imagetype);
  F(creationtime);
  F(lastaccesstime);
  F(atime);
  F(writetime);
  F(creatorPID);
  F(ownerPID);
  F(shared);
  F(inode);
  F(location);
  F(status);
  F(flag);
  F(logflag);
  F(sem);
  F(NBproctrace);
  F(cnt0);
  F(cnt1);
  F(cnt2);
  F(write);
  F(NBkw);
  F(CBsize);
  F(CBindex);
  F(CBcycle);
  F(imdatamemsize);
  F(cudaMemHandle);
#undef F
  return d;
}

}  // namespace

NB_MODULE(_milk, m) {
  load_error_types();
  m.attr("VERSION") = SS_MILK_VERSION;
  m.attr("METADATA_BYTES") = SS_MILK_MD_BYTES;
  m.attr("KEYWORD_BYTES") = SS_MILK_KW_BYTES;
  m.attr("SEMAPHORE_BYTES") = SS_MILK_SEM_BYTES;
  m.attr("MAX_NAME_BYTES") = SS_MILK_MAX_NAME;
  m.def(
      "itemsize", [](int dt) { return dt < 0 || dt > 255 ? 0u : ss_milk_itemsize((uint8_t)dt); },
      "datatype"_a, "Bytes per element of a milk datatype code, 0 if unknown.");
  m.def("parse_metadata", &parse_metadata, "metadata"_a, "file_bytes"_a,
        "Parse a 384-byte metadata block of a file of file_bytes: the layout as a dict.");
  m.def("peek", &peek, "path"_a,
        "The layout and live metadata words of the milk file at path, read without mapping it.");
  m.def("metadata_fields", &md_fields, "{field: (offset, size)} of IMAGE_METADATA as compiled.");
  nb::class_<Stream>(m, "Stream")
      .def_static("open", &Stream::open, "path"_a, nb::rv_policy::take_ownership)
      .def_static("create", &Stream::create, "path"_a, "name"_a, "size"_a, "datatype"_a, "nsem"_a,
                  "nkw"_a, "cbsize"_a, "mode"_a, nb::rv_policy::take_ownership)
      .def("close", &Stream::close)
      .def_prop_ro("closed", &Stream::closed)
      .def("layout", &Stream::layout)
      .def("read_into", &Stream::read_into, "out"_a, "budget_s"_a)
      .def("read_new_into", &Stream::read_new_into, "out"_a, "last"_a, "timeout"_a.none(),
           "budget_ns"_a, "spin_ns"_a)
      .def("read_new_info", &Stream::read_new_info, "out"_a, "last"_a, "timeout"_a.none(),
           "budget_ns"_a, "spin_ns"_a)
      .def("spin_policy", &Stream::spin_policy)
      .def("read_since_into", &Stream::read_since_into, "out"_a, "counts"_a, "after"_a,
           "budget_s"_a)
      .def("write", &Stream::write, "src"_a, "atime_ns"_a)
      .def("view_begin", &Stream::view_begin, "budget_s"_a)
      .def("view_valid", &Stream::view_valid, "cnt0"_a)
      .def("pixels", &Stream::pixels)
      .def("wait_newer", &Stream::wait_newer, "last"_a, "timeout"_a.none(), "spin_ns"_a)
      .def("identity", &Stream::identity)
      .def("count", &Stream::count)
      .def("writing", &Stream::writing)
      .def("claim", &Stream::claim, "preferred"_a)
      .def("claimed", &Stream::claimed)
      .def("release", &Stream::release)
      .def("keyword", &Stream::keyword, "index"_a)
      .def("set_keyword", &Stream::set_keyword, "index"_a, "name"_a, "type"_a, "value"_a.none(),
           "comment"_a);
}
