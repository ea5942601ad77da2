// trnccl._C's TokenSwitch handles: an expert-parallel group on a trnccl process group and the
// routings made on it, over the trncclEp* C ABI. Every tensor is checked against the sizes
// handed to the library (which cannot see a tensor's bounds), and every call that waits for
// other ranks lets go of the GIL. trnccl/torch.py builds PyTorch's TokenSwitch interface
// (shapes, out=, autograd) on top.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "pending_call.hpp"
#include "process_group.hpp"
#include "tensors.hpp"

namespace py = pybind11;

namespace trnccl::torch_ext {
namespace {

[[noreturn]] void refuse(const std::string& sentence) {
  throw std::invalid_argument("trnccl TokenSwitch: " + sentence);
}

void check(trncclResult_t result, const char* call) {
  if (result == trncclSuccess) return;
  const std::string sentence =
      std::string("trnccl TokenSwitch ") + call + ": " + lastErrorText(nullptr, result);
  if (result == trncclInvalidArgument) throw std::invalid_argument(sentence);
  throw std::runtime_error(sentence);
}

// The payload dtype by its torch name ("bfloat16"): pybind has no caster for torch.dtype.
at::ScalarType payloadScalar(const std::string& name) {
  if (name == "float32") return at::kFloat;
  if (name == "bfloat16") return at::kBFloat16;
  if (name == "float16") return at::kHalf;
  if (name == "float64") return at::kDouble;
  refuse("token dtype torch." + name + " is not supported (bfloat16, float16, float32, float64)");
}

trncclDataType_t payloadType(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return trncclFloat32;
    case at::kBFloat16: return trncclBfloat16;
    case at::kHalf: return trncclFloat16;
    default: return trncclFloat64;
  }
}

trncclEpMode_t modeOf(const std::string& mode) {
  if (mode == "auto") return trncclEpModeAuto;
  if (mode == "normal") return trncclEpModeNormal;
  if (mode == "low_latency") return trncclEpModeLowLatency;
  if (mode == "hierarchical") return trncclEpModeHierarchical;
  refuse("mode '" + mode + "' is not one of auto, normal, low_latency, hierarchical");
}

trncclEpLayout_t layoutOf(const std::string& layout) {
  if (layout == "flat") return trncclEpLayoutFlat;
  if (layout == "expert_major") return trncclEpLayoutExpertMajor;
  refuse("layout '" + layout + "' is not 'flat' or 'expert_major'");
}

// Throws unless t is a contiguous CPU tensor of `type` shaped [rows, cols] (cols < 0: 1-D).
void expect(const char* call, const char* name, const at::Tensor& t, at::ScalarType type,
            int64_t rows, int64_t cols, bool atLeastRows = false) {
  checkCpuDense(call, name, t);
  if (t.scalar_type() != type)
    refuse(std::string(call) + ": " + name + " is " + dtypeName(t) + ", expected torch " +
           c10::toString(type));
  if (!t.is_contiguous()) refuse(std::string(call) + ": " + name + " must be contiguous");
  const bool shapeOk = cols < 0 ? t.dim() == 1 : t.dim() == 2 && t.size(1) == cols;
  const bool rowsOk = t.dim() >= 1 && (atLeastRows ? t.size(0) >= rows : t.size(0) == rows);
  if (!shapeOk || !rowsOk)
    refuse(std::string(call) + ": " + name + " has shape " + c10::str(t.sizes()) + ", expected [" +
           (atLeastRows ? ">= " : "") + std::to_string(rows) +
           (cols < 0 ? "" : ", " + std::to_string(cols)) + "]");
}

class EpGroupHandle {
 public:
  EpGroupHandle(c10::intrusive_ptr<ProcessGroupTrnccl> pg, int numExperts, int maxDispatch,
                int maxRecv, size_t maxTokenBytes, const std::string& dtype,
                const std::string& mode)
      : pg_(std::move(pg)), dtype_(payloadScalar(dtype)) {
    trncclEpConfig_t config = TRNCCL_EP_CONFIG_INITIALIZER;
    config.numExperts = numExperts;
    config.maxDispatchTokensPerRank = maxDispatch;
    config.maxRecvTokensPerRank = maxRecv;
    config.maxTokenBytes = maxTokenBytes;
    config.payloadType = payloadType(dtype_);
    config.mode = modeOf(mode);
    localExperts_ = pg_->getSize() > 0 ? numExperts / pg_->getSize() : 0;
    py::gil_scoped_release noGil;  // collective
    check(trncclEpGroupCreate(pg_->comm(), &config, &group_), "group creation");
  }
  ~EpGroupHandle() { (void)trncclEpGroupDestroy(group_); }
  EpGroupHandle(const EpGroupHandle&) = delete;
  EpGroupHandle& operator=(const EpGroupHandle&) = delete;

  trncclEpGroup_t get() const { return group_; }
  at::ScalarType dtype() const { return dtype_; }
  int localExperts() const { return localExperts_; }

 private:
  c10::intrusive_ptr<ProcessGroupTrnccl> pg_;  // the communicator outlives the group
  at::ScalarType dtype_;
  int localExperts_ = 0;
  trncclEpGroup_t group_ = nullptr;
};

class RoutingHandle {
 public:
  RoutingHandle(std::shared_ptr<EpGroupHandle> group, const at::Tensor& topkIdx,
                const std::string& layout)
      : group_(std::move(group)), layout_(layoutOf(layout)) {
    checkCpuDense("create_routing", "topk_idx", topkIdx);
    if (topkIdx.dim() != 2)
      refuse("create_routing: topk_idx has shape " + c10::str(topkIdx.sizes()) +
             ", expected [num_tokens, top_k]");
    if (topkIdx.scalar_type() != at::kLong && topkIdx.scalar_type() != at::kInt)
      refuse("create_routing: topk_idx is " + dtypeName(topkIdx) + ", expected int64 or int32");
    idx_ = topkIdx.contiguous();
    tokens_ = idx_.size(0);
    topk_ = idx_.size(1);
    const trncclDataType_t idxType = idx_.scalar_type() == at::kLong ? trncclInt64 : trncclInt32;
    py::gil_scoped_release noGil;  // collective
    check(
        trncclEpCreateRouting(group_->get(), idx_.data_ptr(), idxType, static_cast<size_t>(tokens_),
                              static_cast<int>(topk_), layout_, &routing_),
        "create_routing");
  }
  ~RoutingHandle() { (void)trncclEpRoutingDestroy(routing_); }
  RoutingHandle(const RoutingHandle&) = delete;
  RoutingHandle& operator=(const RoutingHandle&) = delete;

  // (rows or slots received, per-local-expert pair counts as an int32 tensor)
  std::pair<int64_t, at::Tensor> counts() const {
    size_t received = 0;
    at::Tensor perExpert = at::zeros({group_->localExperts()}, at::kInt);
    check(trncclEpRoutingGetCounts(routing_, &received, perExpert.data_ptr<int32_t>(),
                                   group_->localExperts()),
          "routing counts");
    return {static_cast<int64_t>(received), perExpert};
  }

  void dispatch(const at::Tensor& tokens, const c10::optional<at::Tensor>& weights,
                const at::Tensor& outTokens, const at::Tensor& outWeights,
                const c10::optional<at::Tensor>& outIdx) {
    const char* call = "dispatch";
    const at::ScalarType type = group_->dtype();
    checkCpuDense(call, "tokens", tokens);
    if (tokens.dim() != 2) refuse("dispatch: tokens must be [num_tokens, hidden]");
    const int64_t hidden = tokens.size(1);
    expect(call, "tokens", tokens, type, tokens_, hidden);
    if (weights) expect(call, "topk_weights", *weights, at::kFloat, tokens_, topk_);
    const int64_t capacity = outTokens.dim() >= 1 ? outTokens.size(0) : 0;
    expect(call, "out tokens", outTokens, type, capacity, hidden);
    const bool flat = layout_ == trncclEpLayoutFlat;
    expect(call, "out topk_weights", outWeights, at::kFloat, capacity, flat ? topk_ : -1);
    if (outIdx) {
      if (!flat) refuse("dispatch: out topk_idx is only written in the flat layout");
      expect(call, "out topk_idx", *outIdx, at::kLong, capacity, topk_);
    }
    py::gil_scoped_release noGil;
    check(trncclEpDispatch(routing_, tokens.data_ptr(), static_cast<size_t>(hidden),
                           weights ? weights->data_ptr<float>() : nullptr, outTokens.data_ptr(),
                           outWeights.data_ptr<float>(),
                           outIdx ? outIdx->data_ptr<int64_t>() : nullptr,
                           static_cast<size_t>(capacity)),
          call);
  }

  void combine(const at::Tensor& expertTokens, const at::Tensor& out, bool weighted) {
    const char* call = "combine";
    const at::ScalarType type = group_->dtype();
    checkCpuDense(call, "expert_tokens", expertTokens);
    if (expertTokens.dim() != 2) refuse("combine: expert_tokens must be [rows, hidden]");
    const int64_t hidden = expertTokens.size(1);
    // Rows the library reads: what this rank received (known once the counts are; the
    // low-latency mode learns them at dispatch, which checks the capacity itself).
    size_t received = 0;
    if (trncclEpRoutingGetCounts(routing_, &received, nullptr, 0) != trncclSuccess) received = 0;
    expect(call, "expert_tokens", expertTokens, type, static_cast<int64_t>(received), hidden, true);
    expect(call, "out", out, type, tokens_, hidden);
    py::gil_scoped_release noGil;
    check(trncclEpCombine(routing_, expertTokens.data_ptr(), static_cast<size_t>(hidden),
                          out.data_ptr(), weighted ? 1 : 0),
          call);
  }

  int64_t numTokens() const { return tokens_; }
  int64_t topk() const { return topk_; }

 private:
  std::shared_ptr<EpGroupHandle> group_;  // the group outlives its routings
  trncclEpLayout_t layout_;
  at::Tensor idx_;
  int64_t tokens_ = 0, topk_ = 0;
  trncclEpRouting_t routing_ = nullptr;
};

}  // namespace
}  // namespace trnccl::torch_ext

void bindTokenSwitch(py::module& m) {
  using trnccl::torch_ext::EpGroupHandle;
  using trnccl::torch_ext::ProcessGroupTrnccl;
  using trnccl::torch_ext::RoutingHandle;
  py::class_<EpGroupHandle, std::shared_ptr<EpGroupHandle>>(m, "EpGroup")
      .def(py::init<c10::intrusive_ptr<ProcessGroupTrnccl>, int, int, int, size_t,
                    const std::string&, const std::string&>(),
           py::arg("group"), py::arg("num_experts"), py::arg("max_dispatch_tokens_per_rank"),
           py::arg("max_recv_tokens_per_rank"), py::arg("max_token_bytes"), py::arg("dtype"),
           py::arg("mode"))
      .def_property_readonly("local_experts", &EpGroupHandle::localExperts);
  py::class_<RoutingHandle, std::shared_ptr<RoutingHandle>>(m, "EpRouting")
      .def(py::init<std::shared_ptr<EpGroupHandle>, const at::Tensor&, const std::string&>(),
           py::arg("group"), py::arg("topk_idx"), py::arg("layout"))
      .def("counts", &RoutingHandle::counts)
      .def("dispatch", &RoutingHandle::dispatch, py::arg("tokens"), py::arg("topk_weights"),
           py::arg("out_tokens"), py::arg("out_topk_weights"), py::arg("out_topk_idx"))
      .def("combine", &RoutingHandle::combine, py::arg("expert_tokens"), py::arg("out"),
           py::arg("weighted"))
      .def_property_readonly("num_tokens", &RoutingHandle::numTokens)
      .def_property_readonly("topk", &RoutingHandle::topk);
}
