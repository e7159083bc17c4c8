// Fault injection for the tests, exposed by _native only (included there).
#pragma once

#include <string>

#include "_binding.h"

namespace ssb {

// The crash points of the core (docs/ABI.md, "Crash points"). The core is
// one shared library that every extension links (CMakeLists.txt), so one
// arming covers streams, channels and GPU streams alike: only this module
// exposes it (_native includes this header). Tests only.
inline void def_fault_injection(nb::module_ &m) {
  m.def(
      "fault_arm",
      [](const std::string &point, uint32_t nth, bool exit) {
        if (ss_fault_arm(point.c_str(), nth, exit ? SS_FAULT_EXIT : SS_FAULT_SIGKILL) != SS_OK)
          raise(g_value, "unknown crash point '" + point + "'; see fault_points()");
      },
      nb::arg("point"), nb::arg("nth") = 1, nb::arg("exit") = false,
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

}  // namespace ssb
