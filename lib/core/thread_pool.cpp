#include "core/thread_pool.hpp"

#include <exception>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace streamknn::detail {

struct ThreadPool::Job {
  const std::function<void(std::size_t)>* task = nullptr;
  std::size_t count = 0;
  std::atomic<std::size_t> next{0};
  std::atomic<std::size_t> done{0};
  std::mutex mutex;                 // guards error, and orders the last task's notify
  std::condition_variable finished;
  std::exception_ptr error;
};

namespace {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

/// Polls until ready() or kSpin has passed; returns ready().
template <class Ready>
bool spin_until(Ready&& ready) {
  const auto until = std::chrono::steady_clock::now() + ThreadPool::kSpin;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= until) return ready();
  }
}

}  // namespace

ThreadPool::ThreadPool(std::size_t workers) {
  try {
    workers_.reserve(workers);
    for (std::size_t i = 0; i < workers; ++i) workers_.emplace_back([this] { worker_loop(); });
  } catch (...) {
    stop();  // the workers started so far (a joinable std::thread must not be destroyed)
    throw;
  }
}

ThreadPool::~ThreadPool() { stop(); }

void ThreadPool::stop() noexcept {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
}

void ThreadPool::run(Job& job) {
  for (std::size_t i; (i = job.next.fetch_add(1)) < job.count;) {
    std::exception_ptr error;
    try {
      (*job.task)(i);
    } catch (...) {
      error = std::current_exception();
    }
    if (error) {
      std::lock_guard lock(job.mutex);
      if (!job.error) job.error = error;
    }
    if (job.done.fetch_add(1, std::memory_order_acq_rel) + 1 == job.count) {
      std::lock_guard lock(job.mutex);  // a waiter is either before its check or asleep
      job.finished.notify_all();
    }
  }
}

void ThreadPool::worker_loop() {
  for (;;) {
    std::shared_ptr<Job> job;
    spin_until([this] { return queued_.load(std::memory_order_acquire) != 0; });
    {
      std::unique_lock lock(mutex_);
      ++sleepers_;
      wake_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      --sleepers_;
      if (jobs_.empty()) return;  // stopping
      job = jobs_.front();
      if (job->next.load() >= job->count) {  // every task handed out: retire it
        jobs_.pop_front();
        queued_.store(jobs_.size(), std::memory_order_release);
        continue;
      }
    }
    run(*job);
  }
}

void ThreadPool::parallel_for(std::size_t n, const std::function<void(std::size_t)>& task) {
  if (n == 0) return;
  auto job = std::make_shared<Job>();
  job->task = &task;
  job->count = n;
  if (n > 1 && !workers_.empty()) {
    bool asleep = false;
    {
      std::lock_guard lock(mutex_);
      jobs_.push_back(job);
      queued_.store(jobs_.size(), std::memory_order_release);
      asleep = sleepers_ > 0;  // the polling ones see queued_
    }
    if (asleep) wake_.notify_all();
  }
  run(*job);
  auto all_done = [&] { return job->done.load(std::memory_order_acquire) == job->count; };
  if (!spin_until(all_done)) {
    std::unique_lock lock(job->mutex);
    job->finished.wait(lock, all_done);
  }
  std::lock_guard lock(job->mutex);
  if (job->error) std::rethrow_exception(job->error);
}

}  // namespace streamknn::detail
