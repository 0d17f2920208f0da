// bench/cpu/cpu_peers: the CPU backend against CPU peers, all in one run on this machine.
//   bench_cpu_peers [--n 100000] [--d 128] [--k 16] [--q 1,2,4,...,1024] [--datasets 2] [--sets 3]
//                   [--min-reps 5] [--budget-ms 300] [--lowdim-d 2] [--moves 1000]
//                   [--parts highdim,lowdim] [--peers faiss,sklearn,nanoflann]
//                   [--python /usr/bin/python3] [--csv cpu-peers.csv]
//
// highdim (N x D, K): streamknn's CPU backend (BackendKind::Cpu, through the public API) against
//   FAISS IndexFlatL2 (exact, CPU) and scikit-learn NearestNeighbors(algorithm='brute'), the
//   latter run by sklearn_peer.py in a child process on the same data and query sets.
// lowdim (N x lowdim-d, K): the reference set changes between query batches. Each round moves
//   `moves` random points, makes them visible and answers one batch of Q queries: streamknn
//   pushes the moves, publish()es and searches; nanoflann's static KD-tree must be rebuilt
//   (buildIndex) before it can answer. Reported both as update + query and as query only.
//
// OpenMP: the bench runs itself with OMP_WAIT_POLICY=passive unless the caller set a policy, so
// a peer's idle OpenMP threads do not spin on the cores the next timed call needs.
// Timing: std::chrono::steady_clock around each call (each round), after one warm-up call per
// query set; at least min-reps calls and budget-ms per query set. For every (peer, Q): the
// median of each (data set, query set), then the median of those medians (min and max of them
// in the CSV). Data sets: 0 = uniform, 1 = a Gaussian mixture, so two distributions are seen.
// Every answer of query set 0 is checked in float64 distances: a peer's neighbour that is not
// among ours counts as a rounding-level difference (a tie) when its distance is within 1e-4
// (relative) of our k-th (FAISS and scikit-learn rank by the |x|^2 - 2xy + |y|^2 expansion in
// float32, whose error on these data reaches ~1e-5 of a distance), else as wrong. Prints an aligned table and writes CSV with the machine, commit and command line.
#include <dlfcn.h>
#include <link.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <faiss/IndexFlat.h>
#include <faiss/utils/distances.h>
#include <faiss/utils/utils.h>

#ifdef STREAMKNN_BENCH_NANOFLANN
#include <nanoflann.hpp>
#endif

#include "streamknn/streamknn.hpp"
#include "../bench_util.hpp"

namespace {

using bench::median;
using bench::numbers;
using bench::split;

using Clock = std::chrono::steady_clock;
using FaissId = faiss::Index::idx_t;
using Args = std::map<std::string, std::string>;

bool has(const std::string& list, const std::string& item) {
  const auto items = split(list);
  return std::find(items.begin(), items.end(), item) != items.end();
}

std::string run_command(const std::string& cmd) {
  std::string out;
  if (std::FILE* p = popen(cmd.c_str(), "r")) {
    char buf[512];
    while (std::fgets(buf, sizeof buf, p)) out += buf;
    pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

std::string file_field(const char* path, const std::string& key) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key, 0) == 0) {
      const auto colon = line.find(':');
      std::string v = colon == std::string::npos ? line : line.substr(colon + 1);
      v.erase(0, v.find_first_not_of(" \t"));
      return v;
    }
  }
  return "?";
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

/// Shared libraries of this process whose file name mentions BLAS or LAPACK.
std::string loaded_blas() {
  std::set<std::string> libs;
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* data) {
        const std::string path = info->dlpi_name ? info->dlpi_name : "";
        const std::string base = path.substr(path.find_last_of('/') + 1);
        if (base.find("blas") != std::string::npos || base.find("lapack") != std::string::npos) {
          char real[4096];
          static_cast<std::set<std::string>*>(data)->insert(realpath(path.c_str(), real) ? real : path);
        }
        return 0;
      },
      &libs);
  std::string out;
  for (const auto& l : libs) out += (out.empty() ? "" : ",") + l;
  using CoreName = char* (*)();
  if (auto core = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"))) {
    out += std::string(" (OpenBLAS core ") + core() + ")";
  }
  return out.empty() ? "none" : out;
}

/// Per (data set, query set) samples of one peer at one Q, reduced as the header says.
struct Series {
  std::vector<double> set_medians;  // seconds
  void add(const std::vector<double>& samples) { set_medians.push_back(median(samples)); }
  double med() const { return median(set_medians); }
  double lo() const { return *std::min_element(set_medians.begin(), set_medians.end()); }
  double hi() const { return *std::max_element(set_medians.begin(), set_medians.end()); }
};

/// Timing loop: one warm-up call, then calls until min_reps and budget are both reached.
template <class F>
std::vector<double> time_calls(F&& call, int min_reps, double budget_s) {
  call();
  std::vector<double> t;
  double spent = 0;
  while (int(t.size()) < min_reps || spent < budget_s) {
    const auto a = Clock::now();
    call();
    const double s = std::chrono::duration<double>(Clock::now() - a).count();
    t.push_back(s);
    spent += s;
  }
  return t;
}

struct Check {
  std::size_t queries = 0, ties = 0, wrong = 0;
  void operator+=(const Check& o) {
    queries += o.queries;
    ties += o.ties;
    wrong += o.wrong;
  }
};

/// Compares a peer's neighbour ids with ours, query by query, in float64 distances.
template <class Id>
Check check_against(const float* data, std::size_t d, const float* queries, std::size_t nq, std::size_t k,
                    const std::vector<streamknn::PointId>& ours, const Id* theirs) {
  auto dist = [&](std::size_t q, std::size_t p) {
    double s = 0;
    for (std::size_t i = 0; i < d; ++i) {
      const double x = double(queries[q * d + i]) - double(data[p * d + i]);
      s += x * x;
    }
    return s;
  };
  Check c;
  c.queries = nq;
  for (std::size_t q = 0; q < nq; ++q) {
    const std::set<std::uint64_t> mine(ours.begin() + q * k, ours.begin() + (q + 1) * k);
    double kth = 0;
    for (std::size_t j = 0; j < k; ++j) kth = std::max(kth, dist(q, ours[q * k + j]));
    bool tie = false, wrong = false;
    for (std::size_t j = 0; j < k; ++j) {
      const auto id = static_cast<std::uint64_t>(theirs[q * k + j]);
      if (mine.count(id)) continue;
      if (std::abs(dist(q, id) - kth) <= 1e-4 * std::max(kth, 1e-30)) {
        tie = true;
      } else {
        wrong = true;
      }
    }
    c.ties += tie && !wrong;
    c.wrong += wrong;
  }
  return c;
}

/// Data set `which`: 0 uniform in [0, scale)^d, 1 a mixture of 64 Gaussians (sigma 5% of scale).
struct Generator {
  std::mt19937_64 g;
  int which;
  std::size_t d;
  float scale;
  std::vector<float> centres;
  Generator(std::uint64_t seed, int which_, std::size_t d_, float scale_) : g(seed), which(which_), d(d_), scale(scale_) {
    std::uniform_real_distribution<float> u(0, scale);
    centres.resize(64 * d);
    for (auto& c : centres) c = u(g);
  }
  void fill(float* x, std::size_t count) {
    std::uniform_real_distribution<float> u(0, scale);
    std::normal_distribution<float> n(0, 0.05f * scale);
    std::uniform_int_distribution<std::size_t> pick(0, 63);
    for (std::size_t r = 0; r < count; ++r) {
      const float* c = centres.data() + pick(g) * d;
      for (std::size_t i = 0; i < d; ++i) x[r * d + i] = which == 0 ? u(g) : c[i] + n(g);
    }
  }
};

streamknn::ReferenceSet make_ours(const std::vector<float>& data, std::size_t n, std::size_t d) {
  using namespace streamknn;
  StoreConfig config;
  config.dim = d;
  config.metric = Metric::L2;
  config.capacity_hint = n;
  config.queue_capacity = 1 << 16;
  config.backend = BackendKind::Cpu;
  ReferenceSet store(config);
  for (PointId id = 0; id < n; ++id) {
    while (!store.try_push(Update::insert(id, std::span<const float>(data.data() + id * d, d)))) store.publish();
  }
  store.publish();
  return store;
}

struct Row {
  std::string part, peer, mode;
  std::size_t n, d, k, q;
  Series s;
  double ratio;  // ours q/s over this peer's q/s
  Check check;
};

std::string sh_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string source_dir() { return STREAMKNN_SOURCE_DIR; }

}  // namespace

#ifdef STREAMKNN_BENCH_NANOFLANN
namespace {
struct Cloud {
  std::vector<float> pts;  // n x 2
  std::size_t d = 2;
  std::size_t kdtree_get_point_count() const { return pts.size() / d; }
  float kdtree_get_pt(std::size_t idx, std::size_t dim) const { return pts[idx * d + dim]; }
  template <class BBox>
  bool kdtree_get_bbox(BBox&) const {
    return false;
  }
};
}  // namespace
#endif

int main(int argc, char** argv) try {
  using namespace streamknn;
  // The peers' OpenMP threads (FAISS, OpenBLAS, the nanoflann loop) spin for a while after each
  // parallel region by default, and the measurements are interleaved, so that spinning takes a
  // core from whichever library is timed next (on the 2-core development machine it halved
  // streamknn's batches of 1,024). Unless the caller chose a policy, run again with
  // OMP_WAIT_POLICY=passive: libgomp reads it when it loads, before main.
  if (!std::getenv("OMP_WAIT_POLICY") && setenv("OMP_WAIT_POLICY", "passive", 1) == 0) {
    execv("/proc/self/exe", argv);
    unsetenv("OMP_WAIT_POLICY");  // exec failed: go on with the default (the header says so)
  }
  Args args{{"--n", "100000"},        {"--d", "128"},          {"--k", "16"},
            {"--q", "1,2,4,8,16,32,64,128,256,512,1024"},     {"--datasets", "2"},
            {"--sets", "3"},          {"--min-reps", "5"},     {"--budget-ms", "300"},
            {"--lowdim-d", "2"},      {"--moves", "1000"},     {"--parts", "highdim,lowdim"},
            {"--peers", "faiss,sklearn,nanoflann"},           {"--python", "/usr/bin/python3"},
            {"--csv", "cpu-peers.csv"}};
  for (int i = 1; i < argc; i += 2) {
    if (!args.count(argv[i]) || i + 1 >= argc) {
      std::fprintf(stderr, "unknown or incomplete option %s (see the comment at the top of cpu_peers.cpp)\n", argv[i]);
      return 2;
    }
    args[argv[i]] = argv[i + 1];
  }
  std::string command;
  for (int i = 0; i < argc; ++i) command += (i ? " " : "") + std::string(argv[i]);
  const std::size_t n = std::stoul(args["--n"]), d = std::stoul(args["--d"]), k = std::stoul(args["--k"]);
  const std::size_t lowd = std::stoul(args["--lowdim-d"]), moves = std::stoul(args["--moves"]);
  const auto qs = numbers(args["--q"]);
  const int datasets = std::stoi(args["--datasets"]), sets = std::stoi(args["--sets"]);
  const int min_reps = std::stoi(args["--min-reps"]);
  const double budget = std::stod(args["--budget-ms"]) * 1e-3;
  const std::string peers = args["--peers"], parts = args["--parts"];
  const std::size_t qmax = *std::max_element(qs.begin(), qs.end());

  // Children (the scikit-learn peer) load the same BLAS as this process: the directory this
  // binary's RUNPATH names, unless LD_LIBRARY_PATH already chose one.
#ifdef STREAMKNN_BENCH_BLAS_DIR
  if (!std::getenv("LD_LIBRARY_PATH")) setenv("LD_LIBRARY_PATH", STREAMKNN_BENCH_BLAS_DIR, 1);
#endif

  std::vector<std::string> header;
  header.push_back("machine," + file_field("/proc/cpuinfo", "model name") + "," +
                   std::to_string(std::thread::hardware_concurrency()) + " logical CPUs," +
                   file_field("/proc/meminfo", "MemTotal") + "," + run_command("uname -sr"));
  const std::string commit = run_command("git -C " + sh_quote(source_dir()) + " rev-parse --short=12 HEAD");
  const std::string dirty = run_command("git -C " + sh_quote(source_dir()) +
                                        " status --porcelain -- lib include bench/cpu | tr '\\n' ' '");
  header.push_back("commit," + commit + (dirty.empty() ? "" : ",uncommitted: " + dirty));
  header.push_back("command," + command);
  header.push_back("load_average_at_start," + load_average());
  header.push_back("faiss," + std::to_string(FAISS_VERSION_MAJOR) + "." + std::to_string(FAISS_VERSION_MINOR) + "." +
                   std::to_string(FAISS_VERSION_PATCH) + " (Debian libfaiss-dev; IndexFlatL2),compile options: " + faiss::get_compile_options() +
                   ",omp threads " + std::to_string(omp_get_max_threads()) + ",OMP_WAIT_POLICY " +
                   (std::getenv("OMP_WAIT_POLICY") ? std::getenv("OMP_WAIT_POLICY") : "unset (spins)") +
                   ",blas threshold Q>=" + std::to_string(faiss::distance_compute_blas_threshold) +
                   ",blas " + loaded_blas());
#ifdef STREAMKNN_BENCH_NANOFLANN
  header.push_back("nanoflann," + std::to_string(NANOFLANN_VERSION >> 8) + "." +
                   std::to_string((NANOFLANN_VERSION >> 4) & 0xf) + "." + std::to_string(NANOFLANN_VERSION & 0xf) +
                   " (header version),KDTreeSingleIndexAdaptor leaf 10,queries over " +
                   std::to_string(omp_get_max_threads()) + " OpenMP threads,single-threaded build");
#endif
  header.push_back("timing,steady_clock per call after 1 warm-up per query set; >= " + args["--min-reps"] +
                   " calls and " + args["--budget-ms"] + " ms per set; median over (data set x query set) medians");
  for (const auto& h : header) std::printf("# %s\n", h.c_str());
  std::fflush(stdout);

  std::vector<Row> rows;
  const std::string python = args["--python"];
  const std::string script = source_dir() + "/bench/cpu/sklearn_peer.py";
  char tmpl[] = "/tmp/streamknn-cpu-peers-XXXXXX";
  const std::string tmp = mkdtemp(tmpl) ? tmpl : "/tmp";

  // ------------------------------------------------------------------------------------------
  if (has(parts, "highdim")) {
    std::map<std::pair<std::string, std::size_t>, Row> table;
    auto row = [&](const std::string& peer, std::size_t q) -> Row& {
      Row& r = table[{peer, q}];
      r.part = "highdim", r.peer = peer, r.mode = "query", r.n = n, r.d = d, r.k = k, r.q = q;
      return r;
    };
    for (int ds = 0; ds < datasets; ++ds) {
      Generator gen(1000 + ds, ds % 2, d, 1.0f);
      std::vector<float> data(n * d);
      gen.fill(data.data(), n);
      // query sets: for each Q (in --q order), `sets` sets of Q queries from the same distribution
      std::vector<std::vector<std::vector<float>>> qsets(qs.size());
      for (std::size_t qi = 0; qi < qs.size(); ++qi) {
        for (int s = 0; s < sets; ++s) {
          qsets[qi].emplace_back(qs[qi] * d);
          gen.fill(qsets[qi].back().data(), qs[qi]);
        }
      }
      const auto t0 = Clock::now();
      ReferenceSet ours = make_ours(data, n, d);
      const double load_ours = std::chrono::duration<double>(Clock::now() - t0).count();
      faiss::IndexFlatL2 flat{faiss::Index::idx_t(d)};
      if (has(peers, "faiss")) flat.add(FaissId(n), data.data());
      std::printf("# data set %d (%s): %zu x %zu, ours %s loaded in %.2f s\n", ds, ds % 2 ? "gaussian mixture" : "uniform",
                  n, d, ours.backend_name().c_str(), load_ours);
      std::vector<float> fd(qmax * k);
      std::vector<FaissId> fi(qmax * k);
      for (std::size_t qi = 0; qi < qs.size(); ++qi) {
        const std::size_t q = qs[qi];
        for (int s = 0; s < sets; ++s) {
          const auto& x = qsets[qi][s];
          Neighbors mine;
          row("ours", q).s.add(time_calls([&] { mine = ours.search(x, k); }, min_reps, budget));
          if (!has(peers, "faiss")) continue;
          row("faiss", q).s.add(time_calls([&] { flat.search(FaissId(q), x.data(), FaissId(k), fd.data(), fi.data()); },
                                           min_reps, budget));
          if (s == 0) row("faiss", q).check += check_against(data.data(), d, x.data(), q, k, mine.ids, fi.data());
        }
        std::printf("# ds %d Q %zu done (load %s)\n", ds, q, load_average().c_str());
        std::fflush(stdout);
      }
      if (has(peers, "sklearn")) {
        const std::string data_path = tmp + "/data.f32", query_path = tmp + "/queries.f32", ids_path = tmp + "/ids.i64";
        std::FILE* f = std::fopen(data_path.c_str(), "wb");
        std::fwrite(data.data(), sizeof(float), data.size(), f);
        std::fclose(f);
        f = std::fopen(query_path.c_str(), "wb");
        for (const auto& per_q : qsets)
          for (const auto& x : per_q) std::fwrite(x.data(), sizeof(float), x.size(), f);
        std::fclose(f);
        const std::string cmd = sh_quote(python) + " " + sh_quote(script) + " --data " + data_path + " --queries " +
                                query_path + " --ids " + ids_path + " --n " + std::to_string(n) + " --d " +
                                std::to_string(d) + " --k " + std::to_string(k) + " --qs " + args["--q"] +
                                " --sets " + std::to_string(sets) + " --min-reps " + args["--min-reps"] +
                                " --budget-ms " + args["--budget-ms"];
        std::map<std::pair<std::size_t, int>, std::vector<double>> samples;
        std::FILE* p = popen(cmd.c_str(), "r");
        char line[4096];
        while (p && std::fgets(line, sizeof line, p)) {
          std::size_t q;
          int s;
          double sec;
          if (std::sscanf(line, "T %zu %d %lf", &q, &s, &sec) == 3) {
            samples[{q, s}].push_back(sec);
          } else if (line[0] == '#' && ds == 0) {
            std::string l(line + 2);
            while (!l.empty() && l.back() == '\n') l.pop_back();
            header.push_back(l);
            std::printf("# %s\n", l.c_str());
          }
        }
        const int status = p ? pclose(p) : -1;
        if (status != 0) throw std::runtime_error("sklearn peer failed (" + std::to_string(status) + "): " + cmd);
        std::vector<std::int64_t> ids;
        std::ifstream in(ids_path, std::ios::binary);
        std::size_t total = 0;
        for (auto q : qs) total += q * k;
        ids.resize(total);
        in.read(reinterpret_cast<char*>(ids.data()), std::streamsize(total * sizeof(std::int64_t)));
        std::size_t off = 0;
        for (std::size_t qi = 0; qi < qs.size(); ++qi) {
          const std::size_t q = qs[qi];
          for (int s = 0; s < sets; ++s) row("sklearn", q).s.add(samples.at({q, s}));
          const Neighbors mine = ours.search(qsets[qi][0], k);
          row("sklearn", q).check += check_against(data.data(), d, qsets[qi][0].data(), q, k, mine.ids, ids.data() + off);
          off += q * k;
        }
        std::printf("# ds %d sklearn done (load %s)\n", ds, load_average().c_str());
      }
    }
    std::printf("\nN=%zu D=%zu K=%zu: queries/s (median), ratio = ours/peer (> 1: ours faster)\n", n, d, k);
    std::printf("%6s %12s %12s %8s %12s %8s %14s\n", "Q", "ours q/s", "faiss q/s", "ours/fa", "sklearn q/s", "ours/sk",
                "wrong(fa,sk)");
    for (auto q : qs) {
      Row& o = row("ours", q);
      o.ratio = 1;
      rows.push_back(o);
      std::string line;
      char buf[256];
      std::snprintf(buf, sizeof buf, "%6zu %12.0f", q, q / o.s.med());
      line += buf;
      std::size_t wrong[2] = {0, 0};
      int w = 0;
      for (const char* peer : {"faiss", "sklearn"}) {
        if (!table.count({peer, q})) {
          std::snprintf(buf, sizeof buf, " %12s %8s", "-", "-");
        } else {
          Row& r = row(peer, q);
          r.ratio = r.s.med() / o.s.med();
          wrong[w] = r.check.wrong;
          rows.push_back(r);
          std::snprintf(buf, sizeof buf, " %12.0f %8.2f", q / r.s.med(), r.ratio);
        }
        line += buf;
        ++w;
      }
      std::snprintf(buf, sizeof buf, " %7zu,%zu", wrong[0], wrong[1]);
      std::printf("%s%s\n", line.c_str(), buf);
    }
    std::fflush(stdout);
  }

  // ------------------------------------------------------------------------------------------
  if (has(parts, "lowdim")) {
#ifndef STREAMKNN_BENCH_NANOFLANN
    std::printf("# lowdim part skipped: built without nanoflann (libnanoflann-dev)\n");
#else
    // The dimension is a template argument, as nanoflann recommends for 2-D clouds.
    using Tree = nanoflann::KDTreeSingleIndexAdaptor<nanoflann::L2_Simple_Adaptor<float, Cloud>, Cloud, 2, std::uint32_t>;
    if (lowd != 2) throw std::runtime_error("--lowdim-d: the nanoflann peer is built for 2 dimensions");
    std::map<std::pair<std::string, std::size_t>, Row> table;
    auto row = [&](const std::string& peer, const std::string& mode, std::size_t q) -> Row& {
      Row& r = table[{peer + "/" + mode, q}];
      r.part = "lowdim", r.peer = peer, r.mode = mode, r.n = n, r.d = lowd, r.k = k, r.q = q;
      return r;
    };
    const float scale = 10000;  // metres: a city
    for (int ds = 0; ds < datasets; ++ds) {
      Generator gen(2000 + ds, ds % 2, lowd, scale);
      std::vector<float> data(n * lowd);
      gen.fill(data.data(), n);
      ReferenceSet ours = make_ours(data, n, lowd);
      Cloud cloud;
      cloud.d = lowd;
      cloud.pts = data;
      Tree tree(int(lowd), cloud, nanoflann::KDTreeSingleIndexAdaptorParams(10));
      tree.buildIndex();
      std::mt19937_64 g(3000 + ds);
      std::uniform_int_distribution<PointId> pick(0, n - 1);
      std::normal_distribution<float> step(0, 0.01f * scale);
      std::printf("# low-dim data set %d (%s): %zu x %zu, %zu moves per round\n", ds,
                  ds % 2 ? "gaussian mixture" : "uniform", n, lowd, moves);
      for (std::size_t q : qs) {
        std::vector<std::uint32_t> ni(q * k);
        std::vector<float> nd(q * k);
        for (int s = 0; s < sets; ++s) {
          std::vector<float> x(q * lowd);
          gen.fill(x.data(), q);
          std::vector<PointId> ids(moves);
          std::vector<float> to(moves * lowd);
          auto next_moves = [&] {
            for (std::size_t m = 0; m < moves; ++m) {
              ids[m] = pick(g);
              for (std::size_t i = 0; i < lowd; ++i) to[m * lowd + i] = data[ids[m] * lowd + i] + step(g);
            }
            for (std::size_t m = 0; m < moves; ++m) std::copy_n(&to[m * lowd], lowd, &data[ids[m] * lowd]);
          };
          std::vector<double> ou, oq, nu, nq_;
          Neighbors mine;
          double spent_o = 0, spent_n = 0;
          for (int round = 0; round <= min_reps || spent_o < budget || spent_n < budget; ++round) {
            next_moves();
            const auto a = Clock::now();
            for (std::size_t m = 0; m < moves; ++m) {
              while (!ours.try_push(Update::move(ids[m], std::span<const float>(&to[m * lowd], lowd)))) ours.publish();
            }
            ours.publish();
            const auto b = Clock::now();
            mine = ours.search(x, k);
            const auto c = Clock::now();
            for (std::size_t m = 0; m < moves; ++m) std::copy_n(&to[m * lowd], lowd, &cloud.pts[ids[m] * lowd]);
            tree.buildIndex();
            const auto e = Clock::now();
#pragma omp parallel for schedule(static) if (q > 1)
            for (std::size_t i = 0; i < q; ++i) {
              nanoflann::KNNResultSet<float, std::uint32_t> rs(k);
              rs.init(&ni[i * k], &nd[i * k]);
              tree.findNeighbors(rs, &x[i * lowd], nanoflann::SearchParams());
            }
            const auto f = Clock::now();
            if (round == 0) continue;  // warm-up round
            auto sec = [](auto u, auto v) { return std::chrono::duration<double>(v - u).count(); };
            ou.push_back(sec(a, c));
            oq.push_back(sec(b, c));
            nu.push_back(sec(c, f));
            nq_.push_back(sec(e, f));
            spent_o += sec(a, c);
            spent_n += sec(c, f);
          }
          row("ours", "update+query", q).s.add(ou);
          row("ours", "query", q).s.add(oq);
          row("nanoflann", "rebuild+query", q).s.add(nu);
          row("nanoflann", "query", q).s.add(nq_);
          if (s == 0) {
            row("nanoflann", "query", q).check += check_against(cloud.pts.data(), lowd, x.data(), q, k, mine.ids, ni.data());
          }
        }
        std::printf("# low-dim ds %d Q %zu done (load %s)\n", ds, q, load_average().c_str());
        std::fflush(stdout);
      }
    }
    std::printf("\nN=%zu D=%zu K=%zu, %zu moves made visible before every batch: queries/s (median)\n", n, lowd, k,
                moves);
    std::printf("%6s %14s %16s %8s | %12s %12s %8s %6s\n", "Q", "ours upd+q", "nanoflann reb+q", "ours/nf", "ours query",
                "nf query", "ours/nf", "wrong");
    for (auto q : qs) {
      Row& ou = row("ours", "update+query", q);
      Row& oq = row("ours", "query", q);
      Row& nu = row("nanoflann", "rebuild+query", q);
      Row& nq_ = row("nanoflann", "query", q);
      ou.ratio = oq.ratio = 1;
      nu.ratio = nu.s.med() / ou.s.med();
      nq_.ratio = nq_.s.med() / oq.s.med();
      for (Row* r : {&ou, &nu, &oq, &nq_}) rows.push_back(*r);
      std::printf("%6zu %14.0f %16.0f %8.2f | %12.0f %12.0f %8.2f %6zu\n", q, q / ou.s.med(), q / nu.s.med(), nu.ratio,
                  q / oq.s.med(), q / nq_.s.med(), nq_.ratio, nq_.check.wrong);
    }
#endif
  }

  header.push_back("load_average_at_end," + load_average());
  std::printf("# load average at end: %s\n", load_average().c_str());
  std::FILE* csv = std::fopen(args["--csv"].c_str(), "w");
  if (!csv) throw std::runtime_error("cannot write " + args["--csv"]);
  for (const auto& h : header) std::fprintf(csv, "# %s\n", h.c_str());
  std::fprintf(csv, "part,N,D,K,Q,peer,mode,median_ms,min_set_ms,max_set_ms,qps,ours_over_peer,checked,tie_diffs,wrong\n");
  for (const Row& r : rows) {
    std::fprintf(csv, "%s,%zu,%zu,%zu,%zu,%s,%s,%.4f,%.4f,%.4f,%.1f,%.3f,%zu,%zu,%zu\n", r.part.c_str(), r.n, r.d, r.k,
                 r.q, r.peer.c_str(), r.mode.c_str(), r.s.med() * 1e3, r.s.lo() * 1e3, r.s.hi() * 1e3, r.q / r.s.med(),
                 r.ratio, r.check.queries, r.check.ties, r.check.wrong);
  }
  std::fclose(csv);
  std::remove((tmp + "/data.f32").c_str());
  std::remove((tmp + "/queries.f32").c_str());
  std::remove((tmp + "/ids.i64").c_str());
  rmdir(tmp.c_str());
  std::printf("# wrote %s\n", args["--csv"].c_str());
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_cpu_peers: %s\n", e.what());
  return 1;
}
