#include "support/reference.hpp"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>

namespace trnccl::testing {
namespace {

// bfloat16 round-to-nearest-even, written as "pick the nearer of the two neighbours" so that
// it shares no code with the library's bit-trick version.
uint16_t toBf16(float f) {
  if (std::isnan(f)) return 0x7FC0;
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint32_t down = bits & 0xFFFF0000u;
  uint32_t up = down + 0x10000u;
  float lo, hi;
  std::memcpy(&lo, &down, 4);
  std::memcpy(&hi, &up, 4);
  // Past the largest bf16 the upper neighbour is infinity, which rounds like 2^128.
  double hiValue = std::isinf(hi) ? std::copysign(std::ldexp(1.0, 128), f) : hi;
  double dLo = std::fabs(static_cast<double>(f) - lo), dHi = std::fabs(hiValue - f);
  uint32_t pick = dLo < dHi ? down : dHi < dLo ? up : ((down >> 16) & 1 ? up : down);
  return static_cast<uint16_t>(pick >> 16);
}
float fromBf16(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Values come from a cheap hash of (rank, index, salt): the sequence looks irregular to the
// library (no chunk-sized period) but costs about a cycle an element. The hash is 32-bit so
// that the fill loops below vectorize (filling the inputs of the large counts was most of the
// collective tests' CPU time). Every value is an integer in [-100, 200], exact in every
// element type, fp16 and bf16 included (checked against the compiler's conversions for every
// integer in [-256, 256] when this was written).
template <trncclRedOp_t Op>
int32_t smallValue(bool isUnsigned, int rank, size_t i, uint64_t salt) {
  uint32_t h = static_cast<uint32_t>(i + salt) * 2654435761u + static_cast<uint32_t>(rank) * 40503u;
  h ^= h >> 15;
  if constexpr (Op == trncclProd) {
    // 1, 1, -1 (signed) or 1 (unsigned), 2
    uint32_t pick = h & 3;
    return pick == 3 ? 2 : pick == 2 && !isUnsigned ? -1 : 1;
  } else if constexpr (Op == trncclMax || Op == trncclMin) {
    return static_cast<int32_t>(h % 201) - (isUnsigned ? 0 : 100);
  } else {  // sum, avg
    return static_cast<int32_t>(h % 5) - (isUnsigned ? 0 : 2);
  }
}

// Calls fill with the op as a compile-time constant, so that the per-element loop has no
// switch in it.
template <typename Fill>
void withOp(trncclRedOp_t op, Fill fill) {
  switch (op) {
    case trncclProd: return fill(std::integral_constant<trncclRedOp_t, trncclProd>{});
    case trncclMax: return fill(std::integral_constant<trncclRedOp_t, trncclMax>{});
    case trncclMin: return fill(std::integral_constant<trncclRedOp_t, trncclMin>{});
    default: return fill(std::integral_constant<trncclRedOp_t, trncclSum>{});
  }
}

// The encodings of a small integer (|v| <= 256, exact in every type): plain casts, and for the
// 16-bit floats the fp32 encoding's fields moved over (bit operations, so the loops vectorize;
// fp16 conversions otherwise go through libgcc one element at a time).
uint16_t bf16Of(int32_t v) {
  return static_cast<uint16_t>(std::bit_cast<uint32_t>(float(v)) >> 16);
}
uint16_t fp16Of(int32_t v) {
  uint32_t bits = std::bit_cast<uint32_t>(float(v));
  uint32_t sign = (bits >> 16) & 0x8000u;
  uint32_t exponent = ((bits >> 23) & 0xFFu) - 127u + 15u;
  uint32_t mantissa = (bits >> 13) & 0x3FFu;
  return static_cast<uint16_t>(v == 0 ? 0u : sign | (exponent << 10) | mantissa);
}

template <typename T, typename Encode>
void fillWith(char* out, bool isUnsigned, trncclRedOp_t op, int rank, size_t begin, size_t count,
              uint64_t salt, Encode encode) {
  T* typed = reinterpret_cast<T*>(out);
  withOp(op, [&](auto opConstant) {
    constexpr trncclRedOp_t kOp = decltype(opConstant)::value;
    for (size_t i = 0; i < count; ++i)
      typed[i] = encode(smallValue<kOp>(isUnsigned, rank, begin + i, salt));
  });
}

template <typename T>
void fillTyped(char* out, bool isUnsigned, trncclRedOp_t op, int rank, size_t begin, size_t count,
               uint64_t salt) {
  fillWith<T>(out, isUnsigned, op, rank, begin, count, salt,
              [](int32_t v) { return static_cast<T>(v); });
}

template <typename T>
void reduceInts(const std::vector<const Bytes*>& inputs, size_t offset, size_t count,
                trncclRedOp_t op, char* out) {
  using U = std::make_unsigned_t<T>;
  T* result = reinterpret_cast<T*>(out);
  int n = static_cast<int>(inputs.size());
  std::vector<const T*> in;
  for (const Bytes* b : inputs) in.push_back(reinterpret_cast<const T*>(b->data()) + offset);
  for (size_t i = 0; i < count; ++i) {
    uint64_t sum = 0, prod = 1;
    T lo = in[0][i], hi = in[0][i];
    for (int q = 0; q < n; ++q) {
      T v = in[q][i];
      sum += static_cast<uint64_t>(static_cast<int64_t>(v));
      prod *= static_cast<uint64_t>(static_cast<int64_t>(v));
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
    T wrappedSum = static_cast<T>(static_cast<U>(sum));
    switch (op) {
      case trncclSum: result[i] = wrappedSum; break;
      case trncclProd: result[i] = static_cast<T>(static_cast<U>(prod)); break;
      case trncclMin: result[i] = lo; break;
      case trncclMax: result[i] = hi; break;
      case trncclAvg: result[i] = static_cast<T>(wrappedSum / static_cast<T>(n)); break;
      default: break;
    }
  }
}

double loadFloat(const char* p, trncclDataType_t dtype) {
  switch (dtype) {
    case trncclFloat16: {
      _Float16 h;
      std::memcpy(&h, p, 2);
      return static_cast<double>(h);
    }
    case trncclBfloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return fromBf16(h);
    }
    case trncclFloat32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    default: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
  }
}

// Float types accumulate in double (exact for the test's values); avg divides in the type the
// library documents (fp32 for fp16/bf16/fp32, fp64 for fp64) and rounds once.
void storeFloatTo(char* p, trncclDataType_t dtype, double exact, bool avg, int n) {
  switch (dtype) {
    case trncclFloat16: {
      float v = avg ? static_cast<float>(exact) / static_cast<float>(n) : static_cast<float>(exact);
      _Float16 h = static_cast<_Float16>(v);
      std::memcpy(p, &h, 2);
      return;
    }
    case trncclBfloat16: {
      float v = avg ? static_cast<float>(exact) / static_cast<float>(n) : static_cast<float>(exact);
      uint16_t h = toBf16(v);
      std::memcpy(p, &h, 2);
      return;
    }
    case trncclFloat32: {
      float v = avg ? static_cast<float>(exact) / static_cast<float>(n) : static_cast<float>(exact);
      std::memcpy(p, &v, 4);
      return;
    }
    default: {
      double v = avg ? exact / n : exact;
      std::memcpy(p, &v, 8);
      return;
    }
  }
}

template <typename Load>
void reduceFloatsWith(Load load, trncclDataType_t dtype, const std::vector<const Bytes*>& inputs,
                      size_t offset, size_t count, trncclRedOp_t op, char* out) {
  size_t esize = typeSize(dtype);
  int n = static_cast<int>(inputs.size());
  std::vector<const char*> in;
  for (const Bytes* b : inputs) in.push_back(b->data() + offset * esize);
  for (size_t i = 0; i < count; ++i) {
    double first = load(in[0] + i * esize);
    double sum = first, prod = first, lo = first, hi = first;
    for (int q = 1; q < n; ++q) {
      double v = load(in[q] + i * esize);
      sum += v;
      prod *= v;
      lo = v < lo ? v : lo;
      hi = v > hi ? v : hi;
    }
    double exact = op == trncclProd ? prod : op == trncclMin ? lo : op == trncclMax ? hi : sum;
    storeFloatTo(out + i * esize, dtype, exact, op == trncclAvg, n);
  }
}

void reduceFloats(trncclDataType_t dtype, const std::vector<const Bytes*>& inputs, size_t offset,
                  size_t count, trncclRedOp_t op, char* out) {
  switch (dtype) {
    case trncclFloat16:
      return reduceFloatsWith(
          [](const char* p) {
            _Float16 h;
            std::memcpy(&h, p, 2);
            return static_cast<double>(h);
          },
          dtype, inputs, offset, count, op, out);
    case trncclBfloat16:
      return reduceFloatsWith(
          [](const char* p) {
            uint16_t h;
            std::memcpy(&h, p, 2);
            return static_cast<double>(fromBf16(h));
          },
          dtype, inputs, offset, count, op, out);
    case trncclFloat32:
      return reduceFloatsWith(
          [](const char* p) {
            float f;
            std::memcpy(&f, p, 4);
            return static_cast<double>(f);
          },
          dtype, inputs, offset, count, op, out);
    default:
      return reduceFloatsWith(
          [](const char* p) {
            double d;
            std::memcpy(&d, p, 8);
            return d;
          },
          dtype, inputs, offset, count, op, out);
  }
}

}  // namespace

size_t typeSize(trncclDataType_t dtype) {
  switch (dtype) {
    case trncclInt8:
    case trncclUint8:
    case trncclFloat8e4m3:
    case trncclFloat8e5m2: return 1;
    case trncclFloat16:
    case trncclBfloat16: return 2;
    case trncclInt32:
    case trncclUint32:
    case trncclFloat32: return 4;
    default: return 8;
  }
}

const char* typeName(trncclDataType_t dtype) {
  static const char* names[] = {"int8",    "uint8",   "int32",   "uint32",   "int64",   "uint64",
                                "float16", "float32", "float64", "bfloat16", "fp8e4m3", "fp8e5m2"};
  return dtype >= 0 && dtype < trncclNumTypes ? names[dtype] : "?";
}

const char* opName(trncclRedOp_t op) {
  static const char* names[] = {"sum", "prod", "max", "min", "avg"};
  return op >= 0 && op < trncclNumOps ? names[op] : "?";
}

void makeInput(Bytes& out, trncclDataType_t dtype, trncclRedOp_t op, int rank, size_t count,
               uint64_t salt) {
  makeInputRange(out, dtype, op, rank, 0, count, salt);
}

void makeInputRange(Bytes& out, trncclDataType_t dtype, trncclRedOp_t op, int rank, size_t begin,
                    size_t count, uint64_t salt) {
  out.resize(count * typeSize(dtype));
  char* p = out.data();
  switch (dtype) {
    case trncclInt8: fillTyped<int8_t>(p, false, op, rank, begin, count, salt); break;
    case trncclUint8:
    case trncclFloat8e4m3:
    case trncclFloat8e5m2: fillTyped<uint8_t>(p, true, op, rank, begin, count, salt); break;
    case trncclInt32: fillTyped<int32_t>(p, false, op, rank, begin, count, salt); break;
    case trncclUint32: fillTyped<uint32_t>(p, true, op, rank, begin, count, salt); break;
    case trncclInt64: fillTyped<int64_t>(p, false, op, rank, begin, count, salt); break;
    case trncclUint64: fillTyped<uint64_t>(p, true, op, rank, begin, count, salt); break;
    case trncclFloat16:
      fillWith<uint16_t>(p, false, op, rank, begin, count, salt,
                         [](int32_t v) { return fp16Of(v); });
      break;
    case trncclBfloat16:
      fillWith<uint16_t>(p, false, op, rank, begin, count, salt,
                         [](int32_t v) { return bf16Of(v); });
      break;
    case trncclFloat32: fillTyped<float>(p, false, op, rank, begin, count, salt); break;
    default: fillTyped<double>(p, false, op, rank, begin, count, salt); break;
  }
}

Bytes makeRandomFloats(int rank, size_t count, uint64_t salt) {
  std::mt19937_64 gen(salt * 1000003 + rank);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Bytes out(count * sizeof(float));
  for (size_t i = 0; i < count; ++i) {
    float v = dist(gen);
    std::memcpy(out.data() + i * 4, &v, 4);
  }
  return out;
}

void reduceReference(Bytes& out, trncclDataType_t dtype, trncclRedOp_t op,
                     const std::vector<const Bytes*>& inputs, size_t offset, size_t count) {
  out.resize(count * typeSize(dtype));
  switch (dtype) {
    case trncclInt8: reduceInts<int8_t>(inputs, offset, count, op, out.data()); break;
    case trncclUint8: reduceInts<uint8_t>(inputs, offset, count, op, out.data()); break;
    case trncclInt32: reduceInts<int32_t>(inputs, offset, count, op, out.data()); break;
    case trncclUint32: reduceInts<uint32_t>(inputs, offset, count, op, out.data()); break;
    case trncclInt64: reduceInts<int64_t>(inputs, offset, count, op, out.data()); break;
    case trncclUint64: reduceInts<uint64_t>(inputs, offset, count, op, out.data()); break;
    default: reduceFloats(dtype, inputs, offset, count, op, out.data()); break;
  }
}

size_t firstMismatch(const void* got, const void* want, size_t count, trncclDataType_t dtype) {
  size_t esize = typeSize(dtype);
  if (count == 0 || std::memcmp(got, want, count * esize) == 0) return static_cast<size_t>(-1);
  for (size_t i = 0; i < count; ++i)
    if (std::memcmp(static_cast<const char*>(got) + i * esize,
                    static_cast<const char*>(want) + i * esize, esize) != 0)
      return i;
  return static_cast<size_t>(-1);
}

std::string elementText(const void* data, size_t index, trncclDataType_t dtype) {
  const char* p = static_cast<const char*>(data) + index * typeSize(dtype);
  switch (dtype) {
    case trncclInt8: return std::to_string(*reinterpret_cast<const int8_t*>(p));
    case trncclUint8:
    case trncclFloat8e4m3:
    case trncclFloat8e5m2: return std::to_string(*reinterpret_cast<const uint8_t*>(p));
    case trncclInt32: return std::to_string(*reinterpret_cast<const int32_t*>(p));
    case trncclUint32: return std::to_string(*reinterpret_cast<const uint32_t*>(p));
    case trncclInt64: return std::to_string(*reinterpret_cast<const int64_t*>(p));
    case trncclUint64: return std::to_string(*reinterpret_cast<const uint64_t*>(p));
    default: return std::to_string(loadFloat(p, dtype));
  }
}

}  // namespace trnccl::testing
