// A small fork-join pool owned by one CPU backend (no global state). parallel_for runs the
// calling thread alongside the workers, so concurrent callers always make progress.
#pragma once

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

 private:
  struct Job;
  void worker_loop();
  static void run(Job& job);

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace streamknn::detail
