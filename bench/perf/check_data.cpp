#include "perf/check_data.hpp"

#include <cstring>

#include "core/dtype.hpp"

namespace trnccl::bench {

static bool isUnsigned(trncclDataType_t t) {
  return t == trncclUint8 || t == trncclUint32 || t == trncclUint64 || t == trncclFloat8e4m3 ||
         t == trncclFloat8e5m2;
}

double checkValue(trncclDataType_t dtype, trncclRedOp_t op, int rank, size_t i) {
  size_t h = i * 7 + static_cast<size_t>(rank) * 13;
  if (op == trncclProd) {
    static const double choices[4] = {1, 1, -1, 2};
    double v = choices[h % 4];
    return isUnsigned(dtype) && v < 0 ? 1 : v;
  }
  if (op == trncclMax || op == trncclMin) return isUnsigned(dtype) ? h % 101 : double(h % 101) - 50;
  return isUnsigned(dtype) ? h % 5 : double(h % 5) - 2;
}

void storeValue(trncclDataType_t dtype, void* at, double v) {
  switch (dtype) {
    case trncclInt8: {
      int8_t x = static_cast<int8_t>(v);
      std::memcpy(at, &x, 1);
      break;
    }
    case trncclUint8:
    case trncclFloat8e4m3:
    case trncclFloat8e5m2: {
      uint8_t x = static_cast<uint8_t>(static_cast<int64_t>(v));
      std::memcpy(at, &x, 1);
      break;
    }
    case trncclInt32: {
      int32_t x = static_cast<int32_t>(v);
      std::memcpy(at, &x, 4);
      break;
    }
    case trncclUint32: {
      uint32_t x = static_cast<uint32_t>(static_cast<int64_t>(v));
      std::memcpy(at, &x, 4);
      break;
    }
    case trncclInt64: {
      int64_t x = static_cast<int64_t>(v);
      std::memcpy(at, &x, 8);
      break;
    }
    case trncclUint64: {
      uint64_t x = static_cast<uint64_t>(static_cast<int64_t>(v));
      std::memcpy(at, &x, 8);
      break;
    }
    case trncclFloat16: {
      uint16_t x = floatToFp16(static_cast<float>(v));
      std::memcpy(at, &x, 2);
      break;
    }
    case trncclBfloat16: {
      uint16_t x = floatToBf16(static_cast<float>(v));
      std::memcpy(at, &x, 2);
      break;
    }
    case trncclFloat32: {
      float x = static_cast<float>(v);
      std::memcpy(at, &x, 4);
      break;
    }
    default: std::memcpy(at, &v, 8); break;
  }
}

double reducedValue(trncclDataType_t dtype, trncclRedOp_t op, int nranks, size_t i) {
  double acc = checkValue(dtype, op, 0, i);
  for (int r = 1; r < nranks; ++r) {
    double v = checkValue(dtype, op, r, i);
    switch (op) {
      case trncclProd: acc *= v; break;
      case trncclMax: acc = v > acc ? v : acc; break;
      case trncclMin: acc = v < acc ? v : acc; break;
      default: acc += v; break;
    }
  }
  if (op == trncclAvg) {
    bool integer = dtype != trncclFloat16 && dtype != trncclFloat32 && dtype != trncclFloat64 &&
                   dtype != trncclBfloat16;
    if (integer) return static_cast<double>(static_cast<int64_t>(acc) / nranks);
    if (dtype == trncclFloat64) return acc / nranks;
    return static_cast<double>(static_cast<float>(acc) / static_cast<float>(nranks));
  }
  return acc;
}

void fillRank(trncclDataType_t dtype, trncclRedOp_t op, int rank, size_t count, char* out) {
  size_t esize = dtypeSize(dtype);
  for (size_t i = 0; i < count; ++i)
    storeValue(dtype, out + i * esize, checkValue(dtype, op, rank, i));
}

size_t elementBytes(trncclDataType_t dtype) {
  return dtypeSize(dtype);
}

void fillReduced(trncclDataType_t dtype, trncclRedOp_t op, int nranks, size_t first, size_t count,
                 char* out) {
  size_t esize = dtypeSize(dtype);
  for (size_t i = 0; i < count; ++i)
    storeValue(dtype, out + i * esize, reducedValue(dtype, op, nranks, first + i));
}

}  // namespace trnccl::bench
