// Guards against requests no machine can honour: a request for more than half of the
// machine's memory is refused with OutOfMemory naming it, rather than allocated and then
// ended by the operating system's out-of-memory killer (with overcommit, an allocation can
// succeed and the process die when the pages are touched).
#pragma once

#include <unistd.h>

#include <cstddef>

#include "core/check.hpp"
#include "streamknn/error.hpp"

namespace streamknn::detail {

/// Physical memory of this machine in bytes (0 if unknown).
inline double physical_memory_bytes() noexcept {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? double(pages) * double(page) : 0.0;
}

/// Throws OutOfMemory("<what>: <bytes> bytes ... <hint>") when bytes exceed half of memory.
template <class... Parts>
void refuse_beyond_memory(double bytes, Parts&&... what) {
  const double memory = physical_memory_bytes();
  if (memory > 0 && 2 * bytes > memory) {
    throw OutOfMemory(concat(std::forward<Parts>(what)..., " need ", std::size_t(bytes),
                             " bytes, more than half of this machine's ", std::size_t(memory), " bytes of memory"));
  }
}

}  // namespace streamknn::detail
