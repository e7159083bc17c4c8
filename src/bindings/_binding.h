// Helpers shared by the extension modules (src/bindings/_*.cpp): status
// codes and errno values become Python exceptions (one table), timeouts
// become nanoseconds, waits are chunked for Ctrl-C, buffers are borrowed
// through the buffer protocol. Header-only: each module is its own shared
// object.
#pragma once

#include <nanobind/nanobind.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <pwd.h>
#include <unistd.h>

#include "shmstream.h"
#include "shmstream_channel.h"
#include "shmstream_direct.h"
#include "shmstream_unstable.h" /* the writer steps, the handles' state */

namespace ssb {

namespace nb = nanobind;

// Blocking calls come back to Python this often to honour Ctrl-C.
constexpr int64_t kSignalCheckNs = 100'000'000;

// Raise `type` with `msg`. Not named raise: that is libc's raise(), a signal.
[[noreturn]] inline void raise_error(PyObject *type, const std::string &msg) {
  PyErr_SetString(type, msg.c_str());
  throw nb::python_error();
}

// The rule every name follows (docs/ABI.md, "Names"); the Python checks
// read it from _native.NAME_RULE.
// A handle's wait policy state (docs/waiting.md) as a dict, for
// Segment.spin_policy, Channel.spin_policy and a milk Stream's.
inline nb::dict wait_policy_dict(const ss_wait_policy_info &w) {
  nb::dict d;
  d["wake_ns"] = w.wake_ns;
  d["seen_wake_ns"] = w.seen_wake_ns;
  d["cap_ns"] = w.cap_ns;
  d["contended"] = (bool)w.contended;
  d["budget_ns"] = w.budget_ns;
  nb::list hist;
  for (uint32_t h : w.hist) hist.append(h);
  d["histogram"] = hist;
  d["waits"] = w.waits;
  d["spun"] = w.spun;
  d["caught"] = w.caught;
  d["slept"] = w.slept;
  d["slept_at_once"] = w.slept_at_once;
  d["preempted"] = w.preempted;
  d["contended_waits"] = w.contended_waits;
  d["low_ns"] = w.low_ns;
  d["nap_ns"] = w.nap_ns;
  d["napped"] = w.napped;
  return d;
}
inline nb::dict wait_policy_dict(const ss_segment *seg) {
  ss_wait_policy_info w;
  ss_wait_policy_info_get(seg, &w);
  return wait_policy_dict(w);
}

inline std::string name_rule() {
  return "1 to " + std::to_string(SS_MAX_NAME_BYTES) + " UTF-8 bytes without NUL";
}

// ---- status codes -> exceptions: the one table --------------------------

// shmstream.errors' exception types, looked up when a module is imported
// (load_error_types) so that every module raises the same classes.
inline PyObject *g_error = PyExc_RuntimeError;         // ShmstreamError
inline PyObject *g_os = PyExc_OSError;                 // ShmstreamOSError (picks by errno)
inline PyObject *g_timeout = PyExc_TimeoutError;       // ShmstreamTimeoutError
inline PyObject *g_value = PyExc_ValueError;           // ShmstreamValueError
inline PyObject *g_type = PyExc_TypeError;             // ShmstreamTypeError
inline PyObject *g_index = PyExc_IndexError;           // ShmstreamIndexError
inline PyObject *g_buffer = PyExc_BufferError;         // ShmstreamBufferError
inline PyObject *g_handle_closed = PyExc_RuntimeError; // HandleClosedError
inline PyObject *g_cancelled = PyExc_RuntimeError;     // WaitCancelledError
inline PyObject *g_lock_held = PyExc_RuntimeError;     // LockHeldError
inline PyObject *g_not_owner = PyExc_RuntimeError;     // NotLockOwnerError
inline PyObject *g_loan = PyExc_RuntimeError;          // LoanStateError
inline PyObject *g_role = PyExc_RuntimeError;          // ChannelRoleError
inline PyObject *g_no_cuda = PyExc_RuntimeError;       // CudaUnavailableError
inline PyObject *g_cuda = PyExc_RuntimeError;          // CudaError
inline PyObject *g_version = PyExc_ValueError;         // LayoutVersionError
inline PyObject *g_inconsistent = PyExc_RuntimeError;  // InconsistentStreamError
inline PyObject *g_corrupt = PyExc_ValueError;         // CorruptStreamError
inline PyObject *g_closed = PyExc_EOFError;            // ChannelClosedError
inline PyObject *g_broken = PyExc_BrokenPipeError;     // ChannelBrokenError
inline PyObject *g_busy = PyExc_RuntimeError;          // ChannelBusyError
inline PyObject *g_gone = PyExc_RuntimeError;          // GpuStreamGoneError
inline PyObject *g_owner = PyExc_PermissionError;      // SegmentOwnerError
inline PyObject *g_pidns = PyExc_RuntimeError;         // PidNamespaceError

inline void load_error_types() {
  nb::module_ errors = nb::module_::import_("shmstream.errors");
  auto take = [&](PyObject *&slot, const char *name) {
    nb::object t = errors.attr(name);
    slot = t.release().ptr();  // held for the life of the process
  };
  take(g_error, "ShmstreamError");
  take(g_os, "ShmstreamOSError");
  take(g_timeout, "ShmstreamTimeoutError");
  take(g_value, "ShmstreamValueError");
  take(g_type, "ShmstreamTypeError");
  take(g_index, "ShmstreamIndexError");
  take(g_buffer, "ShmstreamBufferError");
  take(g_handle_closed, "HandleClosedError");
  take(g_cancelled, "WaitCancelledError");
  take(g_lock_held, "LockHeldError");
  take(g_not_owner, "NotLockOwnerError");
  take(g_loan, "LoanStateError");
  take(g_role, "ChannelRoleError");
  take(g_no_cuda, "CudaUnavailableError");
  take(g_cuda, "CudaError");
  take(g_version, "LayoutVersionError");
  take(g_inconsistent, "InconsistentStreamError");
  take(g_corrupt, "CorruptStreamError");
  take(g_closed, "ChannelClosedError");
  take(g_broken, "ChannelBrokenError");
  take(g_busy, "ChannelBusyError");
  take(g_gone, "GpuStreamGoneError");
  take(g_owner, "SegmentOwnerError");
  take(g_pidns, "PidNamespaceError");
}

// ShmstreamOSError(errno, "<what>: <strerror>"): it picks the subclass
// (ShmstreamFileExistsError, ShmstreamFileNotFoundError, ...) from errno,
// as OSError does.
[[noreturn]] inline void raise_os(int err, const std::string &what) {
  PyObject *args = Py_BuildValue("(is)", err, (what + ": " + std::strerror(err)).c_str());
  PyErr_SetObject(g_os, args);
  Py_XDECREF(args);
  throw nb::python_error();
}

// ShmstreamOSError(errno, sentence): the table's messages below are whole
// sentences that say what happened and what to do, so strerror's words
// ("File exists") are not appended; the errno is still the exception's.
[[noreturn]] inline void raise_os_sentence(int err, const std::string &sentence) {
  PyObject *args = Py_BuildValue("(is)", err, sentence.c_str());
  PyErr_SetObject(g_os, args);
  Py_XDECREF(args);
  throw nb::python_error();
}

// ShmstreamOSError(errno, strerror, filename), for errors about a file.
[[noreturn]] inline void raise_os_path(int err, const std::string &path) {
  PyObject *args = Py_BuildValue("(iss)", err, std::strerror(err), path.c_str());
  PyErr_SetObject(g_os, args);
  Py_XDECREF(args);
  throw nb::python_error();
}

// Who failed and how: fills the $kind, $name, $op and $detail of a message.
// `when` picks a row for one operation or one side ("producer",
// "consumer", "abandoned", ...); empty matches the generic rows only.
struct ErrorContext {
  const char *kind;      // "stream", "GPU stream", "channel", "shared array", "DirectArray"
  std::string name;      // the object's name (a path for DirectArray)
  const char *op;        // "read", "send", "open", ...
  const char *when = ""; // a side or state: "producer", "consumer", "abandoned"
  std::string detail = "";
};

enum class Raise { Type, OsWhat, OsPath };

struct StatusRow {
  int status;
  const char *kind;   // nullptr: any kind
  const char *when;   // nullptr: any; else must equal ctx.op or ctx.when
  PyObject *const *type;
  const char *text;   // with $kind $name $op $detail
  Raise how = Raise::Type;
};

// What opening a channel says for any segment it cannot use (three statuses).
inline constexpr const char kBadChannelSegment[] =
    "segment of '$name' is not a valid channel (bad magic, checksum or ring size); "
    "remove it with shmstream.unlink_channel('$name')";

// Every error the bindings raise for a status code, in one place. The first
// row that matches (status, kind, when) wins, so specific rows come first.
inline const StatusRow kStatusTable[] = {
    // -- waits that ran out
    {SS_ETIMEDOUT, "stream", "read", &g_timeout,
     "timed out waiting for a stable write on '$name': a writer holds the lock (write in "
     "progress)"},
    {SS_ETIMEDOUT, "GPU stream", "read", &g_timeout,
     "timed out waiting for a stable write on GPU stream '$name': a writer holds the lock (write "
     "in progress)"},
    {SS_ETIMEDOUT, nullptr, "read_new", &g_timeout, "timed out waiting for a new write on '$name'"},
    {SS_ETIMEDOUT, nullptr, "wait", &g_timeout,
     "timed out waiting for stream '$name' to pass count $detail"},
    {SS_ETIMEDOUT, nullptr, "lock", &g_timeout,
     "timed out waiting for shared memory lock of '$name' (held by pid $detail)"},
    {SS_ETIMEDOUT, nullptr, "read_last_complete", &g_timeout,
     "timed out waiting for the lock of '$name'"},
    {SS_ETIMEDOUT, "channel", "producer", &g_timeout,
     "$op on '$name' timed out: the ring is full (the consumer is not keeping up)"},
    {SS_ETIMEDOUT, "channel", "consumer", &g_timeout,
     "$op on '$name' timed out: no message arrived"},
    {SS_ETIMEDOUT, nullptr, nullptr, &g_timeout, "$op on $kind '$name' timed out"},
    // -- handles closed under a waiter
    {SS_ECANCELLED, "channel", nullptr, &g_cancelled,
     "channel '$name' was closed while $op was waiting"},
    {SS_ECANCELLED, nullptr, nullptr, &g_cancelled,
     "$kind '$name' was closed while a read was waiting; open it again with "
     "shmstream.open('$name')"},
    // -- failed writes
    {SS_EINCONSISTENT, nullptr, "read_last_complete", &g_inconsistent,
     "stream '$name' has one slot, and its last write failed in place: no complete frame is left; "
     "the next successful write recovers it (streams with slots >= 2 keep the last complete "
     "frame)"},
    {SS_EINCONSISTENT, nullptr, "bad state", &g_corrupt,
     "stream '$name' holds frame state $detail, which no shmstream writes (the header was "
     "overwritten); remove it with shmstream.unlink('$name') and create it again"},
    {SS_EINCONSISTENT, nullptr, "abandoned", &g_inconsistent,
     "the writer of '$name' exited (process died) in the middle of a write, so no consistent "
     "payload is published; the next successful write recovers the stream"},
    {SS_EINCONSISTENT, nullptr, nullptr, &g_inconsistent,
     "the last write to '$name' was aborted (an exception inside write_view), so no consistent "
     "payload is published; the next successful write recovers the stream"},
    // -- the lock
    {SS_EDEADLK, nullptr, nullptr, &g_lock_held,
     "this thread already holds the lock of '$name' through another handle; release it there "
     "first"},
    {SS_ENOTOWNER, nullptr, nullptr, &g_not_owner,
     "release of '$name' by a thread that does not hold its lock"},
    // -- a segment another process changed under an open handle (docs/ABI.md,
    //    "The header is trusted once")
    {SS_ECORRUPT, nullptr, "shrunk", &g_corrupt,
     "the segment file of $kind '$name' shrank under this handle (another process truncated it), "
     "so $op failed; close this handle, remove the segment with shmstream.unlink('$name') and "
     "create it again"},
    {SS_ECORRUPT, nullptr, "changed", &g_corrupt,
     "the header of $kind '$name' was rewritten after it was opened ($detail changed), so $op was "
     "refused and nothing was written; close this handle, remove the segment with "
     "shmstream.unlink('$name') and create it again"},
    // -- names and headers
    {ENODEV, nullptr, "open", nullptr,
     "the /dev/shm entry of $kind '$name' is not a shared-memory segment (a FIFO, directory or "
     "device another process put there); remove it with shmstream.unlink('$name')",
     Raise::OsWhat},
    {EMFILE, nullptr, nullptr, nullptr,
     "cannot $op $kind '$name': this process has no file descriptor left, up to its hard "
     "limit (each open stream handle and channel end keeps one, for its liveness lease; "
     "shmstream already raised the soft limit to the hard one); close the handles you no "
     "longer use, or raise the hard limit (ulimit -Hn, systemd LimitNOFILE=, docker --ulimit "
     "nofile=N:N)",
     Raise::OsWhat},
    {ELOOP, nullptr, "open", nullptr,
     "the /dev/shm entry of $kind '$name' is a symbolic link, which shmstream never follows; "
     "remove it with shmstream.unlink('$name')",
     Raise::OsWhat},
    {SS_ENAME, nullptr, nullptr, &g_value, "invalid $kind name '$name': a name is $detail"},
    {SS_EKIND, nullptr, nullptr, &g_value,
     "'$name' is a shared-memory object of another kind (not a $kind)"},
    {SS_ECORRUPT, "channel", "open", &g_corrupt, kBadChannelSegment},
    {SS_EVERSION, "channel", "open", &g_version,
     "channel segment of '$name' has layout version $detail; another shmstream version made "
     "it: use the same version on both sides, or remove it with "
     "shmstream.unlink_channel('$name')"},
    {SS_EBUSY, "channel", "open", &g_corrupt, kBadChannelSegment},
    {SS_ECORRUPT, "channel", nullptr, &g_corrupt,
     "channel '$name' holds an impossible record header or ring position (corrupt ring); "
     "remove it with shmstream.unlink_channel('$name') and create it again"},
    {SS_ECORRUPT, nullptr, nullptr, &g_corrupt,
     "segment of '$name' is corrupt or not a shmstream segment (bad magic, checksum or size); "
     "remove it with shmstream.unlink('$name')"},
    {SS_EVERSION, nullptr, nullptr, &g_version,
     "segment of '$name' has layout version $detail; another shmstream version made it: use "
     "the same version on both sides, or remove it with shmstream.unlink('$name')"},
    {SS_EBUSY, nullptr, "peek", nullptr,
     "segment $name is still being created (or its creator died while creating it)", Raise::OsWhat},
    {SS_EBUSY, nullptr, nullptr, &g_corrupt,
     "segment of '$name' was never finished by its creator; remove it with "
     "shmstream.unlink('$name')"},
    // -- channels
    {SS_EPEERDEAD, "channel", "producer", &g_broken,
     "the consumer of '$name' died and the ring is full; a new consumer can take over with "
     "shmstream.open_channel('$name')"},
    {SS_EPEERDEAD, "channel", "consumer", &g_closed,
     "the producer of '$name' died; every message it published has been received; a new producer "
     "can take over with shmstream.open_channel('$name', role='producer')"},
    {SS_EPEERCLOSED, "channel", "producer", &g_broken,
     "the consumer of '$name' closed the channel; nothing reads what is sent until a new consumer "
     "attaches with shmstream.open_channel('$name')"},
    {SS_EPEERCLOSED, "channel", "consumer", &g_closed,
     "the producer of '$name' closed the channel and every message has been received (end of "
     "stream)"},
    {SS_EATTACHED, "channel", nullptr, &g_busy,
     "channel '$name' already has a live $detail; a channel has one producer and one consumer "
     "(close the other handle first)"},
    {SS_ETOOBIG, "channel", nullptr, &g_value,
     "message is larger than the ring of '$name' can ever hold"},
    {SS_EROLE, "channel", nullptr, &g_role, "$op is not possible on this end of '$name'$detail"},
    {EEXIST, "shared array", nullptr, nullptr,
     "a shared-memory object named '$name' already exists; attach to a shared array with "
     "shmstream.SharedArray.open('$name'), pick another name, or remove it with "
     "shmstream.unlink('$name')",
     Raise::OsWhat},
    {EEXIST, "channel", nullptr, nullptr,
     "channel '$name' already exists; attach with shmstream.open_channel('$name') or remove it "
     "with "
     "shmstream.unlink_channel('$name')",
     Raise::OsWhat},
    {ENOENT, "channel", nullptr, nullptr,
     "no channel '$name'; create it with shmstream.channel('$name', capacity=...)", Raise::OsWhat},
    {EINVAL, "channel", "create", &g_value, "capacity must be a power of two from $detail bytes"},
    // the core's limits of a segment header; shmstream.create checks each
    // first and names the argument, so only a direct caller meets this one
    {EINVAL, nullptr, "create", &g_value,
     "cannot create $kind '$name': its shape, slots, history or dtype description is outside "
     "the limits of a segment header (MAX_NDIM, MAX_SLOTS, MAX_HISTORY, MAX_DTYPE_BYTES)"},
    {ESTALE, "channel", nullptr, &g_corrupt,
     "channel '$name' was removed and created again while attaching; retry"},
    // -- who may open a segment (docs/ABI.md, "Owner and PID namespace")
    {SS_EOWNER, nullptr, nullptr, &g_owner,
     "$kind '$name' is owned by $detail; another user's segment is a channel between that user "
     "and this process (they can read and change what goes through it). If you trust that user, "
     "pass allow_owner=<their uid or user name> to the open call, or set the environment "
     "variable SHMSTREAM_ALLOW_OWNERS=<uid>[,<uid>...]; otherwise remove it with "
     "shmstream.unlink('$name') and create it again"},
    {SS_EPIDNS, "GPU stream", "map the device buffer", &g_pidns,
     "cannot map the device buffer of GPU stream '$name': $detail"},
    // -- GPU streams
    {SS_EGPUGONE, nullptr, nullptr, &g_gone, "GPU stream '$name': $detail"},
    {SS_EPOISONED, nullptr, nullptr, &g_gone, "GPU stream '$name': $detail"},
    {SS_ENOCUDA, nullptr, nullptr, &g_no_cuda, "CUDA support is not available: $detail"},
    {SS_EFORK, nullptr, nullptr, &g_cuda, "$op on GPU stream '$name': $detail"},
    {SS_ECUDA, nullptr, nullptr, &g_cuda, "$op on GPU stream '$name': $detail"},
    {SS_ENOTGPU, nullptr, nullptr, &g_value, "GPU stream '$name': $detail"},
    // -- the direct-I/O reader ($name is the file's path)
    {SS_DIRECT_ESHORT, nullptr, nullptr, &g_value,
     "file '$name' has $detail; check shape, dtype and offset"},
    {SS_DIRECT_ENOTREG, nullptr, nullptr, &g_value,
     "'$name' is not a regular file (a directory, a device or a pipe); give DirectArray the "
     "path of an array file"},
    {ENOENT, "DirectArray", nullptr, nullptr,
     "no file '$name'; DirectArray reads an existing array file (write one with "
     "arr.tofile(path), or give np.save's file with its header's offset)",
     Raise::OsWhat},
    {SS_DIRECT_ECLOSED, nullptr, nullptr, &g_value,
     "read from a closed DirectArray ('$name'); open a new one to read again"},
    {SS_DIRECT_ERANGE, nullptr, nullptr, &g_index,
     "row index out of range for the DirectArray on '$name'"},
    {SS_DIRECT_ETRUNCATED, nullptr, nullptr, &g_os,
     "file '$name' became shorter than the array while reading"},
    {EINVAL, "DirectArray", nullptr, &g_value,
     "invalid read request (output size does not match the rows)"},
    {0, "DirectArray", nullptr, nullptr, "$name", Raise::OsPath},  // any other errno
};

// The $detail of SS_EOWNER and SS_EVERSION, from the segment that failed to
// open (ss_segment_open_ex leaves the refused owner in seg.owner_uid and
// the identity it found); "" for other statuses.
inline std::string user_text(uint32_t uid) {
  std::string out = "uid " + std::to_string(uid);
  struct passwd pw, *found = nullptr;
  char buf[4096];
  if (getpwuid_r(uid, &pw, buf, sizeof buf, &found) == 0 && found)
    out += std::string(" (user '") + found->pw_name + "')";
  return out;
}

inline std::string open_detail(int rc, const ss_segment *seg) {
  if (rc == SS_EOWNER)
    return user_text(ss_segment_owner_uid(seg)) + ", not by this process's effective " +
           user_text((uint32_t)geteuid());
  if (rc == SS_EVERSION) {
    // Both versions: the one found, and the one this build makes of that
    // kind (docs/ABI.md, "Layout versions").
    const ss_identity *id = ss_segment_identity(seg);
    return std::to_string(id->layout_version) + "; this shmstream version reads layout " +
           std::to_string(ss_layout_version(id->kind, id->flags));
  }
  return "";
}

// allow_owner uids from Python (the Python side resolves user names to uids) as the
// core's open options; the vector must outlive the call.
inline ss_open_opts open_opts(const std::vector<uint32_t> &uids) {
  ss_open_opts o{};
  o.allow_owners = uids.empty() ? nullptr : uids.data();
  o.n_allow_owners = uids.size();
  return o;
}

inline std::string fill(const char *text, const ErrorContext &c) {
  std::string out;
  for (const char *p = text; *p; p++) {
    auto is = [&](const char *key) { return std::strncmp(p, key, std::strlen(key)) == 0; };
    if (is("$kind")) {
      out += c.kind;
      p += 4;
    } else if (is("$name")) {
      out += c.name;
      p += 4;
    } else if (is("$op")) {
      out += c.op;
      p += 2;
    } else if (is("$detail")) {
      out += c.detail;
      p += 6;
    } else
      out += *p;
  }
  return out;
}

// Raise the exception of status rc (an ss_status or an errno value).
[[noreturn]] inline void raise_status(int rc, const ErrorContext &c) {
  for (const StatusRow &r : kStatusTable) {
    bool status_ok = r.status == rc || (r.status == 0 && rc > 0);
    if (!status_ok || (r.kind && std::strcmp(r.kind, c.kind) != 0)) continue;
    if (r.when && std::strcmp(r.when, c.op) != 0 && std::strcmp(r.when, c.when) != 0) continue;
    std::string msg = fill(r.text, c);
    if (r.how == Raise::OsPath) raise_os_path(rc, c.name);
    if (r.how == Raise::OsWhat) raise_os_sentence(rc == SS_EBUSY ? EAGAIN : rc, msg);
    raise_error(*r.type, msg);
  }
  if (rc > 0) raise_os(rc, std::string(c.op) + " " + c.kind + " '" + c.name + "'");
  // A status without a row: the core's one sentence for it (ss_strerror).
  raise_error(g_error, std::string(c.op) + " " + c.kind + " '" + c.name +
                           "' failed: " + ss_strerror(rc) + " (status " + std::to_string(rc) + ")");
}

// An explicit count the core refused (ss_publish_count_check: ERANGE above
// SS_MAX_COUNT, EINVAL not above the current count `now`): one message for
// streams and GPU streams, the words of streams/_checks.py's check_count.
[[noreturn]] inline void raise_count(int rc, uint64_t count, uint64_t now,
                                     const std::string &name) {
  if (rc == ERANGE)
    raise_error(g_value, "count must be in [1, 2**63), got " + std::to_string(count) +
                             ": the count must still grow after it");
  if (rc == EINVAL)
    raise_error(g_value, "count " + std::to_string(count) + " does not exceed the count of '" +
                             name + "' (" + std::to_string(now) + "): a mirror's counts only grow");
  raise_os(rc, "write '" + name + "'");
}

// The row of an SS_ECORRUPT that an open handle met: "shrunk" (a bus error
// was caught in its mapping), "changed" (its header was rewritten; *detail
// names the field) or "" (the segment was bad from the start).
inline const char *corrupt_when(const ss_segment *seg, std::string *detail) {
  if (!ss_segment_mapped(seg)) return "";
  if (ss_segment_status(seg) != SS_OK) return "shrunk";
  if (const char *field = ss_identity_changed(seg)) {
    if (detail) *detail = field;
    return "changed";
  }
  return "";
}

// A timeout argument: None or math.inf -> -1 (wait for ever); a number of
// seconds -> nanoseconds (a wait longer than ~292 years is for ever too:
// the core's deadlines saturate). NaN or negative: ValueError; anything but
// a real number (a str, a bool): TypeError naming the argument. Every
// binding takes its timeouts through this, as a plain object, so the user
// sees this message rather than nanobind's "incompatible arguments".
inline int64_t to_ns(nb::handle timeout, const char *what = "timeout") {
  if (timeout.is_none()) return -1;
  PyObject *o = timeout.ptr();
  double t = -1.0;
  bool real = !PyBool_Check(o) && !PyUnicode_Check(o) && !PyBytes_Check(o) &&
              (PyFloat_Check(o) || PyLong_Check(o) || PyNumber_Check(o));
  if (real) {
    t = PyFloat_AsDouble(o);
    if (t == -1.0 && PyErr_Occurred()) {
      PyErr_Clear();
      real = false;
    }
  }
  if (!real)
    raise_error(g_type, std::string(what) +
                            " must be a number of seconds, math.inf or None, "
                            "not " +
                            Py_TYPE(o)->tp_name);
  if (std::isinf(t) && t > 0) return -1;
  if (!(t >= 0))
    raise_error(g_value, std::string(what) + " must be >= 0 seconds, math.inf or None");
  double ns = t * 1e9;
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

// chunked() for a wait that spins (spin_ns: the cap, < 0 the policy's or
// SHMSTREAM_SPIN_US): only its first chunk spins, as a wait spins only
// before its first sleep.
template <typename F>
int chunked_spinning(int64_t timeout_ns, int64_t spin_ns, F &&fn) {
  if (spin_ns < 0) spin_ns = ss_default_spin_ns();
  bool first = true;
  return chunked(timeout_ns, [&](int64_t chunk) {
    int r = fn(chunk, first ? spin_ns : 0);
    first = false;
    return r;
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
