// The hot path's look at a NumPy array without the buffer protocol:
// PyObject_GetBuffer costs ~100 ns a call on these machines, a few field
// reads cost a few. Only for an object whose type IS numpy.ndarray (not a
// subclass), whose layout is then NumPy's own: the leading members of
// PyArrayObject_fields, unchanged since NumPy 1.0 and part of its ABI
// (every compiled extension reads them through PyArray_DATA, PyArray_NDIM,
// PyArray_DIMS, PyArray_DESCR and PyArray_FLAGS). Anything else (another
// type, a dtype that is not the stream's, a strided array) is "not the
// fast case": the caller takes the checked path, whose errors the user
// sees. Header-only, like _binding.h.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <vector>

namespace ssb {

namespace nb = nanobind;

// NumPy's PyArrayObject_fields, up to flags (numpy/ndarraytypes.h).
struct NpArrayHead {
  PyObject_HEAD char *data;
  int nd;
  Py_ssize_t *dimensions;
  Py_ssize_t *strides;
  PyObject *base;
  PyObject *descr;
  int flags;
};

// NPY_ARRAY_C_CONTIGUOUS and NPY_ARRAY_WRITEABLE.
constexpr int kNpCContiguous = 0x0001;
constexpr int kNpWriteable = 0x0400;

// numpy.ndarray, looked up when a module is imported (load_ndarray_type).
inline PyTypeObject *g_ndarray = nullptr;

inline void load_ndarray_type() {
  nb::object t = nb::module_::import_("numpy").attr("ndarray");
  g_ndarray = (PyTypeObject *)t.release().ptr();  // held for the life of the process
}

// The array a handle reads and writes: its dtype (a numpy.dtype, held) and
// shape, bound once when the handle is made.
struct ArraySpec {
  nb::object dtype;  // None until bound: nothing is the fast case
  std::vector<Py_ssize_t> shape;

  // The data of obj if it is a C-contiguous numpy.ndarray of this dtype and
  // shape (writable when `writable`), else nullptr. May run dtype.__eq__ for
  // a dtype object that is equal but not the same one (as the Python check did).
  char *data_of(nb::handle obj, bool writable) const {
    if (Py_TYPE(obj.ptr()) != g_ndarray || !dtype.is_valid()) return nullptr;
    auto *a = (NpArrayHead *)obj.ptr();
    int need = kNpCContiguous | (writable ? kNpWriteable : 0);
    if ((a->flags & need) != need || a->nd != (int)shape.size()) return nullptr;
    for (int i = 0; i < a->nd; i++)
      if (a->dimensions[i] != shape[i]) return nullptr;
    if (a->descr != dtype.ptr()) {
      int eq = PyObject_RichCompareBool(a->descr, dtype.ptr(), Py_EQ);
      if (eq != 1) {
        if (eq < 0) PyErr_Clear();
        return nullptr;
      }
    }
    return a->data;
  }
};

// A per-call spin_us (microseconds: an int or a float, not a bool) as the
// core's nanoseconds, with streams/_checks.py spin_ns's rounding; false for
// anything spin_ns would refuse or that is not a plain number (the checked
// path then raises or converts it).
inline bool spin_ns_of(nb::handle spin_us, int64_t *ns) {
  PyObject *o = spin_us.ptr();
  double v;
  if (PyFloat_CheckExact(o)) {
    v = PyFloat_AS_DOUBLE(o);
  } else if (PyLong_CheckExact(o)) {
    v = PyLong_AsDouble(o);
    if (v == -1.0 && PyErr_Occurred()) {
      PyErr_Clear();
      return false;
    }
  } else {
    return false;
  }
  if (!(v >= 0)) return false;  // negative or NaN: the checked path says why
  *ns = (int64_t)((v < 1e12 ? v : 1e12) * 1000.0);
  return true;
}

// frame_id given as a plain int in [0, 2**64); false otherwise (the checked
// path raises its error).
inline bool u64_of(nb::handle obj, uint64_t *out) {
  if (!PyLong_CheckExact(obj.ptr())) return false;
  unsigned long long v = PyLong_AsUnsignedLongLong(obj.ptr());
  if (v == (unsigned long long)-1 && PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  *out = (uint64_t)v;
  return true;
}

}  // namespace ssb
