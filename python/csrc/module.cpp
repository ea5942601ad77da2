// trnccl._C: the torch extension. Python (trnccl/torch.py) does the store rendezvous and
// registers the backend; this module holds the process group and the TokenSwitch engine.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/utils/pybind.h>

#include <stdexcept>

#include "process_group.hpp"

namespace py = pybind11;
using trnccl::torch_ext::ProcessGroupTrnccl;

namespace {

py::bytes newUniqueId() {
  trncclUniqueId id;
  if (trncclGetUniqueId(&id) != trncclSuccess)
    throw std::runtime_error(std::string("trnccl: trncclGetUniqueId failed: ") +
                             trncclGetLastError(nullptr));
  return py::bytes(id.internal, sizeof(id.internal));
}

}  // namespace

void bindTokenSwitch(py::module& m);

PYBIND11_MODULE(_C, m) {
  m.doc() = "trnccl's torch extension (use trnccl.torch)";
  m.def("unique_id", &newUniqueId,
        "A new trncclUniqueId (bytes); the bootstrap root then lives in this process.");
  m.def("version", [] {
    int version = 0;
    (void)trncclGetVersion(&version);
    return version;
  });

  py::object base = py::module::import("torch.distributed").attr("ProcessGroup");
  py::class_<ProcessGroupTrnccl, c10::intrusive_ptr<ProcessGroupTrnccl>>(m, "ProcessGroupTrnccl",
                                                                         base)
      .def(py::init([](const py::bytes& uniqueId, int rank, int size,
                       std::chrono::milliseconds timeout, const std::string& name) {
             std::string id = uniqueId;
             py::gil_scoped_release release;  // init waits for every rank
             return c10::make_intrusive<ProcessGroupTrnccl>(id, rank, size, timeout, name);
           }),
           py::arg("unique_id"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::arg("name"))
      .def_static(
          "split",
          [](const c10::intrusive_ptr<ProcessGroupTrnccl>& parent, int color, int key,
             std::chrono::milliseconds timeout, const std::string& name) {
            py::gil_scoped_release release;  // collective over parent
            return ProcessGroupTrnccl::split(*parent, color, key, timeout, name);
          },
          py::arg("parent"), py::arg("color"), py::arg("key"), py::arg("timeout"), py::arg("name"),
          "trncclCommSplit of parent (collective over it); None for color -1")
      .def_property_readonly("name", &ProcessGroupTrnccl::name)
      .def_property_readonly("timeout", &ProcessGroupTrnccl::timeout)
      .def(
          "last_error",
          [](const ProcessGroupTrnccl& pg) {
            const char* text = trncclGetLastError(pg.comm());
            return std::string(text ? text : "");
          },
          "trnccl's last error sentence on this process group's communicator");

  bindTokenSwitch(m);
}
