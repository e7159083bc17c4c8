// DLPack capsules made directly (no intermediate ndarray): the structs of
// dlpack.h v1.0 (an ABI: dmlc/dlpack, include/dlpack/dlpack.h) and one
// builder. A zero-copy channel message's __dlpack__ hands torch.from_dlpack
// a capsule whose deleter drops a reference to an owner object (the
// message's ring pin), so the ring bytes stay pinned until every consumer
// has released them, as with nanobind's views. Header-only, like _binding.h.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>

#include "_binding.h"

namespace ssb {

namespace nb = nanobind;

struct DLDevice {
  int32_t device_type;  // kDLCPU = 1
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void *data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;
  int64_t *strides;
  uint64_t byte_offset;
};
struct DLManagedTensor {  // the "dltensor" capsule
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(DLManagedTensor *self);
};
struct DLPackVersion {
  uint32_t major;
  uint32_t minor;
};
struct DLManagedTensorVersioned {  // the "dltensor_versioned" capsule (DLPack >= 1.0)
  DLPackVersion version;
  void *manager_ctx;
  void (*deleter)(DLManagedTensorVersioned *self);
  uint64_t flags;
  DLTensor dl_tensor;
};
constexpr uint64_t kDLFlagReadOnly = 1;  // DLPACK_FLAG_BITMASK_READ_ONLY

// The deleter: drop the owner (with the GIL: a consumer may free its tensor
// from any thread) and the block.
template <class MT>
void dl_delete(MT *mt) {
  PyGILState_STATE s = PyGILState_Ensure();
  Py_XDECREF((PyObject *)mt->manager_ctx);
  PyGILState_Release(s);
  std::free(mt);
}

// A capsule that nobody consumed (its name unchanged) deletes its tensor.
template <class MT>
void dl_capsule_destructor(PyObject *cap) {
  const char *name = std::is_same_v<MT, DLManagedTensor> ? "dltensor" : "dltensor_versioned";
  if (!PyCapsule_IsValid(cap, name)) return;  // consumed: renamed "used_..."
  auto *mt = (MT *)PyCapsule_GetPointer(cap, name);
  if (mt) mt->deleter(mt);
}

// A capsule of a C-contiguous CPU tensor viewing data (owned by `owner`,
// which the capsule and then the consumer's tensor keep alive).
template <class MT>
nb::object dl_capsule(void *data, int32_t ndim, const size_t *shape, uint8_t code, uint8_t bits,
                      nb::handle owner, bool readonly) {
  // One allocation: the managed tensor, then shape[ndim] and strides[ndim].
  static_assert(sizeof(MT) % alignof(int64_t) == 0);
  auto *mt = (MT *)std::malloc(sizeof(MT) + 2 * sizeof(int64_t) * (size_t)ndim);
  if (!mt) throw std::bad_alloc();
  std::memset(mt, 0, sizeof(MT));
  int64_t *dims = (int64_t *)(mt + 1), *strides = dims + ndim;
  int64_t step = 1;
  for (int32_t i = ndim - 1; i >= 0; i--) {
    dims[i] = (int64_t)shape[i];
    strides[i] = step;
    step *= dims[i] ? dims[i] : 1;
  }
  DLTensor &t = mt->dl_tensor;
  t.data = data;
  t.device = {1, 0};
  t.ndim = ndim;
  t.dtype = {code, bits, 1};
  t.shape = dims;
  t.strides = strides;
  mt->manager_ctx = owner.inc_ref().ptr();
  mt->deleter = &dl_delete<MT>;
  const char *name = "dltensor";
  if constexpr (std::is_same_v<MT, DLManagedTensorVersioned>) {
    mt->version = {1, 0};
    mt->flags = readonly ? kDLFlagReadOnly : 0;
    name = "dltensor_versioned";
  }
  PyObject *cap = PyCapsule_New(mt, name, &dl_capsule_destructor<MT>);
  if (!cap) {
    mt->deleter(mt);
    throw nb::python_error();
  }
  return nb::steal(cap);
}

// The keywords of __dlpack__ (array API 2023.12): stream (ignored: CPU),
// max_version (a major >= 1 asks for the versioned capsule), dl_device
// (only our (1, 0)), copy (True cannot be honoured: a view is all we make).
// Returns whether the versioned capsule was asked for.
inline bool dl_check_kwargs(nb::handle max_version, nb::handle dl_device, nb::handle copy) {
  if (copy.ptr() == Py_True) {
    // ShmstreamBufferError: a BufferError, as the array API asks of __dlpack__.
    raise_error(g_buffer,
                "__dlpack__(): copy=True is not supported (a message is a view of ring bytes).");
  }
  if (!dl_device.is_none() && !dl_device.equal(nb::make_tuple(1, 0))) {
    raise_error(
        g_buffer,
        "__dlpack__(): unsupported dl_device (a channel message lives on the CPU, (1, 0)).");
  }
  if (max_version.is_none()) return false;
  if (!PyTuple_Check(max_version.ptr()) || PyTuple_GET_SIZE(max_version.ptr()) != 2) {
    raise_error(g_type, "__dlpack__(): max_version must be None or tuple[int, int]");
  }
  long major = PyLong_AsLong(PyTuple_GET_ITEM(max_version.ptr(), 0));
  if (major == -1 && PyErr_Occurred()) throw nb::python_error();
  return major >= 1;
}

}  // namespace ssb
