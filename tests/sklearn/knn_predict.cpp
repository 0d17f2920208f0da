// Test helper for the scikit-learn parity check: fits a store on a training CSV and predicts a
// test CSV through the public API.
//   knn_predict classify|regress K uniform|distance|median N_CLASSES_OR_OUTPUTS train.csv test.csv out.csv
// train.csv rows: features..., target (class label, or N outputs); test.csv rows: features.
// out.csv rows: label,p_0..p_{C-1} (classify) or value_0..value_{T-1} (regress).
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "streamknn/streamknn.hpp"

namespace {

std::vector<std::vector<float>> read_rows(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::vector<std::vector<float>> rows;
  for (std::string line; std::getline(in, line);) {
    std::vector<float> row;
    std::stringstream cells(line);
    for (std::string cell; std::getline(cells, cell, ',');) row.push_back(std::stof(cell));
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace

int main(int argc, char** argv) try {
  using namespace streamknn;
  if (argc != 9) {
    std::fprintf(stderr, "usage: knn_predict classify|regress K WEIGHTS N train.csv test.csv out.csv BACKEND\n");
    return 2;
  }
  const std::string task = argv[1], weights = argv[3];
  const std::size_t k = std::stoul(argv[2]);
  const std::uint32_t n = static_cast<std::uint32_t>(std::stoul(argv[4]));
  const auto train = read_rows(argv[5]), test = read_rows(argv[6]);
  const bool classify = task == "classify";
  const std::size_t targets = classify ? 1 : n;
  StoreConfig config;
  config.dim = train.at(0).size() - targets;
  config.target = classify ? TargetSpec::classes(n) : TargetSpec::outputs(n);
  config.backend = std::string(argv[8]) == "cuda" ? BackendKind::Cuda : BackendKind::Cpu;
  config.queue_capacity = train.size();
  ReferenceSet store(config);
  for (std::size_t i = 0; i < train.size(); ++i) {
    const std::span<const float> row(train[i]);
    if (classify) {
      store.insert(i, row.first(config.dim), static_cast<std::int32_t>(row[config.dim]));
    } else {
      store.insert(i, row.first(config.dim), row.subspan(config.dim));
    }
  }
  store.publish();
  std::vector<float> queries;
  for (const auto& r : test) queries.insert(queries.end(), r.begin(), r.end());
  std::FILE* out = std::fopen(argv[7], "w");
  if (classify) {
    const auto p = KnnClassifier(store, k, parse_weights(weights)).predict_proba(queries);
    for (std::size_t q = 0; q < p.num_queries; ++q) {
      std::fprintf(out, "%d", p.labels[q]);
      for (float v : p.probabilities_of(q)) std::fprintf(out, ",%.9g", v);
      std::fprintf(out, "\n");
    }
  } else {
    const auto agg = weights == "uniform" ? RegressionAggregate::Mean
                     : weights == "distance" ? RegressionAggregate::WeightedMean : RegressionAggregate::Median;
    const auto p = KnnRegressor(store, k, agg).predict(queries);
    for (std::size_t q = 0; q < p.num_queries; ++q) {
      for (std::size_t o = 0; o < p.num_outputs; ++o) std::fprintf(out, o ? ",%.9g" : "%.9g", p.values_of(q)[o]);
      std::fprintf(out, "\n");
    }
  }
  std::fclose(out);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "knn_predict: %s\n", e.what());
  return 1;
}
