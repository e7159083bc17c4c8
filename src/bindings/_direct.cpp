// Thin binding over the direct reader (src/core/direct.c): converts
// arguments, releases the GIL around every open, read and close, and turns
// status codes into exceptions. Index handling lives in shmstream/arrays/direct.py.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>

#include "_binding.h"
#include "shmstream_direct.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

using namespace ssb;

[[noreturn]] void raise_status(int rc, const std::string &path, uint64_t need = 0) {
  std::string detail;
  if (rc == SS_DIRECT_ESHORT) {
    struct stat st{};
    ::stat(path.c_str(), &st);
    detail = std::to_string(st.st_size) +
             " bytes, fewer than offset + array bytes = " + std::to_string(need);
  }
  ssb::raise_status(rc, {"DirectArray", path, "read", "", detail});
}

class Reader {
 public:
  Reader(std::string path, uint64_t offset, uint64_t nbytes, bool use_page_cache,
         uint64_t cache_bytes)
      : path_(std::move(path)) {
    int rc;
    {
      nb::gil_scoped_release nogil;
      rc = ss_direct_open(&d_, path_.c_str(), offset, nbytes, use_page_cache ? 1 : 0, cache_bytes);
    }
    if (rc) raise_status(rc, path_, offset + nbytes);
    ss_direct_info_get(d_, &info_);
  }
  ~Reader() { ss_direct_free(d_); }
  Reader(const Reader &) = delete;
  Reader &operator=(const Reader &) = delete;

  void close() {
    nb::gil_scoped_release nogil;
    ss_direct_close(d_);
  }
  bool direct() const { return info_.mode == SS_DIRECT_MODE_DIRECT; }
  uint32_t block_bytes() const { return info_.block_bytes; }
  nb::dict stats() {
    ss_direct_stats st{};
    {
      nb::gil_scoped_release nogil;
      ss_direct_stats_get(d_, &st);
    }
    nb::dict out;
    out["direct_bytes"] = st.direct_bytes;
    out["cache_hit_bytes"] = st.cache_hit_bytes;
    out["page_cache_bytes"] = st.page_cache_bytes;
    out["cache_used_bytes"] = st.cache_used_bytes;
    out["cache_limit_bytes"] = st.cache_limit_bytes;
    return out;
  }

  void read_units(nb::handle units, uint64_t unit_bytes, nb::handle out) {
    Buffer idx(units, false), dst(out, true);
    if (idx.view.itemsize != 8 || idx.view.len % 8 != 0) {
      raise_error(g_type, "units must be a contiguous int64 array");
    }
    size_t n = (size_t)idx.view.len / 8;
    int rc;
    {
      nb::gil_scoped_release nogil;
      rc = ss_direct_read_units(d_, unit_bytes, (const int64_t *)idx.view.buf, n, dst.view.buf,
                                (size_t)dst.view.len);
    }
    if (rc) raise_status(rc, path_);
  }

  void read_strided(int64_t first, int64_t step, size_t n, uint64_t unit_bytes, nb::handle out) {
    Buffer dst(out, true);
    int rc;
    {
      nb::gil_scoped_release nogil;
      rc = ss_direct_read_strided(d_, unit_bytes, first, step, n, dst.view.buf,
                                  (size_t)dst.view.len);
    }
    if (rc) raise_status(rc, path_);
  }

 private:
  std::string path_;
  ss_direct *d_ = nullptr;
  ss_direct_info info_{};
};

}  // namespace

NB_MODULE(_direct, m) {
  m.doc() = "Direct-I/O array reader core (use shmstream.DirectArray).";
  load_error_types();  // its errors are shmstream.errors' classes, as every module's
  nb::class_<Reader>(m, "Reader")
      .def(nb::init<std::string, uint64_t, uint64_t, bool, uint64_t>(), "path"_a, "offset"_a,
           "nbytes"_a, "use_page_cache"_a = true,
           "cache_bytes"_a = (uint64_t)SS_DIRECT_DEFAULT_CACHE_BYTES)
      .def("close", &Reader::close)
      .def("stats", &Reader::stats,
           "Counters since open, in bytes of whole blocks: direct_bytes (read with "
           "O_DIRECT), cache_hit_bytes (block cache), page_cache_bytes, cache_used_bytes, "
           "cache_limit_bytes.")
      .def_prop_ro("direct", &Reader::direct)
      .def_prop_ro("block_bytes", &Reader::block_bytes)
      .def("read_units", &Reader::read_units, "units"_a, "unit_bytes"_a, "out"_a)
      .def("read_strided", &Reader::read_strided, "first"_a, "step"_a, "n"_a, "unit_bytes"_a,
           "out"_a);
  m.attr("DEFAULT_CACHE_BYTES") = (uint64_t)SS_DIRECT_DEFAULT_CACHE_BYTES;
  m.def("io_backend", [] { return std::string(ss_direct_io_backend()); });
  m.def(
      "evict",
      [](std::string path) {
        int rc;
        {
          nb::gil_scoped_release nogil;
          rc = ss_file_evict(path.c_str());
        }
        if (rc) raise_os_path(rc, path);
      },
      "path"_a);
  m.def(
      "resident",
      [](std::string path) {
        uint64_t res = 0, total = 0;
        int rc;
        {
          nb::gil_scoped_release nogil;
          rc = ss_file_resident(path.c_str(), &res, &total);
        }
        if (rc) raise_os_path(rc, path);
        return std::make_tuple(res, total);
      },
      "path"_a, "Cached pages and total pages of the file: (resident, total).");
}
