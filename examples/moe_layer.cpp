// A mixture-of-experts layer trained across ranks with the TokenSwitch engine (C++ wrapper):
// a fixed router picks each token's top-2 experts, dispatch sends the token to the ranks that
// hold them (expert-major: one slot per token and expert), each expert multiplies its slots by
// its own matrix, and a weighted combine brings the results back in token order. The backward
// pass reuses the routing: dispatching the output gradient hands every slot its gradient, each
// expert updates its matrix, and the loss (distance to a teacher layer) goes down.
// Run it with: build/bench/trnccl-run -np 4 build/examples/moe_layer
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <trnccl/trnccl.hpp>

namespace {

constexpr int kTokens = 64, kHidden = 16, kTopk = 2, kSteps = 30;
constexpr float kLearningRate = 40.0f;  // the loss is a mean over every rank's elements

using Matrix = std::vector<float>;  // row-major kHidden x kHidden

// y = x W for `rows` rows of kHidden.
void multiply(const float* x, const Matrix& w, float* y, size_t rows) {
  for (size_t r = 0; r < rows; ++r)
    for (int j = 0; j < kHidden; ++j) {
      float sum = 0;
      for (int i = 0; i < kHidden; ++i) sum += x[r * kHidden + i] * w[i * kHidden + j];
      y[r * kHidden + j] = sum;
    }
}

}  // namespace

int main() {
  int rank = 0, nranks = 0;
  trncclUniqueId raw{};
  if (trncclGetLaunchInfo(&rank, &nranks, &raw) != trncclSuccess) {
    std::fprintf(stderr, "%s\n", trncclGetLastError(nullptr));
    return 2;
  }
  try {
    trnccl::Comm comm(nranks, trnccl::UniqueId::fromRaw(raw), rank);
    const int experts = 2 * nranks, local = 2;
    trncclEpConfig_t config = TRNCCL_EP_CONFIG_INITIALIZER;
    config.numExperts = experts;
    config.maxDispatchTokensPerRank = kTokens;
    config.maxRecvTokensPerRank = kTokens * nranks * kTopk;  // the worst case: no overflow
    config.maxTokenBytes = kHidden * sizeof(float);
    config.payloadType = trncclFloat32;
    // Normal mode: the routing knows its counts (the expert zones) before the first dispatch.
    // (Auto would pick the low-latency mode for batches this small.)
    config.mode = trncclEpModeNormal;
    trnccl::EpGroup group(comm, config);

    // Every rank draws the same router and teacher; each expert starts from its own matrix.
    std::mt19937 shared(7), mine(100 + rank);
    std::normal_distribution<float> normal(0.0f, 0.3f);
    Matrix router(kHidden * experts), teacher(kHidden * kHidden);
    for (float& v : router) v = normal(shared);
    for (float& v : teacher) v = normal(shared);
    std::vector<Matrix> expertWeights(local, Matrix(kHidden * kHidden));
    for (Matrix& w : expertWeights)
      for (float& v : w) v = normal(mine);

    // This rank's tokens and their targets; routing: the router's top-2 and their softmax.
    std::vector<float> x(kTokens * kHidden), target(kTokens * kHidden);
    for (float& v : x) v = normal(mine) * 3;
    multiply(x.data(), teacher, target.data(), kTokens);
    std::vector<int64_t> topkIdx(kTokens * kTopk);
    std::vector<float> topkWeights(kTokens * kTopk);
    for (int t = 0; t < kTokens; ++t) {
      std::vector<std::pair<float, int>> logits(experts);
      for (int e = 0; e < experts; ++e) {
        float sum = 0;
        for (int i = 0; i < kHidden; ++i) sum += x[t * kHidden + i] * router[i * experts + e];
        logits[e] = {sum, e};
      }
      std::partial_sort(logits.begin(), logits.begin() + kTopk, logits.end(),
                        [](auto a, auto b) { return a.first > b.first; });
      const float second = std::exp(logits[1].first - logits[0].first);
      topkIdx[t * kTopk] = logits[0].second;
      topkIdx[t * kTopk + 1] = logits[1].second;
      topkWeights[t * kTopk] = 1 / (1 + second);
      topkWeights[t * kTopk + 1] = second / (1 + second);
    }
    trnccl::EpRouting routing =
        group.route(std::span<const int64_t>(topkIdx), kTopk, trncclEpLayoutExpertMajor);
    const size_t slots = routing.numRecv();
    const std::vector<int32_t> zones = routing.perExpertCounts();

    std::vector<float> received(slots * kHidden), slotWeights(slots), expertOut(slots * kHidden);
    std::vector<float> y(kTokens * kHidden), gradY(kTokens * kHidden), gradSlots(slots * kHidden);
    std::vector<float> unused(slots);
    float firstLoss = 0, loss = 0;
    for (int step = 0; step < kSteps; ++step) {
      // Forward: dispatch, each local expert on its zone, weighted combine.
      routing.dispatch(std::span<const float>(x), kHidden, std::span<const float>(topkWeights),
                       std::span<float>(received), std::span<float>(slotWeights));
      size_t begin = 0;
      for (int e = 0; e < local; ++e) {
        multiply(&received[begin * kHidden], expertWeights[e], &expertOut[begin * kHidden],
                 zones[e]);
        begin += zones[e];
      }
      routing.combine(std::span<const float>(expertOut), kHidden, std::span<float>(y),
                      /*weighted=*/true);
      // Loss: mean squared distance to the teacher, averaged over every rank's tokens.
      std::vector<float> sums{0.0f};
      for (size_t i = 0; i < y.size(); ++i) {
        const float d = y[i] - target[i];
        sums[0] += d * d;
        gradY[i] = 2 * d / (y.size() * nranks);
      }
      comm.allReduce(std::span<float>(sums));
      loss = sums[0] / (y.size() * nranks);
      if (step == 0) firstLoss = loss;
      if (rank == 0 && (step % 5 == 0 || step == kSteps - 1))
        std::printf("step %2d  loss %.5f\n", step, loss);
      // Backward: combine's gradient is a dispatch of dL/dy (each slot times its weight); each
      // expert's matrix gradient is its inputs' transpose times its slots' gradients.
      routing.dispatch(std::span<const float>(gradY), kHidden, std::span<const float>(),
                       std::span<float>(gradSlots), std::span<float>(unused));
      begin = 0;
      for (int e = 0; e < local; ++e) {
        Matrix grad(kHidden * kHidden, 0.0f);
        for (size_t s = begin; s < begin + zones[e]; ++s)
          for (int i = 0; i < kHidden; ++i)
            for (int j = 0; j < kHidden; ++j)
              grad[i * kHidden + j] +=
                  received[s * kHidden + i] * slotWeights[s] * gradSlots[s * kHidden + j];
        for (int k = 0; k < kHidden * kHidden; ++k) expertWeights[e][k] -= kLearningRate * grad[k];
        begin += zones[e];
      }
    }
    if (rank == 0)
      std::printf("rank 0: %zu slots over %d local experts; loss %.5f -> %.5f\n", slots, local,
                  firstLoss, loss);
    if (!(loss < 0.5f * firstLoss)) {
      std::fprintf(stderr, "rank %d: the loss did not halve (%.5f -> %.5f)\n", rank, firstLoss,
                   loss);
      return 1;
    }
  } catch (const trnccl::Error& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    return 1;
  }
  return 0;
}
