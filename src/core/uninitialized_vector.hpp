// A vector whose resize leaves new elements uninitialized. Staging buffers are resized on
// every call, often to alternating sizes (a dispatch's messages, then a combine's rows), and
// std::vector would zero every byte they grow by, a whole pass over megabytes of memory that
// the call then overwrites anyway. Only for trivial element types whose every byte is written
// before it is read.
#pragma once

#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace trnccl {

template <typename T>
class DefaultInitAllocator : public std::allocator<T> {
 public:
  template <typename U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  DefaultInitAllocator() noexcept = default;
  template <typename U>
  explicit DefaultInitAllocator(const DefaultInitAllocator<U>&) noexcept {}

  // resize(n) constructs with no arguments: default-initialise, which for a trivial type
  // leaves the bytes as they are.
  template <typename U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

template <typename T>
using UninitializedVector = std::vector<T, DefaultInitAllocator<T>>;

}  // namespace trnccl
