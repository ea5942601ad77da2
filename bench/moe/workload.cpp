#include "moe/workload.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "core/dtype.hpp"

namespace trnccl::bench::moe {

size_t Shape::rowBytes() const {
  return hidden * dtypeSize(dtype);
}

size_t Shape::combineRowBytes() const {
  return hidden * dtypeSize(combineType());
}

float fp8ToFloat(trncclDataType_t type, uint8_t byte) {
  if (type == trncclFloat8e5m2) return fp16ToFloat(static_cast<uint16_t>(byte << 8));
  const float sign = byte & 0x80 ? -1.0f : 1.0f;
  const int exponent = (byte >> 3) & 0xF, mantissa = byte & 7;
  if (exponent == 0) return sign * std::ldexp(mantissa / 8.0f, -6);  // subnormal
  return sign * std::ldexp(1.0f + mantissa / 8.0f, exponent - 7);
}

void dequantizeRows(trncclDataType_t type, const void* rows, const float* scales, size_t count,
                    size_t hidden, void* bf16Out) {
  // Per row, the 256 possible values already scaled and rounded: one lookup per element, as a
  // fused dequantizing kernel would cost next to the copy.
  float table[256];
  for (int b = 0; b < 256; ++b) table[b] = fp8ToFloat(type, static_cast<uint8_t>(b));
  const uint8_t* in = static_cast<const uint8_t*>(rows);
  uint16_t* out = static_cast<uint16_t*>(bf16Out);
  uint16_t scaled[256];
  for (size_t r = 0; r < count; ++r) {
    for (int b = 0; b < 256; ++b) scaled[b] = floatToBf16(table[b] * scales[r]);
    for (size_t h = 0; h < hidden; ++h) out[r * hidden + h] = scaled[in[r * hidden + h]];
  }
}

// A random finite fp8 byte (e4m3: 0x7f/0xff are NaN; e5m2: exponent 31 is inf/NaN).
uint8_t randomFp8(trncclDataType_t type, std::mt19937_64& rng) {
  for (;;) {
    const uint8_t b = static_cast<uint8_t>(rng());
    if (type == trncclFloat8e4m3 ? (b & 0x7F) != 0x7F : (b & 0x7C) != 0x7C) return b;
  }
}

float loadPayload(trncclDataType_t type, const void* base, size_t i) {
  switch (type) {
    case trncclBfloat16: return bf16ToFloat(static_cast<const uint16_t*>(base)[i]);
    case trncclFloat16: return fp16ToFloat(static_cast<const uint16_t*>(base)[i]);
    default: return static_cast<const float*>(base)[i];
  }
}

void storePayload(trncclDataType_t type, void* base, size_t i, float value) {
  switch (type) {
    case trncclBfloat16: static_cast<uint16_t*>(base)[i] = floatToBf16(value); break;
    case trncclFloat16: static_cast<uint16_t*>(base)[i] = floatToFp16(value); break;
    default: static_cast<float*>(base)[i] = value;
  }
}

// Cloned per instruction set like the engine's loops (src/moe/combine.cpp), so that the
// baseline's weighted sum is as fast as a framework's kernel would be.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define BENCH_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define BENCH_CLONES
#endif

BENCH_CLONES void addScaledRow(trncclDataType_t type, float w, const void* row, float* acc,
                               size_t n) {
  const uint16_t* half = static_cast<const uint16_t*>(row);
  if (type == trncclBfloat16)
    for (size_t i = 0; i < n; ++i) acc[i] += w * bf16ToFloat(half[i]);
  else if (type == trncclFloat16)
    for (size_t i = 0; i < n; ++i) acc[i] += w * fp16ToFloat(half[i]);
  else
    for (size_t i = 0; i < n; ++i) acc[i] += w * static_cast<const float*>(row)[i];
}

BENCH_CLONES void storeRow(trncclDataType_t type, const float* acc, void* row, size_t n) {
  uint16_t* half = static_cast<uint16_t*>(row);
  if (type == trncclBfloat16)
    for (size_t i = 0; i < n; ++i) half[i] = floatToBf16(acc[i]);
  else if (type == trncclFloat16)
    for (size_t i = 0; i < n; ++i) half[i] = floatToFp16(acc[i]);
  else
    std::memcpy(row, acc, n * sizeof(float));
}

Workload makeWorkload(int rank, const Shape& s) {
  std::mt19937_64 rng(0x5eed + rank * 1000003ull + s.tokens * 31 + s.topk);
  // Expert popularity p(e) ~ (e + 1)^-zipf; top-k distinct experts drawn without replacement.
  std::vector<double> popularity(s.experts);
  for (int e = 0; e < s.experts; ++e) popularity[e] = std::pow(e + 1.0, -s.zipf);
  Workload w;
  w.topkIdx.assign(s.tokens * s.topk, -1);
  w.weights.assign(s.tokens * s.topk, 0.0f);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for (size_t t = 0; t < s.tokens; ++t) {
    std::vector<double> left = popularity;
    double total = 0;
    for (double p : left) total += p;
    float weightSum = 0;
    for (int k = 0; k < s.topk; ++k) {
      double pick = uniform(rng) * total;
      int e = 0;
      while (e + 1 < s.experts && (pick -= left[e]) > 0) ++e;
      while (left[e] == 0) e = (e + 1) % s.experts;  // rounding landed on a taken expert
      total -= left[e];
      left[e] = 0;
      w.topkIdx[t * s.topk + k] = e;
      w.weights[t * s.topk + k] = static_cast<float>(0.5 + uniform(rng));
      weightSum += w.weights[t * s.topk + k];
    }
    for (int k = 0; k < s.topk; ++k) w.weights[t * s.topk + k] /= weightSum;
  }
  w.tokens.resize(s.tokens * s.rowBytes());
  if (s.fp8()) {
    std::uniform_real_distribution<float> scale(0.01f, 0.1f);
    w.scales.resize(s.tokens);
    for (float& v : w.scales) v = scale(rng);
    for (char& b : w.tokens) b = static_cast<char>(randomFp8(s.dtype, rng));
    return w;
  }
  std::uniform_real_distribution<float> value(-2.0f, 2.0f);
  for (size_t i = 0; i < s.tokens * s.hidden; ++i)
    storePayload(s.dtype, w.tokens.data(), i, value(rng));
  return w;
}

size_t countWrong(const Shape& s, const Workload& w, const void* out) {
  const trncclDataType_t outType = s.combineType();
  const double tolerance = outType == trncclFloat32 ? 1e-5 : outType == trncclFloat16 ? 2e-3 : 2e-2;
  size_t wrong = 0;
  for (size_t t = 0; t < s.tokens; ++t) {
    double scale = 0;
    for (int k = 0; k < s.topk; ++k)
      if (w.topkIdx[t * s.topk + k] >= 0) scale += w.weights[t * s.topk + k];
    for (size_t h = 0; h < s.hidden; ++h) {
      const size_t i = t * s.hidden + h;
      const double x = s.fp8() ? fp8ToFloat(s.dtype, static_cast<uint8_t>(w.tokens[i])) *
                                     static_cast<double>(w.scales[t])
                               : loadPayload(s.dtype, w.tokens.data(), i);
      const double got = loadPayload(outType, out, i);
      if (std::fabs(got - x * scale) > tolerance * (std::fabs(x) + 1e-3)) ++wrong;
    }
  }
  return wrong;
}

bool parseDtype(const std::string& name, trncclDataType_t* type) {
  if (name == "bf16" || name == "bfloat16")
    *type = trncclBfloat16;
  else if (name == "fp16" || name == "half" || name == "float16")
    *type = trncclFloat16;
  else if (name == "fp32" || name == "float" || name == "float32")
    *type = trncclFloat32;
  else if (name == "fp8" || name == "fp8_e4m3" || name == "f8e4m3")
    *type = trncclFloat8e4m3;
  else if (name == "fp8_e5m2" || name == "f8e5m2")
    *type = trncclFloat8e5m2;
  else
    return false;
  return true;
}

const char* dtypeLabel(trncclDataType_t type) {
  return type == trncclBfloat16     ? "bf16"
         : type == trncclFloat16    ? "fp16"
         : type == trncclFloat8e4m3 ? "fp8_e4m3"
         : type == trncclFloat8e5m2 ? "fp8_e5m2"
                                    : "fp32";
}

}  // namespace trnccl::bench::moe
