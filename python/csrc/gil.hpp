// Python's GIL around blocking waits. Dropping a tensor that Python also references needs the
// GIL, so a thread that blocks on another thread (joining the watcher, waiting for a drain)
// while holding it can deadlock: such waits let go of it first.
#pragma once

#include <pybind11/pybind11.h>

#include <optional>

namespace trnccl::torch_ext {

class WithoutGil {
 public:
  WithoutGil() {
    if (Py_IsInitialized() && PyGILState_Check()) released_.emplace();
  }

 private:
  std::optional<pybind11::gil_scoped_release> released_;
};

}  // namespace trnccl::torch_ext
