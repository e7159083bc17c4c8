// The FileMapping class behind shmstream._native.FileMapping: a plain file
// (a DataLoader pool's slot, a recording's frames.npy) mapped through the core, so that a SIGBUS after
// another process truncated it becomes zero pages and a `lost` mark instead
// of the death of the process (src/core/guard.c). The binding converts,
// releases the GIL around the mmap (populate maps every page) and raises.
// Included once, by _native.cpp.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <cstddef>
#include <cstdint>
#include <string>
#include "_binding.h"
#include "shmstream.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

class FileMapping {
 public:
  FileMapping(int fd, size_t bytes, bool populate) {
    int rc;
    {
      nb::gil_scoped_release nogil;
      rc = ss_file_map_open(fd, bytes, populate ? 1 : 0, &m_);
    }
    if (rc != SS_OK) ssb::raise_os(rc, "mapping " + std::to_string(bytes) + " bytes of a file");
  }
  FileMapping(const FileMapping &) = delete;
  FileMapping &operator=(const FileMapping &) = delete;
  ~FileMapping() { ss_file_map_close(m_); }

  // The mapping's bytes, writable when the file was opened for writing
  // (read-only otherwise: a write would fault); the view keeps this object
  // (and so the mapping) alive.
  nb::object buffer() {
    size_t shape[1] = {ss_file_map_bytes(m_)};
    auto *data = static_cast<uint8_t *>(ss_file_map_base(m_));
    if (!ss_file_map_writable(m_))
      return nb::cast(nb::ndarray<nb::ro, uint8_t, nb::memview>(
          data, 1, shape, nb::find(this), nullptr, nb::dtype<uint8_t>(), nb::device::cpu::value));
    return nb::cast(nb::ndarray<uint8_t, nb::memview>(
        data, 1, shape, nb::find(this), nullptr, nb::dtype<uint8_t>(), nb::device::cpu::value));
  }
  bool writable() const { return ss_file_map_writable(m_) != 0; }
  bool lost() const { return ss_file_map_lost(m_) != 0; }
  size_t size() const { return ss_file_map_bytes(m_); }

 private:
  ss_file_map *m_ = nullptr;
};

void bind_file_mapping(nb::module_ &m) {
  nb::class_<FileMapping>(m, "FileMapping")
      .def(nb::init<int, size_t, bool>(), "fd"_a, "size"_a, "populate"_a = false,
           "Map size bytes of the open file fd, shared (writable if fd was opened for "
           "writing, read-only otherwise), under the bus-error guard; populate maps every "
           "page now.")
      .def("buffer", &FileMapping::buffer,
           "The mapped bytes as a memoryview (read-only if the mapping is) that keeps the "
           "mapping alive.")
      .def_prop_ro("writable", &FileMapping::writable,
                   "True if the file was opened for writing, so the mapping is writable.")
      .def_prop_ro("lost", &FileMapping::lost,
                   "True once a bus error was caught in the mapping (the file shrank under "
                   "it): its pages from there on are private zeros.")
      .def_prop_ro("size", &FileMapping::size, "The mapped bytes.");
}

} // namespace
