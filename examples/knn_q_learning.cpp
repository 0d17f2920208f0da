// examples/knn_q_learning.cpp — KNN-Q reinforcement learning on the mountain car.
//
// An underpowered car must rock back and forth in a valley to reach the flag on the right-hand
// hill (Sutton & Barto, "Reinforcement Learning", example 10.1). The agent's memory is a
// reference set of visited states (position, velocity, scaled to [0, 1]); each stored state
// carries one Q-value per action (TargetSpec::outputs(3)). Every step it
//   1. looks up the k nearest stored states and averages their Q-values (KnnRegressor: a
//      regression with one output per action),
//   2. acts greedily on them (ties broken at random),
//   3. moves those neighbours' Q-values towards r + max_a Q(s', a) with set_target,
//   4. inserts the state when no stored state is near it, so the memory grows where the car goes,
// and publishes, so the next lookup sees this step's learning. Q-values start at 0 while every
// reward is -1: unvisited states look better than visited ones, which is all the exploration the
// agent needs. Prints the learning curve: the return (minus the steps taken) per episode.
//
//   knn_q_learning [--episodes 150] [--k 4] [--seed 7]
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <CLI/CLI.hpp>

#include "streamknn/streamknn.hpp"

namespace {

using namespace streamknn;

constexpr std::size_t kActions = 3;  // push left, coast, push right
using QValues = std::array<float, kActions>;

/// The mountain car, exactly as Sutton & Barto define it.
class MountainCar {
 public:
  static constexpr double kMinPosition = -1.2, kMaxPosition = 0.6, kMaxSpeed = 0.07, kGoal = 0.5;

  void reset(std::mt19937_64& rng) {
    position_ = std::uniform_real_distribution<double>(-0.6, -0.4)(rng);
    velocity_ = 0;
  }
  /// Applies an action; returns true when the car reaches the flag.
  bool step(std::size_t action) {
    velocity_ += (double(action) - 1) * 0.001 - 0.0025 * std::cos(3 * position_);
    velocity_ = std::clamp(velocity_, -kMaxSpeed, kMaxSpeed);
    position_ = std::clamp(position_ + velocity_, kMinPosition, kMaxPosition);
    if (position_ == kMinPosition) velocity_ = 0;  // the left wall stops the car
    return position_ >= kGoal;
  }
  /// The state as the agent sees it: both coordinates scaled to [0, 1].
  std::array<float, 2> observe() const {
    return {float((position_ - kMinPosition) / (kMaxPosition - kMinPosition)),
            float((velocity_ + kMaxSpeed) / (2 * kMaxSpeed))};
  }

 private:
  double position_ = 0, velocity_ = 0;
};

/// The agent's memory: stored states with their Q-values, mirrored on the host because
/// set_target needs every action's value, not only the one that changes.
class KnnQ {
 public:
  KnnQ(std::size_t k, float novelty, float learning_rate)
      : store_(config()), q_(store_, k), k_(k), novelty_(novelty), learning_rate_(learning_rate) {}

  struct Lookup {
    QValues q{};                  ///< the neighbours' mean Q-values (0 before anything is stored)
    std::vector<PointId> ids;     ///< the neighbours, nearest first
    float nearest = INFINITY;     ///< distance to the nearest stored state
  };

  Lookup lookup(std::span<const float> state) const {
    Lookup out;
    if (store_.size() == 0) return out;
    const Neighbors near = store_.search(state, k_);
    for (std::size_t j = 0; j < near.k && near.ids[j] != kInvalidId; ++j) out.ids.push_back(near.ids[j]);
    out.nearest = near.distances[0];
    const RegressionPredictions mean = q_.predict(state);
    std::copy_n(mean.values.begin(), kActions, out.q.begin());
    return out;
  }

  /// Moves the neighbours' values for `action` towards `target` (one TD step on their mean),
  /// stores the state if it is new, and publishes.
  void learn(std::span<const float> state, const Lookup& here, std::size_t action, float target) {
    const float error = target - here.q[action];
    for (PointId id : here.ids) {
      values_[id][action] += learning_rate_ * error;
      store_.set_target(id, values_[id]);
    }
    if (here.nearest > novelty_) {
      const auto id = static_cast<PointId>(values_.size());
      values_.push_back(QValues{});  // optimistic: 0 beats every return of -1 per step
      store_.insert(id, state, values_.back());
    }
    store_.publish();
  }

  std::size_t size() const { return store_.size(); }
  std::string backend() const { return store_.backend_name(); }

 private:
  static StoreConfig config() {
    StoreConfig c;
    c.dim = 2;
    c.target = TargetSpec::outputs(kActions);
    return c;
  }

  ReferenceSet store_;
  KnnRegressor q_;
  std::size_t k_;
  float novelty_, learning_rate_;
  std::vector<QValues> values_;  // by id
};

std::size_t greedy(const QValues& q, std::mt19937_64& rng) {
  const float best = *std::max_element(q.begin(), q.end());
  std::vector<std::size_t> ties;
  for (std::size_t a = 0; a < kActions; ++a) {
    if (q[a] == best) ties.push_back(a);
  }
  return ties[std::uniform_int_distribution<std::size_t>(0, ties.size() - 1)(rng)];
}

double mean(const std::vector<int>& v, std::size_t from, std::size_t to) {
  double s = 0;
  for (std::size_t i = from; i < to; ++i) s += v[i];
  return s / double(to - from);
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t episodes = 150, k = 4, max_steps = 1000;
  std::uint64_t seed = 7;
  float novelty = 0.03f, learning_rate = 0.5f;
  CLI::App app{"KNN-Q learning on the mountain car"};
  app.add_option("--episodes", episodes)->check(CLI::Range(10ul, 100000ul));
  app.add_option("--k", k)->check(CLI::Range(1ul, 64ul));
  app.add_option("--seed", seed);
  app.add_option("--novelty", novelty, "store a state farther than this from every stored one")
      ->check(CLI::Range(0.001, 1.0));
  app.add_option("--learning-rate", learning_rate)->check(CLI::Range(0.001, 1.0));
  CLI11_PARSE(app, argc, argv);

  std::mt19937_64 rng(seed);
  MountainCar car;
  KnnQ agent(k, novelty, learning_rate);
  std::printf("KNN-Q on the mountain car: k = %zu, %s, seed %llu\n", k, agent.backend().c_str(),
              (unsigned long long)seed);
  std::printf("episode  return  stored states\n");
  std::vector<int> returns;
  for (std::size_t episode = 1; episode <= episodes; ++episode) {
    car.reset(rng);
    auto state = car.observe();
    KnnQ::Lookup here = agent.lookup(state);
    int steps = 0;
    bool arrived = false;
    while (!arrived && steps < int(max_steps)) {
      const std::size_t action = greedy(here.q, rng);
      arrived = car.step(action);
      ++steps;
      const auto next_state = car.observe();
      float future = 0;  // nothing more to come once the car is at the flag
      if (!arrived) {
        const QValues next = agent.lookup(next_state).q;
        future = *std::max_element(next.begin(), next.end());
      }
      agent.learn(state, here, action, -1.0f + future);
      state = next_state;
      here = arrived ? KnnQ::Lookup{} : agent.lookup(state);  // fresh: this step's learning included
    }
    returns.push_back(-steps);
    if (episode % 10 == 0 || episode == 1) {
      std::printf("%7zu  %6d  %6zu   %s\n", episode, -steps, agent.size(),
                  std::string(std::size_t(steps / 25), '#').c_str());
    }
  }
  const double first = mean(returns, 0, 10), last = mean(returns, returns.size() - 10, returns.size());
  const bool learned = last > first + 100 && last > -300;
  std::printf("mean return: first 10 episodes %.0f, last 10 episodes %.0f\nlearned: %s\n", first, last,
              learned ? "yes" : "no");
  return learned ? 0 : 1;
}
