#include "cpu/thread_pool.hpp"

#include <atomic>
#include <exception>

namespace streamknn::detail {

struct ThreadPool::Job {
  const std::function<void(std::size_t)>* task = nullptr;
  std::size_t count = 0;
  std::atomic<std::size_t> next{0};
  std::mutex mutex;                 // guards done and error
  std::condition_variable finished;
  std::size_t done = 0;
  std::exception_ptr error;
};

ThreadPool::ThreadPool(std::size_t workers) {
  workers_.reserve(workers);
  for (std::size_t i = 0; i < workers; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run(Job& job) {
  for (std::size_t i; (i = job.next.fetch_add(1)) < job.count;) {
    std::exception_ptr error;
    try {
      (*job.task)(i);
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard lock(job.mutex);
    if (error && !job.error) job.error = error;
    if (++job.done == job.count) job.finished.notify_all();
  }
}

void ThreadPool::worker_loop() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping
      job = jobs_.front();
      if (job->next.load() >= job->count) {  // every task handed out: retire it
        jobs_.pop_front();
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
    {
      std::lock_guard lock(mutex_);
      jobs_.push_back(job);
    }
    wake_.notify_all();
  }
  run(*job);
  std::unique_lock lock(job->mutex);
  job->finished.wait(lock, [&] { return job->done == job->count; });
  if (job->error) std::rethrow_exception(job->error);
}

}  // namespace streamknn::detail
