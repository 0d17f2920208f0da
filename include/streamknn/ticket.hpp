// streamknn/ticket.hpp — the handle of an asynchronous search.
//
// submit(...) returns a Ticket at once; get() blocks until the answer is ready and returns it
// (once: a second get() throws). ready() polls without blocking. A Ticket may be moved to and
// consumed on another thread, and may outlive the ReferenceSet that issued it. Dropping an
// unconsumed ticket waits for its work to finish, so no buffer is released while the device
// still writes it.
#pragma once

#include <functional>
#include <memory>
#include <utility>

#include "streamknn/error.hpp"

namespace streamknn {

template <class Result>
class Ticket {
 public:
  Ticket() = default;
  Ticket(std::function<bool()> poll, std::function<Result()> finish)
      : poll_(std::move(poll)), finish_(std::move(finish)) {}
  /// A ticket that is already resolved.
  static Ticket ready_with(Result result) {
    auto shared = std::make_shared<Result>(std::move(result));
    return Ticket([] { return true; }, [shared] { return std::move(*shared); });
  }
  Ticket(Ticket&&) noexcept = default;
  Ticket& operator=(Ticket&& other) noexcept {
    if (this != &other) {
      drain();
      poll_ = std::move(other.poll_);
      finish_ = std::move(other.finish_);
    }
    return *this;
  }
  Ticket(const Ticket&) = delete;
  Ticket& operator=(const Ticket&) = delete;
  ~Ticket() { drain(); }

  bool valid() const noexcept { return static_cast<bool>(finish_); }
  bool ready() const { return !finish_ || poll_(); }
  Result get() {
    if (!finish_) throw Error("Ticket::get: the ticket is empty or was already consumed");
    auto finish = std::move(finish_);
    finish_ = nullptr;
    poll_ = nullptr;
    return finish();
  }

 private:
  void drain() noexcept {
    if (!finish_) return;
    try {
      (void)get();
    } catch (...) {
      // Destructors never throw; the error belonged to a result nobody asked for.
    }
  }
  std::function<bool()> poll_;
  std::function<Result()> finish_;
};

}  // namespace streamknn
