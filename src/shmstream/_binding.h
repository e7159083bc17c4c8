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

#include "shmstream.h"

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

// None or math.inf -> -1 (wait for ever); seconds -> nanoseconds. A wait
// longer than ~292 years is for ever too: the core's deadlines saturate.
inline int64_t to_ns(std::optional<double> timeout) {
  if (!timeout || (std::isinf(*timeout) && *timeout > 0)) return -1;
  if (!(*timeout >= 0)) raise(PyExc_ValueError, "timeout must be >= 0, math.inf or None");
  double ns = *timeout * 1e9;
  return ns >= 9.2e18 ? -1 : (int64_t)ns;
}

// Runs fn(chunk_ns) with the GIL released, in chunks of at most 100 ms,
// checking for signals (Ctrl-C) between chunks, until it returns something
// other than SS_ETIMEDOUT or the whole timeout (< 0: none) has passed.
// Every blocking call of every binding waits through this.
template <class F>
int chunked(int64_t timeout_ns, F &&fn) {
  int64_t deadline = ss_deadline_ns(timeout_ns);
  for (;;) {
    int64_t left = deadline == INT64_MAX ? kSignalCheckNs : deadline - ss_monotonic_ns();
    if (left < 0) left = 0;
    int64_t chunk = left < kSignalCheckNs ? left : kSignalCheckNs;
    int rc;
    {
      nb::gil_scoped_release nogil;
      rc = fn(chunk);
    }
    if (rc != SS_ETIMEDOUT) return rc;
    if (PyErr_CheckSignals() != 0) throw nb::python_error();
    if (deadline != INT64_MAX && ss_monotonic_ns() >= deadline) return SS_ETIMEDOUT;
  }
}

// The crash points of the core linked into this module (docs/ABI.md,
// "Crash points"): each module links its own copy of the core, so each
// exposes these. Tests only.
inline void def_fault_injection(nb::module_ &m) {
  m.def("fault_arm", [](const std::string &point, uint32_t nth, bool exit) {
    if (ss_fault_arm(point.c_str(), nth, exit ? SS_FAULT_EXIT : SS_FAULT_SIGKILL) != SS_OK)
      raise(PyExc_ValueError, "unknown crash point '" + point + "'; see fault_points()");
  }, nb::arg("point"), nb::arg("nth") = 1, nb::arg("exit") = false,
     "Die (SIGKILL, or _exit(86) with exit=True) the nth time this process passes the point.");
  m.def("fault_disarm", &ss_fault_disarm);
  m.def("fault_points", []() {
    size_t n = 0;
    const char *const *names = ss_fault_points(&n);
    nb::list out;
    for (size_t i = 0; i < n; i++) out.append(nb::str(names[i]));
    return out;
  });
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
