// TokenSwitch bindings (filled in by the TokenSwitch step).
#include <pybind11/pybind11.h>

namespace py = pybind11;

void bindTokenSwitch(py::module& /*m*/) {}
