// The collectives of ProcessGroupTrnccl: torch's argument shapes (one tensor, lists of
// tensors, split sizes) turned into one trnccl call each, with staging where torch's shape
// is not one contiguous buffer.
#include <ATen/ATen.h>

#include <numeric>
#include <stdexcept>

#include "process_group.hpp"
#include "tensors.hpp"

namespace trnccl::torch_ext {

namespace {

// The buffer a call works in for `tensor`, and how its result reaches `tensor` afterwards.
struct InPlace {
  at::Tensor buffer;
  Finisher copyBack;  // empty when buffer is tensor itself
};
InPlace inPlace(const at::Tensor& tensor) {
  if (tensor.is_contiguous()) return {tensor, {}};
  at::Tensor buffer = tensor.contiguous();
  at::Tensor target = tensor;
  return {buffer, [target, buffer]() mutable { target.copy_(buffer); }};
}

void checkOne(const char* call, const std::vector<at::Tensor>& tensors) {
  checkCount(call, "tensors (one per process; multi-tensor calls are not supported)",
             tensors.size(), 1);
  checkCpuDense(call, "tensor", tensors[0]);
}

void checkRoot(const char* call, int64_t root, int size) {
  if (root < 0 || root >= size)
    failArgument(std::string(call) + ": root rank " + std::to_string(root) +
                 " is outside the group of " + std::to_string(size));
}

// Flattens tensors of one dtype into one new contiguous 1-D tensor.
at::Tensor flatten(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> flat;
  flat.reserve(tensors.size());
  for (const auto& t : tensors) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

// Copies consecutive pieces of flat into targets (each takes its own numel).
Finisher scatterInto(at::Tensor flat, std::vector<at::Tensor> targets) {
  return [flat, targets]() mutable {
    int64_t offset = 0;
    for (auto& t : targets) {
      t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  };
}

// True when targets are consecutive, contiguous pieces of one buffer, in order: a call can
// then write them directly (torch users often pass list(flat.chunk(n))).
bool consecutive(const std::vector<at::Tensor>& targets) {
  if (targets.empty() || !targets[0].is_contiguous()) return false;
  auto* next = static_cast<char*>(targets[0].data_ptr());
  for (const auto& t : targets) {
    if (!t.is_contiguous() || static_cast<char*>(t.data_ptr()) != next) return false;
    next += t.numel() * t.element_size();
  }
  return true;
}

std::vector<size_t> displacements(const std::vector<size_t>& counts) {
  std::vector<size_t> displs(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) displs[i] = displs[i - 1] + counts[i - 1];
  return displs;
}

// One call's submission, in trnccl's non-blocking form or (inside a coalesced batch, where
// the request is null) its blocking form: the shape every collective below hands launch().
ProcessGroupTrnccl::Submit allGatherCall(const void* send, void* recv, size_t count,
                                         trncclDataType_t type, trncclComm_t comm) {
  return [=](trncclRequest_t* r) {
    return r ? trncclAllGatherAsync(send, recv, count, type, comm, r)
             : trncclAllGather(send, recv, count, type, comm);
  };
}

// An all-to-all-v whose per-peer blocks are packed in rank order (displacements derived).
ProcessGroupTrnccl::Submit allToAllvCall(const void* send, std::vector<size_t> sendCounts,
                                         void* recv, std::vector<size_t> recvCounts,
                                         trncclDataType_t type, trncclComm_t comm) {
  std::vector<size_t> sendDispls = displacements(sendCounts);
  std::vector<size_t> recvDispls = displacements(recvCounts);
  return [=](trncclRequest_t* r) {
    return r ? trncclAllToAllvAsync(send, sendCounts.data(), sendDispls.data(), recv,
                                    recvCounts.data(), recvDispls.data(), type, comm, r)
             : trncclAllToAllv(send, sendCounts.data(), sendDispls.data(), recv, recvCounts.data(),
                               recvDispls.data(), type, comm);
  };
}

// Per-peer element counts of an all-to-all side: split sizes in rows of dim 0, or (empty)
// equal pieces.
std::vector<size_t> splitCounts(const char* side, const at::Tensor& t,
                                const std::vector<int64_t>& splits, int size, size_t perItem) {
  std::vector<size_t> counts(size);
  if (splits.empty()) {
    if (t.numel() % size != 0)
      failArgument(std::string("all_to_all: the ") + side + " tensor's " +
                   std::to_string(t.numel()) + " elements do not split equally over " +
                   std::to_string(size) + " ranks; pass split sizes");
    for (auto& c : counts) c = t.numel() / size * perItem;
    return counts;
  }
  if (static_cast<int>(splits.size()) != size)
    failArgument(std::string("all_to_all: ") + std::to_string(splits.size()) + " " + side +
                 " split sizes for a group of " + std::to_string(size));
  const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  int64_t total = 0;
  for (int64_t s : splits) {
    if (s < 0) failArgument(std::string("all_to_all: a negative ") + side + " split size");
    total += s;
  }
  if (total != rows)
    failArgument(std::string("all_to_all: the ") + side + " split sizes add up to " +
                 std::to_string(total) + " rows but the tensor has " + std::to_string(rows));
  const size_t rowElements = rows == 0 ? 0 : t.numel() / rows;
  for (int i = 0; i < size; ++i) counts[i] = splits[i] * rowElements * perItem;
  return counts;
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupTrnccl::broadcast(std::vector<at::Tensor>& tensors,
                                                             const c10d::BroadcastOptions& opts) {
  checkOne("broadcast", tensors);
  checkRoot("broadcast", opts.rootRank, getSize());
  if (opts.rootTensor != 0)
    failArgument("broadcast: rootTensor must be 0 (one tensor per process)");
  if (tensors[0].numel() == 0) return finished(c10d::OpType::BROADCAST, "broadcast", tensors);
  InPlace target = inPlace(tensors[0]);
  const MovedType moved = movedType(target.buffer);
  const size_t count = target.buffer.numel() * moved.elementsPerItem;
  void* data = target.buffer.data_ptr();
  const int root = static_cast<int>(opts.rootRank);
  trncclComm_t comm = comm_;
  return launch(
      c10d::OpType::BROADCAST, "broadcast",
      [=](trncclRequest_t* r) {
        return r ? trncclBroadcastAsync(data, data, count, moved.type, root, comm, r)
                 : trncclBroadcast(data, data, count, moved.type, root, comm);
      },
      {target.buffer}, tensors, target.copyBack);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTrnccl::allreduce(std::vector<at::Tensor>& tensors,
                                                             const c10d::AllreduceOptions& opts) {
  checkOne("all_reduce", tensors);
  const Reduction red = reduction("all_reduce", tensors[0], opts.reduceOp);
  if (tensors[0].numel() == 0) return finished(c10d::OpType::ALLREDUCE, "all_reduce", tensors);
  InPlace target = inPlace(tensors[0]);
  const size_t count = target.buffer.numel() * red.elementsPerItem;
  void* data = target.buffer.data_ptr();
  trncclComm_t comm = comm_;
  return launch(
      c10d::OpType::ALLREDUCE, "all_reduce",
      [=](trncclRequest_t* r) {
        return r ? trncclAllReduceAsync(data, data, count, red.type, red.op, comm, r)
                 : trncclAllReduce(data, data, count, red.type, red.op, comm);
      },
      {target.buffer}, tensors, target.copyBack);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTrnccl::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  if (tensors.empty()) failArgument("all_reduce_coalesced: no tensors");
  for (size_t i = 0; i < tensors.size(); ++i) {
    checkCpuDense("all_reduce_coalesced", "tensor", tensors[i]);
    if (tensors[i].scalar_type() != tensors[0].scalar_type())
      failArgument("all_reduce_coalesced: tensor " + std::to_string(i) + " is " +
                   dtypeName(tensors[i]) + " but tensor 0 is " + dtypeName(tensors[0]) +
                   " (one dtype per call)");
  }
  const Reduction red = reduction("all_reduce_coalesced", tensors[0], opts.reduceOp);
  at::Tensor flat = flatten(tensors);
  if (flat.numel() == 0)
    return finished(c10d::OpType::ALLREDUCE_COALESCED, "all_reduce_coalesced", tensors);
  const size_t count = flat.numel() * red.elementsPerItem;
  void* data = flat.data_ptr();
  trncclComm_t comm = comm_;
  return launch(
      c10d::OpType::ALLREDUCE_COALESCED, "all_reduce_coalesced",
      [=](trncclRequest_t* r) {
        return r ? trncclAllReduceAsync(data, data, count, red.type, red.op, comm, r)
                 : trncclAllReduce(data, data, count, red.type, red.op, comm);
      },
      {flat}, tensors, scatterInto(flat, tensors));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTrnccl::reduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::ReduceOptions& opts) {
  checkOne("reduce", tensors);
  checkRoot("reduce", opts.rootRank, getSize());
  const Reduction red = reduction("reduce", tensors[0], opts.reduceOp);
  if (tensors[0].numel() == 0) return finished(c10d::OpType::REDUCE, "reduce", tensors);
  InPlace target = inPlace(tensors[0]);
  const size_t count = target.buffer.numel() * red.elementsPerItem;
  void* data = target.buffer.data_ptr();
  const int root = static_cast<int>(opts.rootRank);
  trncclComm_t comm = comm_;
  return launch(
      c10d::OpType::REDUCE, "reduce",
      [=](trncclRequest_t* r) {
        return r ? trncclReduceAsync(data, data, count, red.type, red.op, root, comm, r)
                 : trncclReduce(data, data, count, red.type, red.op, root, comm);
      },
      {target.buffer}, tensors, root == getRank() ? target.copyBack : Finisher{});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTrnccl::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& /*opts*/) {
  checkOne("all_gather", inputs);
  checkCount("all_gather", "output lists", outputs.size(), 1);
  std::vector<at::Tensor>& targets = outputs[0];
  checkCount("all_gather", "output tensors (one per rank)", targets.size(), getSize());
  checkSameShape("all_gather", "output", targets, inputs[0]);
  if (inputs[0].numel() == 0) return finished(c10d::OpType::ALLGATHER, "all_gather", targets);
  at::Tensor source = contiguousOf(inputs[0]);
  const bool direct = consecutive(targets);
  at::Tensor gathered =
      direct ? targets[0] : at::empty({source.numel() * getSize()}, source.options());
  const MovedType moved = movedType(source);
  const size_t count = source.numel() * moved.elementsPerItem;
  const void* send = source.data_ptr();
  void* recv = gathered.data_ptr();
  std::vector<at::Tensor> keep = targets;
  keep.push_back(source);
  keep.push_back(gathered);
  return launch(c10d::OpType::ALLGATHER, "all_gather",
                allGatherCall(send, recv, count, moved.type, comm_), std::move(keep), targets,
                direct ? Finisher{} : scatterInto(gathered, targets));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTrnccl::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& /*opts*/) {
  checkCpuDense("_allgather_base", "input", input);
  checkCpuDense("_allgather_base", "output", output);
  if (output.scalar_type() != input.scalar_type())
    failArgument("_allgather_base: output is " + dtypeName(output) + " but input is " +
                 dtypeName(input));
  if (output.numel() != input.numel() * getSize())
    failArgument("_allgather_base: output has " + std::to_string(output.numel()) +
                 " elements, expected world size (" + std::to_string(getSize()) + ") x input (" +
                 std::to_string(input.numel()) + ")");
  if (input.numel() == 0)
    return finished(c10d::OpType::_ALLGATHER_BASE, "_allgather_base", {output});
  at::Tensor source = contiguousOf(input);
  InPlace target = inPlace(output);
  const MovedType moved = movedType(source);
  const size_t count = source.numel() * moved.elementsPerItem;
  const void* send = source.data_ptr();
  void* recv = target.buffer.data_ptr();
  return launch(c10d::OpType::_ALLGATHER_BASE, "_allgather_base",
                allGatherCall(send, recv, count, moved.type, comm_), {source, target.buffer},
                {output}, target.copyBack);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTrnccl::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& /*opts*/) {
  if (inputs.empty()) failArgument("all_gather_coalesced: no input tensors");
  checkCount("all_gather_coalesced", "output lists (one per rank)", outputs.size(), getSize());
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkCpuDense("all_gather_coalesced", "input", inputs[i]);
    if (inputs[i].scalar_type() != inputs[0].scalar_type())
      failArgument("all_gather_coalesced: input " + std::to_string(i) + " is " +
                   dtypeName(inputs[i]) + " but input 0 is " + dtypeName(inputs[0]) +
                   " (one dtype per call)");
  }
  std::vector<at::Tensor> targets;
  for (auto& list : outputs) {
    checkCount("all_gather_coalesced", "output tensors per rank", list.size(), inputs.size());
    for (size_t i = 0; i < list.size(); ++i) {
      std::vector<at::Tensor> one{list[i]};
      checkSameShape("all_gather_coalesced", "output", one, inputs[i]);
      targets.push_back(list[i]);
    }
  }
  at::Tensor source = flatten(inputs);
  if (source.numel() == 0)
    return finished(c10d::OpType::ALLGATHER_COALESCED, "all_gather_coalesced", targets);
  at::Tensor gathered = at::empty({source.numel() * getSize()}, source.options());
  const MovedType moved = movedType(source);
  const size_t count = source.numel() * moved.elementsPerItem;
  const void* send = source.data_ptr();
  void* recv = gathered.data_ptr();
  return launch(c10d::OpType::ALLGATHER_COALESCED, "all_gather_coalesced",
                allGatherCall(send, recv, count, moved.type, comm_), {source, gathered}, targets,
                scatterInto(gathered, targets));
}

// gather and scatter are all-to-all-v calls in which only the root's row (or column) is
// non-empty: one trnccl call, non-blocking like the others.
c10::intrusive_ptr<c10d::Work> ProcessGroupTrnccl::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  checkOne("gather", inputs);
  checkRoot("gather", opts.rootRank, getSize());
  const int root = static_cast<int>(opts.rootRank);
  const bool isRoot = root == getRank();
  std::vector<at::Tensor> targets;
  if (isRoot) {
    checkCount("gather", "output lists on the root", outputs.size(), 1);
    targets = outputs[0];
    checkCount("gather", "output tensors on the root (one per rank)", targets.size(), getSize());
    checkSameShape("gather", "output", targets, inputs[0]);
  } else if (!outputs.empty() && !outputs[0].empty()) {
    failArgument("gather: output tensors are given on rank " + std::to_string(getRank()) +
                 ", which is not the root (" + std::to_string(root) + ")");
  }
  at::Tensor source = contiguousOf(inputs[0]);
  const MovedType moved = movedType(source);
  const size_t count = source.numel() * moved.elementsPerItem;
  std::vector<size_t> sendCounts(getSize(), 0), recvCounts(getSize(), isRoot ? count : 0);
  sendCounts[root] = count;
  at::Tensor gathered = at::empty({isRoot ? source.numel() * getSize() : 0}, source.options());
  const void* send = dataOf(source);
  void* recv = dataOf(gathered);
  return launch(c10d::OpType::GATHER, "gather",
                allToAllvCall(send, sendCounts, recv, recvCounts, moved.type, comm_),
                {source, gathered}, targets, isRoot ? scatterInto(gathered, targets) : Finisher{});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTrnccl::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  checkOne("scatter", outputs);
  checkRoot("scatter", opts.rootRank, getSize());
  const int root = static_cast<int>(opts.rootRank);
  const bool isRoot = root == getRank();
  at::Tensor source = at::empty({0}, outputs[0].options());
  if (isRoot) {
    checkCount("scatter", "input lists on the root", inputs.size(), 1);
    checkCount("scatter", "input tensors on the root (one per rank)", inputs[0].size(), getSize());
    checkSameShape("scatter", "input", inputs[0], outputs[0]);
    source = flatten(inputs[0]);
  } else if (!inputs.empty() && !inputs[0].empty()) {
    failArgument("scatter: input tensors are given on rank " + std::to_string(getRank()) +
                 ", which is not the root (" + std::to_string(root) + ")");
  }
  InPlace target = inPlace(outputs[0]);
  const MovedType moved = movedType(target.buffer);
  const size_t count = target.buffer.numel() * moved.elementsPerItem;
  std::vector<size_t> sendCounts(getSize(), isRoot ? count : 0), recvCounts(getSize(), 0);
  recvCounts[root] = count;
  const void* send = dataOf(source);
  void* recv = dataOf(target.buffer);
  return launch(c10d::OpType::SCATTER, "scatter",
                allToAllvCall(send, sendCounts, recv, recvCounts, moved.type, comm_),
                {source, target.buffer}, outputs, target.copyBack);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTrnccl::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  checkOne("reduce_scatter", outputs);
  checkCount("reduce_scatter", "input lists", inputs.size(), 1);
  checkCount("reduce_scatter", "input tensors (one per rank)", inputs[0].size(), getSize());
  checkSameShape("reduce_scatter", "input", inputs[0], outputs[0]);
  const Reduction red = reduction("reduce_scatter", outputs[0], opts.reduceOp);
  if (outputs[0].numel() == 0)
    return finished(c10d::OpType::REDUCE_SCATTER, "reduce_scatter", outputs);
  at::Tensor source = flatten(inputs[0]);
  InPlace target = inPlace(outputs[0]);
  const size_t count = target.buffer.numel() * red.elementsPerItem;
  const void* send = source.data_ptr();
  void* recv = target.buffer.data_ptr();
  trncclComm_t comm = comm_;
  return launch(
      c10d::OpType::REDUCE_SCATTER, "reduce_scatter",
      [=](trncclRequest_t* r) {
        return r ? trncclReduceScatterAsync(send, recv, count, red.type, red.op, comm, r)
                 : trncclReduceScatter(send, recv, count, red.type, red.op, comm);
      },
      {source, target.buffer}, outputs, target.copyBack);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTrnccl::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  checkCpuDense("_reduce_scatter_base", "input", input);
  checkCpuDense("_reduce_scatter_base", "output", output);
  if (output.scalar_type() != input.scalar_type())
    failArgument("_reduce_scatter_base: output is " + dtypeName(output) + " but input is " +
                 dtypeName(input));
  if (input.numel() != output.numel() * getSize())
    failArgument("_reduce_scatter_base: input has " + std::to_string(input.numel()) +
                 " elements, expected world size (" + std::to_string(getSize()) + ") x output (" +
                 std::to_string(output.numel()) + ")");
  const Reduction red = reduction("_reduce_scatter_base", output, opts.reduceOp);
  if (output.numel() == 0)
    return finished(c10d::OpType::_REDUCE_SCATTER_BASE, "_reduce_scatter_base", {output});
  at::Tensor source = contiguousOf(input);
  InPlace target = inPlace(output);
  const size_t count = target.buffer.numel() * red.elementsPerItem;
  const void* send = source.data_ptr();
  void* recv = target.buffer.data_ptr();
  trncclComm_t comm = comm_;
  return launch(
      c10d::OpType::_REDUCE_SCATTER_BASE, "_reduce_scatter_base",
      [=](trncclRequest_t* r) {
        return r ? trncclReduceScatterAsync(send, recv, count, red.type, red.op, comm, r)
                 : trncclReduceScatter(send, recv, count, red.type, red.op, comm);
      },
      {source, target.buffer}, {output}, target.copyBack);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTrnccl::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplitSizes,
    std::vector<int64_t>& inputSplitSizes, const c10d::AllToAllOptions& /*opts*/) {
  checkCpuDense("all_to_all", "input", input);
  checkCpuDense("all_to_all", "output", output);
  if (output.scalar_type() != input.scalar_type())
    failArgument("all_to_all: output is " + dtypeName(output) + " but input is " +
                 dtypeName(input));
  const MovedType moved = movedType(input);
  const auto sendCounts =
      splitCounts("input", input, inputSplitSizes, getSize(), moved.elementsPerItem);
  const auto recvCounts =
      splitCounts("output", output, outputSplitSizes, getSize(), moved.elementsPerItem);
  // A source that is the output itself is staged (trnccl's all-to-all-v reads and writes
  // different buffers).
  at::Tensor source = input.is_same(output) ? input.clone() : contiguousOf(input);
  InPlace target = inPlace(output);
  const void* send = dataOf(source);
  void* recv = dataOf(target.buffer);
  return launch(c10d::OpType::ALLTOALL_BASE, "all_to_all",
                allToAllvCall(send, sendCounts, recv, recvCounts, moved.type, comm_),
                {source, target.buffer}, {output}, target.copyBack);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTrnccl::alltoall(std::vector<at::Tensor>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllToAllOptions& /*opts*/) {
  checkCount("all_to_all", "input tensors (one per rank)", inputs.size(), getSize());
  checkCount("all_to_all", "output tensors (one per rank)", outputs.size(), getSize());
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkCpuDense("all_to_all", "input", inputs[i]);
    checkCpuDense("all_to_all", "output", outputs[i]);
    if (inputs[i].scalar_type() != inputs[0].scalar_type() ||
        outputs[i].scalar_type() != inputs[0].scalar_type())
      failArgument("all_to_all: every input and output must be " + dtypeName(inputs[0]));
  }
  const MovedType moved = movedType(inputs[0]);
  std::vector<size_t> sendCounts, recvCounts;
  for (const auto& t : inputs) sendCounts.push_back(t.numel() * moved.elementsPerItem);
  for (const auto& t : outputs) recvCounts.push_back(t.numel() * moved.elementsPerItem);
  at::Tensor source = flatten(inputs);
  const int64_t received =
      std::accumulate(outputs.begin(), outputs.end(), int64_t{0},
                      [](int64_t n, const at::Tensor& t) { return n + t.numel(); });
  at::Tensor gathered = at::empty({received}, outputs[0].options());
  const void* send = dataOf(source);
  void* recv = dataOf(gathered);
  return launch(c10d::OpType::ALLTOALL, "all_to_all",
                allToAllvCall(send, sendCounts, recv, recvCounts, moved.type, comm_),
                {source, gathered}, outputs, scatterInto(gathered, outputs));
}

}  // namespace trnccl::torch_ext
