// Thin binding over src/core/cuda_stream.c and cuda_driver.c: GPU stream attachments, device and
// pinned buffers, and DLPack import/export. No protocol logic lives here.
// Importing this module never loads CUDA; the first GPU call does (dlopen).
//
// STATUS: compiled on a machine without a GPU; never run against a device.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "_binding.h"
#include "_dlpack.h"
#include "shmstream.h"
#include "shmstream_cuda.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

using namespace ssb;

[[noreturn]] void raise_rc(int rc, const std::string &name, const ss_segment *seg, const char *op) {
  bool abandoned = seg && ss_segment_mapped(seg) && ss_segment_state(seg) == SS_STATE_ABANDONED;
  ssb::raise_status(rc, {"GPU stream", name, op, abandoned ? "abandoned" : "", ss_cuda_error()});
}

std::string hex(const uint8_t *b, size_t n) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; i++) {
    out += digits[b[i] >> 4];
    out += digits[b[i] & 15];
  }
  return out;
}

// One handle's view of a GPU stream: its own mapping of the segment (the
// header words are shared memory, so they are the same words the _native
// mapping sees) and a reference on the process-wide attachment.
class GpuStream {
 public:
  ss_segment *seg = new_handle();  // the C API's opaque handle
  ss_gpu *gpu = nullptr;
  std::string name;

  GpuStream() = default;
  GpuStream(const GpuStream &) = delete;
  GpuStream &operator=(const GpuStream &) = delete;
  ~GpuStream() {
    close();
    ss_segment_free(seg);
  }

  void close() {
    if (gpu) {
      ss_gpu_detach(gpu);
      gpu = nullptr;
    }
    if (ss_segment_mapped(seg)) ss_segment_close(seg);
  }

  ss_gpu *g(const char *op) {
    if (!gpu)
      raise_error(g_handle_closed, std::string("cannot ") + op + " a closed GPU stream handle");
    return gpu;
  }

  [[noreturn]] void fail(int rc, const char *op) { raise_rc(rc, name, seg, op); }

  static ss_segment *new_handle() {
    ss_segment *s = ss_segment_new();
    if (!s) throw std::bad_alloc();
    return s;
  }
  const ss_identity &id() const { return *ss_segment_identity(seg); }

  uint64_t count() const { return ss_segment_count(seg); }
  // An explicit count (a mirror's or a replay's; 0: count + 1) must exceed
  // the current one (the core checks); the caller holds the stream lock.
  void check_count(uint64_t c) const {
    uint64_t now = 0;
    int rc = ss_publish_count_check(seg, c, &now);
    if (rc) raise_count(rc, c, now, name);
  }
};

// A device allocation owned by Python (read results without torch).
struct DeviceBuffer {
  uint64_t ptr = 0;
  size_t nbytes = 0;
  int ordinal = 0;
  ~DeviceBuffer() {
    if (ptr) ss_cuda_free(ordinal, ptr);
  }
};

// ---- DLPack: the structs of _dlpack.h (one copy of the ABI) -------------

constexpr int32_t kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLCUDAManaged = 13;

struct ExportCtx {
  PyObject *owner;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
};

void export_deleter(DLManagedTensor *t) {
  auto *ctx = static_cast<ExportCtx *>(t->manager_ctx);
  PyGILState_STATE st = PyGILState_Ensure();
  Py_XDECREF(ctx->owner);
  PyGILState_Release(st);
  delete ctx;
  delete t;
}

void capsule_destructor(PyObject *cap) {
  // Only a capsule nobody consumed still owns its tensor.
  if (PyCapsule_IsValid(cap, "dltensor")) {
    auto *t = static_cast<DLManagedTensor *>(PyCapsule_GetPointer(cap, "dltensor"));
    if (t && t->deleter) t->deleter(t);
  } else {
    PyErr_Clear();
  }
}

// A DLPack tensor taken from a producer: keeps it alive until released.
class DLImport {
 public:
  DLManagedTensor *t = nullptr;
  ~DLImport() { release(); }
  void release() {
    if (t && t->deleter) t->deleter(t);
    t = nullptr;
  }
  DLTensor &dl() {
    if (!t) raise_error(g_handle_closed, "DLPack tensor already released");
    return t->dl_tensor;
  }
};

}  // namespace

NB_MODULE(_cuda, m) {
  m.doc() = "shmstream CUDA binding (internal; use shmstream.create(..., gpu_device=...))";
  m.attr("SRC_HOST") = (int)SS_GPU_SRC_HOST;
  m.attr("SRC_PINNED") = (int)SS_GPU_SRC_PINNED;
  m.attr("SRC_DEVICE") = (int)SS_GPU_SRC_DEVICE;
  m.attr("SLOTS") = SS_GPU_SLOTS;
  m.attr("AREA_VERSION") = SS_GPU_AREA_VERSION;

  load_error_types();

  // (usable, reason): loads libcuda and counts devices, at most once.
  m.def("probe", []() {
    int rc;
    int n = 0;
    {
      nb::gil_scoped_release nogil;
      rc = ss_cuda_device_count(&n);
    }
    if (rc) return std::make_tuple(false, std::string(ss_cuda_error()));
    if (n <= 0)
      return std::make_tuple(false, std::string("no CUDA device is visible to this process"));
    return std::make_tuple(true, std::string());
  });
  m.def("device_count", []() {
    int n = 0;
    int rc = ss_cuda_device_count(&n);
    if (rc) raise_rc(rc, "", nullptr, "counting devices");
    return n;
  });
  m.def("device_uuid", [](int ordinal) {
    uint8_t u[16];
    int rc = ss_cuda_device_uuid(ordinal, u);
    if (rc) raise_rc(rc, "", nullptr, "reading the device uuid");
    return nb::bytes((const char *)u, 16);
  });
  m.def("device_by_uuid", [](nb::bytes uuid) {
    if (uuid.size() != 16) raise_error(g_value, "a device uuid is 16 bytes");
    return ss_cuda_device_by_uuid((const uint8_t *)uuid.c_str());
  });

  nb::class_<GpuStream>(m, "GpuStream")
      .def_static(
          "create",
          [](const std::string &name, std::vector<uint64_t> shape, uint64_t itemsize,
             const std::string &dtype, int flags, int mode, int ordinal) {
            auto *s = new GpuStream();
            s->name = name;
            ss_create_args a{};
            a.name = name.c_str();
            a.kind = SS_KIND_STREAM;
            a.flags = (uint32_t)flags | SS_FLAG_GPU;
            a.ndim = (uint32_t)shape.size();
            a.shape = shape.data();
            a.itemsize = itemsize;
            a.dtype = dtype.c_str();
            a.mode = (uint32_t)mode;
            int rc;
            {
              nb::gil_scoped_release nogil;
              rc = ss_gpu_create(s->seg, &a, ordinal, &s->gpu);
            }
            if (rc) {
              delete s;
              raise_rc(rc, name, nullptr, "create");
            }
            return s;
          },
          nb::rv_policy::take_ownership)
      .def_static(
          "attach",
          [](const std::string &name, int ordinal, bool readonly,
             const std::vector<uint32_t> &allow_owners) {
            auto *s = new GpuStream();
            s->name = name;
            ss_open_opts opts = ssb::open_opts(allow_owners);
            int rc, opened;
            {
              nb::gil_scoped_release nogil;
              rc = ss_segment_open_ex(s->seg, name.data(), name.size(), SS_KIND_STREAM, readonly,
                                      &opts);
              opened = rc == SS_OK;
              if (opened) rc = ss_gpu_attach(s->seg, ordinal, &s->gpu);
            }
            if (rc == SS_EPIDNS && opened) {  // the segment opened; its device buffer cannot
              std::string detail = ss_cuda_error();
              delete s;
              ssb::raise_status(rc, {"GPU stream", name, "map the device buffer", "", detail});
            }
            if (rc == SS_EOWNER || rc == SS_EVERSION) {
              std::string detail = ssb::open_detail(rc, s->seg);
              delete s;
              ssb::raise_status(rc, {"GPU stream", name, "attach", "", detail});
            }
            if (rc) {
              delete s;
              raise_rc(rc, name, nullptr, "attach");
            }
            return s;
          },
          "name"_a, "ordinal"_a, "readonly"_a, "allow_owners"_a = std::vector<uint32_t>(),
          nb::rv_policy::take_ownership)
      .def("close", &GpuStream::close)
      .def("release_owned",
           [](GpuStream &s) {
        // The creator gives its device buffer up (unlink).
             if (ss_segment_mapped(s.seg)) ss_gpu_release_owned(s.id().instance_id);
           })
      .def_prop_ro("closed", [](GpuStream &s) { return s.gpu == nullptr; })
      .def_prop_ro("ordinal", [](GpuStream &s) { return ss_gpu_ordinal(s.g("use")); })
      .def_prop_ro("stream", [](GpuStream &s) { return ss_gpu_stream(s.g("use")); })
      .def_prop_ro("owner", [](GpuStream &s) { return (bool)ss_gpu_is_owner(s.g("use")); })
      .def_prop_ro("instance_id", [](GpuStream &s) { return hex(s.id().instance_id, 16); })
      .def_prop_ro("payload_bytes", [](GpuStream &s) { return s.id().payload_bytes; })
      .def("slot_ptr",
           [](GpuStream &s, uint32_t slot) { return ss_gpu_slot_ptr(s.g("use"), slot); })
      .def("published_ptr",
           [](GpuStream &s) { return ss_gpu_slot_ptr(s.g("use"), ss_published_slot(s.seg)); })
      .def(
          "write",
          [](GpuStream &s, uint64_t src, int kind, uint64_t user_stream,
             std::optional<uint64_t> frame_id, nb::handle timeout, uint64_t count,
             uint64_t write_time_ns) {
            ss_gpu *g = s.g("write to");
            s.check_count(count);
            ss_publish_meta meta{frame_id ? &*frame_id : nullptr, write_time_ns, count};
            int64_t t = to_ns(timeout);
            int rc;
            {
              nb::gil_scoped_release nogil;
              rc = ss_gpu_write_locked_ex(g, s.seg, src, kind, user_stream, &meta, t);
            }
            if (rc) s.fail(rc, "write");
            return s.count();
          },
          "src"_a, "kind"_a, "user_stream"_a = 0, "frame_id"_a = nb::none(),
          "timeout"_a = nb::none(), "count"_a = 0, "write_time_ns"_a = 0,
          "Publish payload_bytes at address src (the caller holds the stream lock); count and "
          "write_time_ns 0: count + 1 and now.")
      .def(
          "write_host",
          [](GpuStream &s, nb::handle buffer, bool pinned, std::optional<uint64_t> frame_id,
             nb::handle timeout, uint64_t count, uint64_t write_time_ns) {
            ss_gpu *g = s.g("write to");
            s.check_count(count);
            Py_buffer view{};
            if (PyObject_GetBuffer(buffer.ptr(), &view, PyBUF_C_CONTIGUOUS) != 0)
              throw nb::python_error();
            if ((uint64_t)view.len != s.id().payload_bytes) {
              PyBuffer_Release(&view);
              raise_error(g_value, "source buffer of " + std::to_string(view.len) +
                                       " bytes does not match the payload of '" + s.name + "'");
            }
            ss_publish_meta meta{frame_id ? &*frame_id : nullptr, write_time_ns, count};
            int64_t t = to_ns(timeout);
            int rc;
            {
              nb::gil_scoped_release nogil;
              rc = ss_gpu_write_locked_ex(g, s.seg, (uint64_t)(uintptr_t)view.buf,
                                          pinned ? SS_GPU_SRC_PINNED : SS_GPU_SRC_HOST, 0, &meta,
                                          t);
            }
            PyBuffer_Release(&view);
            if (rc) s.fail(rc, "write");
            return s.count();
          },
          "buffer"_a, "pinned"_a = false, "frame_id"_a = nb::none(), "timeout"_a = nb::none(),
          "count"_a = 0, "write_time_ns"_a = 0)
      .def(
          "clear",
          [](GpuStream &s, nb::handle timeout) {
            ss_gpu *g = s.g("clear");
            int64_t t = to_ns(timeout);
            int rc;
            {
              nb::gil_scoped_release nogil;
              rc = ss_gpu_clear_locked(g, s.seg, t);
            }
            if (rc) s.fail(rc, "clear");
            return s.count();
          },
          "timeout"_a = nb::none())
      .def(
          "read",
          [](GpuStream &s, uint64_t dst, uint64_t user_stream, nb::handle timeout,
             bool holds_lock) {
            ss_gpu *g = s.g("read from");
            ss_pubinfo info{};
        // A read waits in chunks (Ctrl-C); each chunk is a whole snapshot
        // attempt, so a timed-out chunk leaves nothing half done.
            int rc = chunked(to_ns(timeout), [&](int64_t chunk) {
              return ss_gpu_read(g, s.seg, dst, user_stream, chunk, holds_lock, &info);
            });
            if (rc) s.fail(rc, "read");
            return std::make_tuple(info.count, info.frame_id, info.write_time_ns);
          },
          "dst"_a, "user_stream"_a = 0, "timeout"_a = nb::none(), "holds_lock"_a = false)
      .def(
          "view_begin",
          [](GpuStream &s, uint64_t user_stream, nb::handle timeout) {
            ss_gpu *g = s.g("write to");
            int64_t t = to_ns(timeout);
            uint64_t ptr = 0;
            int rc;
            {
              nb::gil_scoped_release nogil;
              rc = ss_gpu_view_begin(g, s.seg, user_stream, t, &ptr);
            }
            if (rc) s.fail(rc, "write_view");
            return ptr;
          },
          "user_stream"_a = 0, "timeout"_a = nb::none())
      .def(
          "view_commit",
          [](GpuStream &s, uint64_t user_stream, std::optional<uint64_t> frame_id) {
            ss_gpu *g = s.g("write to");
            const uint64_t *fid = frame_id ? &*frame_id : nullptr;
            int rc;
            {
              nb::gil_scoped_release nogil;
              rc = ss_gpu_view_commit(g, s.seg, user_stream, fid);
            }
            if (rc) s.fail(rc, "write_view");
            return s.count();
          },
          "user_stream"_a = 0, "frame_id"_a = nb::none())
      .def("view_abort", [](GpuStream &s) { ss_gpu_view_abort(s.g("write to"), s.seg); });

  nb::class_<DeviceBuffer>(m, "DeviceBuffer")
      .def_static(
          "alloc",
          [](size_t nbytes, int ordinal) {
            auto *b = new DeviceBuffer();
            int rc;
            {
              nb::gil_scoped_release nogil;
              rc = ss_cuda_alloc(ordinal, nbytes, &b->ptr);
            }
            if (rc) {
              delete b;
              raise_rc(rc, "", nullptr, "allocating device memory");
            }
            b->nbytes = nbytes;
            b->ordinal = ordinal;
            return b;
          },
          nb::rv_policy::take_ownership)
      .def_ro("ptr", &DeviceBuffer::ptr)
      .def_ro("nbytes", &DeviceBuffer::nbytes)
      .def_ro("ordinal", &DeviceBuffer::ordinal);

  // Pinned (page-locked) host memory as a writable uint8 NumPy array.
  m.def("host_alloc", [](size_t nbytes) {
    void *p = nullptr;
    int rc = ss_cuda_host_alloc(nbytes, &p);
    if (rc) raise_rc(rc, "", nullptr, "allocating pinned host memory");
    nb::capsule owner(p, [](void *q) noexcept { ss_cuda_host_free(q); });
    size_t shape[1] = {nbytes};
    return nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>(p, 1, shape, owner);
  });

  m.def("copy_to_host", [](uint64_t src, int ordinal, nb::handle out) {
    Py_buffer view{};
    if (PyObject_GetBuffer(out.ptr(), &view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) != 0)
      throw nb::python_error();
    int rc;
    {
      nb::gil_scoped_release nogil;
      rc = ss_cuda_copy_to_host(ordinal, view.buf, src, (size_t)view.len);
    }
    PyBuffer_Release(&view);
    if (rc) raise_rc(rc, "", nullptr, "copying to the host");
  });

  // A DLPack capsule (kDLCUDA) over device memory kept alive by `owner`.
  m.def("to_dlpack", [](nb::handle owner, uint64_t ptr, std::vector<int64_t> shape, int code,
                        int bits, int ordinal) {
    auto *ctx = new ExportCtx{owner.ptr(), shape, {}};
    Py_INCREF(owner.ptr());
    int64_t stride = 1;
    ctx->strides.resize(shape.size());
    for (size_t i = shape.size(); i-- > 0;) {
      ctx->strides[i] = stride;
      stride *= shape[i];
    }
    auto *t = new DLManagedTensor{};
    t->dl_tensor.data = (void *)(uintptr_t)ptr;
    t->dl_tensor.device = {kDLCUDA, ordinal};
    t->dl_tensor.ndim = (int32_t)shape.size();
    t->dl_tensor.dtype = {(uint8_t)code, (uint8_t)bits, 1};
    t->dl_tensor.shape = ctx->shape.data();
    t->dl_tensor.strides = ctx->strides.data();
    t->dl_tensor.byte_offset = 0;
    t->manager_ctx = ctx;
    t->deleter = export_deleter;
    PyObject *cap = PyCapsule_New(t, "dltensor", capsule_destructor);
    if (!cap) {
      export_deleter(t);
      throw nb::python_error();
    }
    return nb::steal(cap);
  });

  nb::class_<DLImport>(m, "DLImport")
      .def_static(
          "take",
          [](nb::handle capsule) {
            if (!PyCapsule_IsValid(capsule.ptr(), "dltensor"))
              raise_error(g_type, "expected an unconsumed DLPack capsule ('dltensor')");
            auto *t = static_cast<DLManagedTensor *>(
                PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
            if (PyCapsule_SetName(capsule.ptr(), "used_dltensor") != 0) throw nb::python_error();
            auto *imp = new DLImport();
            imp->t = t;
            return imp;
          },
          nb::rv_policy::take_ownership)
      .def_prop_ro(
          "ptr", [](DLImport &d) { return (uint64_t)(uintptr_t)d.dl().data + d.dl().byte_offset; })
      .def_prop_ro("device",
                   [](DLImport &d) {
                     return std::make_tuple(d.dl().device.device_type, d.dl().device.device_id);
                   })
      .def_prop_ro("shape",
                   [](DLImport &d) {
                     std::vector<int64_t> v(d.dl().shape, d.dl().shape + d.dl().ndim);
                     return v;
                   })
      .def_prop_ro("strides",
                   [](DLImport &d) -> std::optional<std::vector<int64_t>> {
                     if (!d.dl().strides) return std::nullopt;
                     return std::vector<int64_t>(d.dl().strides, d.dl().strides + d.dl().ndim);
                   })
      .def_prop_ro("dtype",
                   [](DLImport &d) {
                     return std::make_tuple((int)d.dl().dtype.code, (int)d.dl().dtype.bits,
                                            (int)d.dl().dtype.lanes);
                   })
      .def("release", &DLImport::release);

  m.attr("kDLCPU") = kDLCPU;
  m.attr("kDLCUDA") = kDLCUDA;
  m.attr("kDLCUDAHost") = kDLCUDAHost;
  m.attr("kDLCUDAManaged") = kDLCUDAManaged;
}
