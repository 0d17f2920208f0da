// A small fork-join pool owned by one CPU backend, or by one catalogue for its publishes (no
// global state). parallel_for runs the calling thread alongside the workers, so concurrent
// callers always make progress. Idle workers, and a caller waiting for the last task, poll for
// a short while (kSpin) before they sleep: a search that follows another within that time
// starts and finishes without a futex wake, which costs several microseconds (a third of a
// one-query low-dimension search).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace streamknn::detail {

class ThreadPool {
 public:
  /// workers == 0 runs everything on the caller.
  explicit ThreadPool(std::size_t workers);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  /// Threads that take part in a parallel_for (workers + the caller).
  std::size_t concurrency() const noexcept { return workers_.size() + 1; }
  /// Runs task(i) for every i in [0, n); returns when all are done and rethrows the first
  /// exception a task threw.
  void parallel_for(std::size_t n, const std::function<void(std::size_t)>& task);

  /// How long an idle thread polls before it sleeps.
  static constexpr std::chrono::microseconds kSpin{50};

 private:
  struct Job;
  void worker_loop();
  void stop() noexcept;  ///< stops and joins the workers
  static void run(Job& job);

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> jobs_;
  std::atomic<std::size_t> queued_{0};  // jobs_.size(), readable without the lock (polling)
  std::size_t sleepers_ = 0;            // workers blocked on wake_
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace streamknn::detail
