// The CPU backend's vector storage as a type the core can hand over: a load (from_points) copies
// the caller's rows once, into the buffer the CPU backend then keeps (ResolvedBatch::rows),
// instead of into the image and again into the backend's own buffer.
#pragma once

#include <cstddef>
#include <new>
#include <utility>
#include <vector>

namespace streamknn::detail {

/// The store's vectors' allocator: 64-byte aligned, and elements made without a value
/// (vector(n), resize(n)) are left uninitialised, for buffers whose every float is written next.
template <class T>
struct StoreAllocator {
  using value_type = T;
  StoreAllocator() = default;
  template <class U>
  StoreAllocator(const StoreAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(64))); }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, std::align_val_t(64)); }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    if constexpr (sizeof...(Args) == 0) {
      ::new (static_cast<void*>(p)) U;
    } else {
      ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
    }
  }
  friend bool operator==(const StoreAllocator&, const StoreAllocator&) noexcept { return true; }
};
using StoreVector = std::vector<float, StoreAllocator<float>>;

/// Whether the CPU backend holds vectors of `stored_dim` floats as unpadded rows, so that a
/// load's rows (ResolvedBatch::rows) become its buffer as they are: above 4 dimensions (4 and
/// fewer are held as columns) rows are padded to a multiple of 8 floats (cpu/host_store.hpp).
inline bool cpu_rows_unpadded(std::size_t stored_dim) noexcept { return stored_dim > 4 && stored_dim % 8 == 0; }

}  // namespace streamknn::detail
