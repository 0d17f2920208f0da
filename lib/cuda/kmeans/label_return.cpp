#include "cuda/kmeans/label_return.hpp"

#include <algorithm>
#include <stdexcept>

#include "cuda/kmeans/kmeans_kernels.hpp"

namespace streamknn::detail::kmeans {

namespace {

namespace gk = streamknn::detail::gpu::kmeans;
using gpu::check_cuda;

constexpr std::size_t kWidenChunk = std::size_t(1) << 16;  // labels a pool task widens
constexpr std::size_t kEarlyChunk = std::size_t(1) << 18;  // labels the early copy brings at a step

/// A copy to the host on `s`, waited for.
void copy_to_host(void* to, const void* from, std::size_t bytes, cudaStream_t s, const char* what) {
  check_cuda(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync", what);
  check_cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize", what);
}

}  // namespace

LabelReturn::LabelReturn(ThreadPool& pool, std::uint32_t n, std::uint32_t k, std::vector<unsigned char>& narrow,
                         std::optional<gpu::Stream>& side)
    : pool_(pool), n_(n), width_(width_for(k)), narrow_(narrow), side_(side) {}

void LabelReturn::expect(std::function<std::span<std::uint32_t>()> out) {
  out_ = std::move(out);
  holding_ = {};
  stopped_ = false;
}

void LabelReturn::during(const std::uint32_t* labels, std::size_t changed, cudaStream_t s,
                         const std::function<void()>& launch) {
  const std::span<std::uint32_t> out =
      arrays_.snapshots[0] && out_ && !stopped_ && changed <= n_ / kFewChanges ? out_() : std::span<std::uint32_t>{};
  if (out.empty()) {
    launch();
    return;
  }
  if (out.size() != n_) throw std::logic_error("KMeans: the labels' host array does not hold one label a point");
  if (!snapped_) {  // a fit that never takes a snapshot makes none of these
    if (!side_) side_.emplace();
    snapped_.emplace();
    ran_.emplace();
  }
  const int which = holding_.empty() ? 0 : 1 - newer_;  // not where the last complete one is
  gk::launch_narrow_labels(labels, n_, width_, arrays_.snapshots[which], s);
  snapped_->record(s);
  launch();
  ran_->record(s);
  check_cuda(cudaStreamWaitEvent(side_->get(), snapped_->get()), "cudaStreamWaitEvent", "kmeans labels snapshot");
  const std::uint32_t done = bring(which, out);
  older_ = done < n_ && !holding_.empty();
  stopped_ = done < n_;
  holding_ = out;
  newer_ = which;
  split_ = done;
}

std::uint32_t LabelReturn::bring(int which, std::span<std::uint32_t> out) {
  const std::size_t bytes = std::size_t(n_) * width_;
  if (narrow_.size() < bytes) narrow_.resize(bytes);
  const auto* from = static_cast<const unsigned char*>(arrays_.snapshots[which]);
  std::size_t lo = 0;
  for (; lo < n_ && !ran_->done(); lo += kEarlyChunk) {
    const std::size_t hi = std::min<std::size_t>(n_, lo + kEarlyChunk);
    copy_to_host(narrow_.data() + lo * width_, from + lo * width_, (hi - lo) * width_, side_->get(),
                 "kmeans labels snapshot");
    widen(lo, hi, out);
  }
  return std::uint32_t(std::min<std::size_t>(lo, n_));
}

void LabelReturn::take(const std::uint32_t* labels, std::span<std::uint32_t> out, cudaStream_t s) {
  const bool early = !holding_.empty() && holding_.data() == out.data() && holding_.size() == out.size();
  out_ = nullptr;
  holding_ = {};
  if (width_ == 4 || n_ < kNarrowLabels) {
    copy_to_host(out.data(), labels, out.size_bytes(), s, "kmeans labels");
    return;
  }
  if (early && take_changes(labels, out, s)) {
    if (split_ < n_ && !older_) take_from(split_, labels, out, s);  // the part no snapshot brought
    return;
  }
  take_from(0, labels, out, s);
}

bool LabelReturn::take_changes(const std::uint32_t* labels, std::span<std::uint32_t> out, cudaStream_t s) {
  check_cuda(cudaMemsetAsync(arrays_.count, 0, sizeof(std::uint32_t), s), "cudaMemsetAsync", "kmeans label changes");
  gk::launch_label_changes(labels, arrays_.snapshots[newer_], arrays_.snapshots[1 - newer_], split_, width_,
                           older_ ? n_ : split_, arrays_.room, arrays_.count, arrays_.changes, s);
  std::uint32_t count = 0;
  copy_to_host(&count, arrays_.count, sizeof count, s, "kmeans label changes");
  if (count > arrays_.room) return false;
  if (count == 0) return true;
  std::vector<std::uint32_t> changes(2 * std::size_t(count));
  copy_to_host(changes.data(), arrays_.changes, changes.size() * sizeof(std::uint32_t), s, "kmeans changed labels");
  for (std::size_t i = 0; i < changes.size(); i += 2) out[changes[i]] = changes[i + 1];
  return true;
}

void LabelReturn::take_from(std::size_t lo, const std::uint32_t* labels, std::span<std::uint32_t> out,
                            cudaStream_t s) {
  const std::size_t bytes = std::size_t(n_) * width_;
  if (narrow_.size() < bytes) narrow_.resize(bytes);
  auto* staging = static_cast<unsigned char*>(arrays_.staging) + lo * width_;
  gk::launch_narrow_labels(labels + lo, std::uint32_t(n_ - lo), width_, staging, s);
  copy_to_host(narrow_.data() + lo * width_, staging, (n_ - lo) * width_, s, "kmeans labels");
  widen(lo, n_, out);
}

void LabelReturn::widen(std::size_t lo, std::size_t hi, std::span<std::uint32_t> out) {
  pool_.parallel_for((hi - lo + kWidenChunk - 1) / kWidenChunk, [&](std::size_t c) {
    const std::size_t from = lo + c * kWidenChunk, to = std::min(hi, from + kWidenChunk);
    if (width_ == 1) {
      for (std::size_t i = from; i < to; ++i) out[i] = narrow_[i];
    } else {
      const auto* wide = reinterpret_cast<const std::uint16_t*>(narrow_.data());
      for (std::size_t i = from; i < to; ++i) out[i] = wide[i];
    }
  });
}

}  // namespace streamknn::detail::kmeans
