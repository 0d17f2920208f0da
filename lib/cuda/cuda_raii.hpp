// RAII owners for CUDA resources: device memory, pinned host memory, streams, events and
// instantiated graphs. Move-only; destructors never throw (errors at release are ignored:
// there is nobody left to tell).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "cuda/cuda_check.hpp"

namespace streamknn::detail::gpu {

template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(std::size_t count, const char* what = "device array") : count_(count) {
    if (count == 0) return;
    void* p = nullptr;
    check_cuda(cudaMalloc(&p, count * sizeof(T)), "cudaMalloc", std::string(what) + ", " +
                                                                    std::to_string(count * sizeof(T)) + " bytes");
    ptr_ = static_cast<T*>(p);
  }
  DeviceArray(DeviceArray&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), count_(std::exchange(o.count_, 0)) {}
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      count_ = std::exchange(o.count_, 0);
    }
    return *this;
  }
  ~DeviceArray() { release(); }
  T* get() const noexcept { return ptr_; }
  std::size_t size() const noexcept { return count_; }
  std::size_t bytes() const noexcept { return count_ * sizeof(T); }

 private:
  void release() noexcept {
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr;
  }
  T* ptr_ = nullptr;
  std::size_t count_ = 0;
};

/// Makes `a` hold at least `count` elements, its contents not kept: freed first (the device may
/// not hold both), then made with room for max(count, twice its old size), so an array that grows
/// call by call is made a few times only.
template <class T>
void grow(DeviceArray<T>& a, std::size_t count, const char* what) {
  if (a.size() >= count) return;
  const std::size_t grown = count > 2 * a.size() ? count : 2 * a.size();
  a = DeviceArray<T>();
  a = DeviceArray<T>(grown, what);
}

template <class T>
class PinnedArray {
 public:
  PinnedArray() = default;
  /// mapped: kernels may also read and write the array, through device_ptr().
  explicit PinnedArray(std::size_t count, const char* what = "pinned host array", bool mapped = false) : count_(count) {
    if (count == 0) return;
    void* p = nullptr;
    const std::string context = std::string(what) + ", " + std::to_string(count * sizeof(T)) + " bytes";
    check_cuda(cudaHostAlloc(&p, count * sizeof(T), mapped ? cudaHostAllocMapped : cudaHostAllocDefault),
               "cudaHostAlloc", context);
    ptr_ = static_cast<T*>(p);
    if (mapped) {
      void* d = nullptr;
      const cudaError_t status = cudaHostGetDevicePointer(&d, p, 0);
      if (status != cudaSuccess) release();
      check_cuda(status, "cudaHostGetDevicePointer", context);
      device_ptr_ = static_cast<T*>(d);
    }
  }
  PinnedArray(PinnedArray&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)),
        device_ptr_(std::exchange(o.device_ptr_, nullptr)),
        count_(std::exchange(o.count_, 0)) {}
  PinnedArray& operator=(PinnedArray&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      device_ptr_ = std::exchange(o.device_ptr_, nullptr);
      count_ = std::exchange(o.count_, 0);
    }
    return *this;
  }
  ~PinnedArray() { release(); }
  T* get() const noexcept { return ptr_; }
  /// The array's address for kernels (mapped arrays only; else nullptr).
  T* device_ptr() const noexcept { return device_ptr_; }
  std::size_t size() const noexcept { return count_; }

 private:
  void release() noexcept {
    if (ptr_) cudaFreeHost(ptr_);
    ptr_ = nullptr;
    device_ptr_ = nullptr;
  }
  T* ptr_ = nullptr;
  T* device_ptr_ = nullptr;
  std::size_t count_ = 0;
};

class Stream {
 public:
  Stream() { check_cuda(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags"); }
  Stream(Stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  Stream& operator=(Stream&& o) noexcept {
    std::swap(s_, o.s_);
    return *this;
  }
  ~Stream() {
    if (s_) cudaStreamDestroy(s_);
  }
  cudaStream_t get() const noexcept { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

class Event {
 public:
  Event() { check_cuda(cudaEventCreateWithFlags(&e_, cudaEventDisableTiming), "cudaEventCreateWithFlags"); }
  Event(Event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  Event& operator=(Event&& o) noexcept {
    std::swap(e_, o.e_);
    return *this;
  }
  ~Event() {
    if (e_) cudaEventDestroy(e_);
  }
  cudaEvent_t get() const noexcept { return e_; }
  void record(cudaStream_t stream) const { check_cuda(cudaEventRecord(e_, stream), "cudaEventRecord"); }
  bool done() const {
    const cudaError_t s = cudaEventQuery(e_);
    if (s == cudaErrorNotReady) return false;
    check_cuda(s, "cudaEventQuery");
    return true;
  }
  void wait() const { check_cuda(cudaEventSynchronize(e_), "cudaEventSynchronize"); }

 private:
  cudaEvent_t e_ = nullptr;
};

class GraphExec {
 public:
  GraphExec() = default;
  explicit GraphExec(cudaGraphExec_t g) : g_(g) {}
  GraphExec(GraphExec&& o) noexcept : g_(std::exchange(o.g_, nullptr)) {}
  GraphExec& operator=(GraphExec&& o) noexcept {
    if (this != &o) {
      if (g_) cudaGraphExecDestroy(g_);
      g_ = std::exchange(o.g_, nullptr);
    }
    return *this;
  }
  ~GraphExec() {
    if (g_) cudaGraphExecDestroy(g_);
  }
  cudaGraphExec_t get() const noexcept { return g_; }
  explicit operator bool() const noexcept { return g_ != nullptr; }

 private:
  cudaGraphExec_t g_ = nullptr;
};

/// Makes a device current for a scope and restores the previous one.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    check_cuda(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) check_cuda(cudaSetDevice(device), "cudaSetDevice", "device " + std::to_string(device));
  }
  ~DeviceScope() {
    int now = previous_;
    cudaGetDevice(&now);
    if (now != previous_) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace streamknn::detail::gpu
