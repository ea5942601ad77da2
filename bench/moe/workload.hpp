// One MoE step's inputs for the dispatch benchmark: each rank's tokens, top-k expert choice
// (uniform, or Zipf-skewed towards the low expert ids) and routing weights, and the checks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trnccl.h"

namespace trnccl::bench::moe {

struct Shape {
  size_t tokens = 2048;  // per rank
  size_t hidden = 2048;
  int topk = 4;
  int experts = 16;
  trncclDataType_t dtype = trncclBfloat16;
  trncclEpLayout_t layout = trncclEpLayoutExpertMajor;
  double zipf = 0;  // 0 = uniform
  bool fp8() const { return dtype == trncclFloat8e4m3 || dtype == trncclFloat8e5m2; }
  // What the experts return and combine sums: the payload, or bf16 for fp8 (as the engine).
  trncclDataType_t combineType() const { return fp8() ? trncclBfloat16 : dtype; }
  size_t rowBytes() const;         // a dispatched row
  size_t combineRowBytes() const;  // a row of the experts' output
};

struct Workload {
  std::vector<int64_t> topkIdx;  // tokens x topk
  std::vector<float> weights;    // tokens x topk, each row sums to 1
  std::vector<char> tokens;      // tokens x hidden of dtype
  std::vector<float> scales;     // fp8: one per token (value = element x scale)
};

Workload makeWorkload(int rank, const Shape& shape);

// An fp8 element's value (e4m3: bias 7, no infinities; e5m2: the top byte of an fp16).
float fp8ToFloat(trncclDataType_t type, uint8_t byte);
// The fp8 identity expert: rows x hidden fp8 elements times their row's scale, as bf16.
void dequantizeRows(trncclDataType_t type, const void* rows, const float* scales, size_t count,
                    size_t hidden, void* bf16Out);

// Element i of a payload buffer as a float, and back (bf16, fp16, fp32).
float loadPayload(trncclDataType_t type, const void* base, size_t i);
void storePayload(trncclDataType_t type, void* base, size_t i, float value);
// Whole rows: acc += w * row, and row = acc rounded to the payload type (typed loops).
void addScaledRow(trncclDataType_t type, float w, const void* row, float* acc, size_t n);
void storeRow(trncclDataType_t type, const float* acc, void* row, size_t n);

// With identity experts, a weighted round trip must give token x times the sum of its valid
// weights. Returns the number of elements outside the payload type's tolerance.
size_t countWrong(const Shape& shape, const Workload& w, const void* out);

bool parseDtype(const std::string& name, trncclDataType_t* type);
const char* dtypeLabel(trncclDataType_t type);

}  // namespace trnccl::bench::moe
