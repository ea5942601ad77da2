// Data types and reduction ops as the internal code sees them, with the scalar fp16/bf16
// conversions shared by the kernels, the tests' reference and the tools.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "trnccl.h"

namespace trnccl {

size_t dtypeSize(trncclDataType_t type);  // 0 for an unknown type
const char* dtypeName(trncclDataType_t type);
const char* redOpName(trncclRedOp_t op);
bool isValidDtype(int type);
bool isValidRedOp(int op);
// fp8 types move data but cannot be reduced.
bool isReducible(trncclDataType_t type);

inline float bf16ToFloat(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even; NaN stays a quiet NaN.
inline uint16_t floatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  uint32_t nan = (bits >> 16) | 0x40u;
  bool isNan = (bits & 0x7FFFFFFFu) > 0x7F800000u;
  return static_cast<uint16_t>(isNan ? nan : rounded);
}

inline float fp16ToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1Fu;
  uint32_t mantissa = h & 0x3FFu;
  uint32_t bits;
  if (exponent == 0x1F) {
    bits = sign | 0x7F800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {                                                              // subnormal half: normalise
    float value = static_cast<float>(mantissa) * (1.0f / 16777216.0f);  // 2^-24
    std::memcpy(&bits, &value, 4);
    bits |= sign;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even, overflow to infinity, NaN kept.
inline uint16_t floatToFp16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint32_t sign = (bits >> 16) & 0x8000u;
  uint32_t absBits = bits & 0x7FFFFFFFu;
  if (absBits > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u);   // NaN
  if (absBits >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520: inf
  if (absBits < 0x38800000u) {  // below the smallest normal half: subnormal or zero
    float absValue;
    std::memcpy(&absValue, &absBits, 4);
    // Adding 0.5 moves the value so that the float's rounding produces the half subnormal.
    float shifted = absValue + 0.5f;
    uint32_t shiftedBits;
    std::memcpy(&shiftedBits, &shifted, 4);
    return static_cast<uint16_t>(sign | (shiftedBits - 0x3F000000u));
  }
  uint32_t mantissaOdd = (absBits >> 13) & 1u;
  absBits += 0xC8000FFFu + mantissaOdd;  // rebias exponent (-112 << 23) and round
  return static_cast<uint16_t>(sign | (absBits >> 13));
}

}  // namespace trnccl
