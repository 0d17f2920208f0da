// A crash in the middle of save(): a child process saves a store over and over (publishing a
// seeded batch between saves) and is killed with SIGKILL at random moments, at least 200 times.
// After every kill the checkpoint must load and equal one of the epochs the child published.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "reliability/checkpoint_support.hpp"

using namespace checkpoint_test;

TEST_CASE("checkpoint: a process killed at random points of save() always leaves a whole checkpoint of a published epoch") {
  // CPU stores of one thread: the parent forks, and a forked child may only rely on the thread
  // that forked.
  const StoreConfig config = small_config(3, Metric::L2, TargetSpec::classes(3), BackendKind::Cpu);
  const std::uint64_t seed = test::seed() ^ 5301;
  constexpr int kEpochs = 40;
  std::vector<std::vector<std::byte>> expected;  // epoch -> state
  {
    ReferenceSet ref(config);
    std::mt19937_64 g(seed);
    std::vector<bool> present(400);
    expected.push_back(state_bytes(ref));
    for (int e = 1; e <= kEpochs; ++e) {
      random_batch(ref, g, present, 40);
      ref.publish();
      expected.push_back(state_bytes(ref));
    }
  }
  ScratchDir dir;
  const std::string path = dir.file("crash.skc");
  ReferenceSet(config).save(path);  // a checkpoint exists before the first child starts
  auto timing = test::rng(5302);
  const int kills = 200;
  std::vector<int> seen(kEpochs + 1, 0);
  const auto start = std::chrono::steady_clock::now();
  for (int kill = 0; kill < kills; ++kill) {
    // The child says when its first save is done: the random wait starts there, not at the
    // fork, whose cost (large under a sanitizer, on a loaded machine) could outlast the wait, so
    // that every kill would land before the child saved anything.
    int saved[2];
    REQUIRE(::pipe(saved) == 0);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      // The child: the same seeded sequence, a save after every publish, forever (from a random
      // epoch onwards, so that saves of every epoch are cut).
      ::close(saved[0]);
      try {
        ReferenceSet set(config);
        std::mt19937_64 g(seed);
        std::vector<bool> present(400);
        for (int e = 1;; ++e) {
          if (e > kEpochs) {
            set = ReferenceSet(config);
            g.seed(seed);
            std::fill(present.begin(), present.end(), false);
            e = 1;
          }
          random_batch(set, g, present, 40);
          set.publish();
          set.save(path);
          if (saved[1] >= 0) {
            const char one = 1;
            if (::write(saved[1], &one, 1) != 1) ::_exit(4);
            ::close(saved[1]);
            saved[1] = -1;
          }
        }
      } catch (...) {
        ::_exit(3);
      }
    }
    ::close(saved[1]);
    char one = 0;
    const bool first_save = ::read(saved[0], &one, 1) == 1;  // 0: the child ended before it
    ::close(saved[0]);
    if (first_save) std::this_thread::sleep_for(std::chrono::microseconds(timing() % 30000));
    REQUIRE(::kill(child, SIGKILL) == 0);
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    REQUIRE(WIFSIGNALED(status));  // not an early exit (which would mean save() threw)
    LoadReport report;
    ReferenceSet loaded = ReferenceSet::load(path, {}, &report);
    REQUIRE(report.epoch <= std::uint64_t(kEpochs));
    REQUIRE(state_bytes(loaded) == expected[report.epoch]);
    ++seen[report.epoch];
  }
  // The temporary files of the killed saves (path.tmp.XXXXXX) are all that is left besides it.
  int leftovers = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    const std::string name = entry.path().filename().string();
    if (name == "crash.skc") continue;
    REQUIRE(name.rfind("crash.skc.tmp.", 0) == 0);
    ++leftovers;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int distinct = 0;
  for (const int n : seen) distinct += n > 0;
  MESSAGE(kills, " kills in ", seconds, " s: ", distinct, " distinct epochs loaded, ", leftovers,
          " temporary files left by killed saves");
  CHECK(distinct > 1);
}
