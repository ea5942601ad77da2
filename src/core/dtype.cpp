#include "core/dtype.hpp"

namespace trnccl {

size_t dtypeSize(trncclDataType_t type) {
  switch (type) {
    case trncclInt8:
    case trncclUint8:
    case trncclFloat8e4m3:
    case trncclFloat8e5m2: return 1;
    case trncclFloat16:
    case trncclBfloat16: return 2;
    case trncclInt32:
    case trncclUint32:
    case trncclFloat32: return 4;
    case trncclInt64:
    case trncclUint64:
    case trncclFloat64: return 8;
    default: return 0;
  }
}

const char* dtypeName(trncclDataType_t type) {
  switch (type) {
    case trncclInt8: return "int8";
    case trncclUint8: return "uint8";
    case trncclInt32: return "int32";
    case trncclUint32: return "uint32";
    case trncclInt64: return "int64";
    case trncclUint64: return "uint64";
    case trncclFloat16: return "half";
    case trncclFloat32: return "float";
    case trncclFloat64: return "double";
    case trncclBfloat16: return "bfloat16";
    case trncclFloat8e4m3: return "f8e4m3";
    case trncclFloat8e5m2: return "f8e5m2";
    default: return "unknown";
  }
}

const char* redOpName(trncclRedOp_t op) {
  switch (op) {
    case trncclSum: return "sum";
    case trncclProd: return "prod";
    case trncclMax: return "max";
    case trncclMin: return "min";
    case trncclAvg: return "avg";
    default: return "unknown";
  }
}

bool isValidDtype(int type) {
  return type >= 0 && type < trncclNumTypes;
}
bool isValidRedOp(int op) {
  return op >= 0 && op < trncclNumOps;
}
bool isReducible(trncclDataType_t type) {
  return isValidDtype(type) && type != trncclFloat8e4m3 && type != trncclFloat8e5m2;
}

}  // namespace trnccl
