// Test inputs and the serial reference the tests compare against. The reference is written
// independently of the library's kernels: integer arithmetic in 64 bits with explicit
// wrap-around, floating point through the compiler's own types (_Float16) and a separate
// bfloat16 rounding routine.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trnccl.h"

namespace trnccl::testing {

using Bytes = std::vector<char>;

// Deterministic input of `count` elements for `rank`. Values are small integers chosen per op
// so that every type represents every partial result exactly: any reduction order then gives
// the same bits, and a mismatch is a real bug, not rounding.
// Functions that fill a Bytes resize it in place: reusing one Bytes across calls keeps the
// tests from page-faulting fresh buffers on every iteration (which dominated their run time).
void makeInput(Bytes& out, trncclDataType_t dtype, trncclRedOp_t op, int rank, size_t count,
               uint64_t salt);
// Elements [begin, begin + count) of the same sequence (so ranks build only the slices of
// their peers' inputs that they need to check).
void makeInputRange(Bytes& out, trncclDataType_t dtype, trncclRedOp_t op, int rank, size_t begin,
                    size_t count, uint64_t salt);

// Random non-integer floats, for checks that need rounding to happen (bitwise equality).
Bytes makeRandomFloats(int rank, size_t count, uint64_t salt);

// out[i] = inputs[0][offset+i] op inputs[1][offset+i] op ... for i < count.
void reduceReference(Bytes& out, trncclDataType_t dtype, trncclRedOp_t op,
                     const std::vector<const Bytes*>& inputs, size_t offset, size_t count);

size_t typeSize(trncclDataType_t dtype);
const char* typeName(trncclDataType_t dtype);
const char* opName(trncclRedOp_t op);

// Index of the first differing element (size_t(-1) if equal) and a printable description.
size_t firstMismatch(const void* got, const void* want, size_t count, trncclDataType_t dtype);
std::string elementText(const void* data, size_t index, trncclDataType_t dtype);

}  // namespace trnccl::testing
