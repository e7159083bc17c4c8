// Helpers shared by the extension modules (src/shmstream/_*.cpp): status
// codes and errno values become Python exceptions, timeouts become
// nanoseconds, buffers are borrowed through the buffer protocol. Header-only:
// each module is its own shared object.
#pragma once

#include <nanobind/nanobind.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

namespace ssb {

namespace nb = nanobind;

// Blocking calls come back to Python this often to honour Ctrl-C.
constexpr int64_t kSignalCheckNs = 100'000'000;

[[noreturn]] inline void raise(PyObject *type, const std::string &msg) {
  PyErr_SetString(type, msg.c_str());
  throw nb::python_error();
}

// OSError(errno, "<what>: <strerror>"): OSError picks the subclass
// (FileExistsError, FileNotFoundError, ...) from errno.
[[noreturn]] inline void raise_os(int err, const std::string &what) {
  PyObject *args = Py_BuildValue("(is)", err, (what + ": " + std::strerror(err)).c_str());
  PyErr_SetObject(PyExc_OSError, args);
  Py_XDECREF(args);
  throw nb::python_error();
}

// OSError(errno, strerror, filename), for errors about a file.
[[noreturn]] inline void raise_os_path(int err, const std::string &path) {
  PyObject *args = Py_BuildValue("(iss)", err, std::strerror(err), path.c_str());
  PyErr_SetObject(PyExc_OSError, args);
  Py_XDECREF(args);
  throw nb::python_error();
}

// None -> -1 (wait forever); seconds -> nanoseconds, saturating.
inline int64_t to_ns(std::optional<double> timeout) {
  if (!timeout) return -1;
  if (!(*timeout >= 0)) raise(PyExc_ValueError, "timeout must be >= 0 or None");
  double ns = *timeout * 1e9;
  return ns > 9.2e18 ? INT64_MAX : (int64_t)ns;
}

// A C-contiguous buffer borrowed from any object with the buffer protocol,
// released when this goes out of scope.
struct Buffer {
  Py_buffer view{};
  explicit Buffer(nb::handle obj, bool writable = false) {
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj.ptr(), &view, flags) != 0) throw nb::python_error();
  }
  ~Buffer() { PyBuffer_Release(&view); }
  Buffer(const Buffer &) = delete;
  Buffer &operator=(const Buffer &) = delete;
};

}  // namespace ssb
