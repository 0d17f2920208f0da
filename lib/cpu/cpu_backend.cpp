// The CPU backend: two HostStore buffers. Searches pin the front buffer; publish() writes the
// back buffer once its last reader has left, swaps, and replays the same batch onto the other
// buffer at the next publish, so the two never drift and no publish copies the whole store,
// except the first after a load of every slot (from_points, a checkpoint without free slots):
// such a load fills the front buffer only, and the back buffer becomes its copy when a publish
// first needs it, so a store that is loaded and then only searched holds one buffer.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <span>
#include <thread>
#include <unordered_map>

#include "core/aggregate.hpp"
#include "core/backend.hpp"
#include "core/check.hpp"
#include "core/memory.hpp"
#include "core/metric_space.hpp"
#include "cpu/cpu_search.hpp"
#include "cpu/host_store.hpp"
#include "core/thread_pool.hpp"
#include "streamknn/error.hpp"

namespace streamknn::detail {

namespace {

/// Threads a search may use, the caller's included: StoreConfig::cpu_threads, or one per
/// hardware thread.
std::size_t threads_for(const StoreConfig& config) {
  if (config.cpu_threads > 0) return config.cpu_threads;
  return std::max(1u, std::thread::hardware_concurrency());
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const StoreConfig& config)
      : config_(config),
        stored_dim_(stored_dim(config.metric, config.dim)),
        buffers_{Buffer(stored_dim_, config.target, config.attribute_words),
                 Buffer(stored_dim_, config.target, config.attribute_words)},
        pool_(threads_for(config) - 1) {}

  BackendKind kind() const noexcept override { return BackendKind::Cpu; }
  bool runs_radius() const noexcept override { return true; }

  std::string name() const override {
    const std::size_t threads = pool_.concurrency();
    return concat("cpu (", threads, threads == 1 ? " thread, " : " threads, ", cpu_search_isa(), ")");
  }

  void reserve(std::size_t slots, std::size_t batch_ops) override {
    Buffer& back = buffers_[1 - front_];
    wait_unread(back);
    try {
      // Room to keep a copy of the coming batch, so that apply() cannot fail half-way.
      pending_.reserve(batch_ops, stored_dim_,
                       config_.target.value_count(),
                       config_.attribute_words);
      const std::size_t needed = std::max(slots, pending_slots_);
      refuse_beyond_memory(double(needed) * double(row_stride(stored_dim_)) * sizeof(float),
                           "ReferenceSet: ", needed, " points of dim ", config_.dim, " on the CPU backend");
      if (back_unfilled_) {  // after a load: the back buffer becomes the front's copy (see the top)
        back.store = buffers_[front_].store;
        back.epoch = buffers_[front_].epoch;
        back_unfilled_ = false;
      }
      back.store.reserve(needed);
    } catch (const std::bad_alloc&) {
      throw OutOfMemory(concat("ReferenceSet::publish: host memory exhausted growing the store to ", slots,
                               " points of dim ", config_.dim));
    }
  }

  void apply(const ResolvedBatch& batch, std::uint64_t epoch) override {
    Buffer& back = buffers_[1 - front_];
    wait_unread(back);
    note_norms(batch);
    if (has_pending_) back.store.apply(pending_);
    back.store.apply(batch);
    back.epoch = epoch;
    {
      std::lock_guard lock(mutex_);
      front_ = 1 - front_;
    }
    pending_ = batch;
    has_pending_ = true;
    // The next publish replays this batch onto the other buffer, which must then hold every
    // slot the batch writes. That can be more than the next batch's high-water mark: slots
    // inserted and erased within this batch lie above the mark it leaves behind.
    pending_slots_ = 0;
    for (const auto* slots : {&batch.vector_slots, &batch.target_slots, &batch.id_slots, &batch.attribute_slots}) {
      for (const std::uint32_t s : *slots) pending_slots_ = std::max<std::size_t>(pending_slots_, std::size_t(s) + 1);
    }
  }

  NonFiniteWrite lookup_and_update(const QUpdateRequest& r, std::uint64_t epoch, QUpdate& out) override {
    const std::size_t nq = r.num_queries, k = r.k, outputs = config_.target.count;
    ResolvedBatch batch;  // the write-back: absolute target rows of the touched slots
    std::vector<PointId> row_ids;  // the id of each row of batch.values
    {
      const Pinned pinned(*this);
      const HostStore& store = pinned.buffer.store;
      std::vector<Candidate> found;
      find_neighbours(store, r.states.data(), nq, k, nullptr, found);

      // Estimates: per-action mean in neighbour order, in double (as the Mean aggregate), then
      // each query's increment alpha * delta, materialised as a float before it is added.
      std::vector<float> increment(nq, 0.0f);
      for (std::size_t q = 0; q < nq; ++q) {
        const Candidate* row = found.data() + q * k;
        std::size_t n = 0;
        while (n < k && row[n].id != kInvalidId) ++n;
        for (std::size_t j = 0; j < k; ++j) out.ids[q * k + j] = row[j].id;
        for (std::size_t a = 0; a < outputs; ++a) {
          double sum = 0;
          for (std::size_t j = 0; j < n; ++j) sum += double(store.values(row[j].slot)[a]);
          out.q_before[q * outputs + a] =
              n ? static_cast<float>(sum / double(n)) : std::numeric_limits<float>::quiet_NaN();
        }
        if (n) {
          const float delta = r.targets[q] - out.q_before[q * outputs + std::size_t(r.actions[q])];
          increment[q] = r.alpha * delta;
        }
      }
      // New rows: the snapshot's row plus the increments of every query that found the slot,
      // added in query order (the CUDA backend adds them in the same order).
      std::unordered_map<std::uint32_t, std::size_t> position;
      for (std::size_t q = 0; q < nq; ++q) {
        const Candidate* row = found.data() + q * k;
        for (std::size_t j = 0; j < k && row[j].id != kInvalidId; ++j) {
          auto [it, fresh] = position.try_emplace(row[j].slot, batch.target_slots.size());
          if (fresh) {
            batch.target_slots.push_back(row[j].slot);
            row_ids.push_back(row[j].id);
            const float* old = store.values(row[j].slot);
            batch.values.insert(batch.values.end(), old, old + outputs);
          }
          float& v = batch.values[it->second * outputs + std::size_t(r.actions[q])];
          v = v + increment[q];
        }
      }
      batch.slot_count = static_cast<std::uint32_t>(store.slot_count());
    }
    // Checked before anything is applied, so a refused batch leaves the snapshot as it was.
    // The rows are in first-appearance order: the first non-finite value is the one the CUDA
    // backend reports too.
    if (const std::size_t bad = first_non_finite(batch.values); bad != batch.values.size()) {
      return {true, row_ids[bad / outputs], static_cast<std::uint32_t>(bad % outputs), batch.values[bad]};
    }
    apply(batch, epoch);
    return {};
  }

  void restore(ResolvedBatch&& batch, std::uint64_t epoch) override {
    // Both buffers at once: nothing reads them yet, and no copy of the batch is kept for a replay.
    // A batch of every slot in order (a load) fills the front buffer in one pass, nothing zeroed
    // and then overwritten (from_points' rows become that buffer as they are), and leaves the
    // back buffer to the first publish (see the top).
    const bool whole = HostStore::fills_every_slot(batch, config_.target.kind != TargetSpec::Kind::None,
                                                   !batch.attribute_slots.empty());
    if (!whole || !cpu_rows_unpadded(stored_dim_)) batch.rows_to_vectors();
    note_norms(batch);  // before load() takes the rows
    try {
      refuse_beyond_memory(2.0 * double(batch.slot_count) * double(row_stride(stored_dim_)) * sizeof(float),
                           "ReferenceSet::load: ", batch.slot_count, " points of dim ", config_.dim,
                           " on the CPU backend");
      if (whole) {
        HostStore loaded(stored_dim_, config_.target, config_.attribute_words);
        loaded.load(batch);
        buffers_[front_].store = std::move(loaded);
        buffers_[1 - front_].store = HostStore(stored_dim_, config_.target, config_.attribute_words);
        back_unfilled_ = true;
      } else {
        for (Buffer& b : buffers_) b.store.reserve(batch.slot_count);
      }
    } catch (const std::bad_alloc&) {
      throw OutOfMemory(concat("ReferenceSet::load: host memory exhausted for ", batch.slot_count, " points of dim ",
                               config_.dim));
    }
    for (Buffer& b : buffers_) {
      if (!whole) b.store.apply(batch);
      b.epoch = epoch;
    }
  }

  void read_snapshot(StoreImage& image) const override {
    const Pinned pinned(*this);
    const HostStore& store = pinned.buffer.store;
    const std::size_t n = store.slot_count(), outputs = value_count();
    const bool classes = config_.target.kind == TargetSpec::Kind::Classes;
    image.epoch = pinned.buffer.epoch;
    image.slot_count = static_cast<std::uint32_t>(n);
    image.ids.assign(store.ids(), store.ids() + n);
    image.vectors.assign(n * stored_dim_, 0.0f);
    image.labels.assign(classes ? n : 0, 0);
    image.values.assign(n * outputs, 0.0f);
    for (std::size_t s = 0; s < n; ++s) {
      if (store.id(s) == kInvalidId) continue;
      float* out = image.vectors.data() + s * stored_dim_;
      if (store.by_column()) {
        for (std::size_t d = 0; d < stored_dim_; ++d) out[d] = store.column(d)[s];
      } else {
        std::copy_n(store.row(s), stored_dim_, out);
      }
      if (classes) image.labels[s] = store.label(s);
      std::copy_n(store.values(s), outputs, image.values.data() + s * outputs);
    }
  }

  void read_targets(std::span<const std::uint32_t> slots, ResolvedBatch& batch) const override {
    const Pinned pinned(*this);
    const HostStore& store = pinned.buffer.store;
    const std::size_t outputs = value_count();
    batch.target_slots.assign(slots.begin(), slots.end());
    batch.labels.clear();
    batch.values.clear();
    for (const std::uint32_t s : slots) {
      if (config_.target.kind == TargetSpec::Kind::Classes) batch.labels.push_back(store.label(s));
      batch.values.insert(batch.values.end(), store.values(s), store.values(s) + outputs);
    }
  }

  bool read_vectors(std::span<const std::uint32_t> slots, std::vector<float>& out) const override {
    const Pinned pinned(*this);
    const HostStore& store = pinned.buffer.store;
    out.resize(slots.size() * stored_dim_);
    for (std::size_t i = 0; i < slots.size(); ++i) {
      float* to = out.data() + i * stored_dim_;
      if (store.by_column()) {
        for (std::size_t d = 0; d < stored_dim_; ++d) to[d] = store.column(d)[slots[i]];
      } else {
        std::copy_n(store.row(slots[i]), stored_dim_, to);
      }
    }
    return true;
  }

  Ticket<QueryResult> submit(QueryRequest request) const override {
    const Pinned pinned(*this);
    return Ticket<QueryResult>::ready_with(run(pinned.buffer, request));
  }

 private:
  struct Buffer {
    Buffer(std::size_t stored_dim, TargetSpec target, std::size_t attribute_words)
        : store(stored_dim, target, attribute_words) {}
    HostStore store;
    std::uint64_t epoch = 0;
    mutable int readers = 0;  // guarded by mutex_
  };

  /// The front buffer, with its readers counted until destruction (a publish waits for them
  /// before writing it).
  struct Pinned {
    explicit Pinned(const CpuBackend& backend) : self(backend), buffer(backend.pin()) {}
    ~Pinned() { self.unpin(buffer); }
    Pinned(const Pinned&) = delete;
    Pinned& operator=(const Pinned&) = delete;
    const CpuBackend& self;
    const Buffer& buffer;
  };

  /// Exact k nearest of nq queries in stored form (exact_neighbours): found[q * k + j], and the
  /// reported distances where `distances` is given. The queries are padded to the store's row
  /// stride and aligned like its rows first.
  void find_neighbours(const HostStore& store, const float* queries, std::size_t nq, std::size_t k,
                       const IdRange* visible, std::vector<Candidate>& found, std::vector<float>* distances = nullptr,
                       const QueryRequest* request = nullptr) const {
    AlignedVector<float> padded;
    const ExactInput input = exact_input(store, queries, nq, k, visible, request, padded);
    std::vector<float> unused;
    exact_neighbours(input, pool_, found, distances ? *distances : unused);
    if (request && request->radius.active) {
      limit_to_radius(input, request->radius.limit_hi, request->radius.limit_lo, pool_, found,
                      distances ? *distances : unused);
    }
  }

  /// The exact search's input: the queries padded to the store's row stride (into padded) and
  /// aligned like its rows, the request's predicates where it has any.
  ExactInput exact_input(const HostStore& store, const float* queries, std::size_t nq, std::size_t k,
                         const IdRange* visible, const QueryRequest* request, AlignedVector<float>& padded) const {
    const std::size_t stride = store.stride();
    padded.assign(nq * stride, 0.0f);
    for (std::size_t q = 0; q < nq; ++q) {
      std::memcpy(padded.data() + q * stride, queries + q * stored_dim_, stored_dim_ * sizeof(float));
    }
    ExactInput input;
    input.screen.store = &store;
    input.screen.queries = padded.data();
    input.screen.num_queries = nq;
    input.screen.visible = visible;
    if (request && !request->where.empty()) {
      input.screen.where = request->where.data();
      input.screen.where_per_query = request->where.size() > 1;
    }
    input.screen.inner_product = config_.metric == Metric::InnerProduct;
    input.k = k;
    input.metric = static_cast<int>(config_.metric);
    input.stored_dim = stored_dim_;
    input.max_norm = max_norm_.load(std::memory_order_acquire);
    return input;
  }

  /// Raises max_norm_ to cover every vector of a batch (before the batch can be read).
  void note_norms(const ResolvedBatch& batch) {
    const std::span<const float> vectors =
        batch.rows.empty() ? std::span<const float>(batch.vectors) : std::span<const float>(batch.rows);
    if (config_.metric != Metric::InnerProduct || vectors.empty()) return;
    double largest = 0;
    for (std::size_t at = 0; at + stored_dim_ <= vectors.size(); at += stored_dim_) {
      double s = 0;
      for (std::size_t i = 0; i < stored_dim_; ++i) s += double(vectors[at + i]) * double(vectors[at + i]);
      largest = std::max(largest, s);
    }
    const double norm = std::sqrt(largest) * (1.0 + 0x1p-30);
    double seen = max_norm_.load(std::memory_order_relaxed);
    while (norm > seen && !max_norm_.compare_exchange_weak(seen, norm, std::memory_order_acq_rel)) {
    }
  }

  std::size_t value_count() const noexcept {
    return config_.target.value_count();
  }

  const Buffer& pin() const {
    std::lock_guard lock(mutex_);
    const Buffer& b = buffers_[front_];
    ++b.readers;
    return b;
  }
  void unpin(const Buffer& b) const {
    std::lock_guard lock(mutex_);
    if (--b.readers == 0) unread_.notify_all();
  }
  void wait_unread(const Buffer& b) const {
    std::unique_lock lock(mutex_);
    unread_.wait(lock, [&] { return b.readers == 0; });
  }

  QueryResult run(const Buffer& buffer, const QueryRequest& request) const {
    const HostStore& store = buffer.store;
    const std::size_t nq = request.num_queries, k = request.k;
    const IdRange* visible = request.visible.empty() ? nullptr : request.visible.data();
    if (request.radius.active && request.radius.all) {
      QueryResult result;
      AlignedVector<float> padded;
      const ExactInput input = exact_input(store, request.queries.data(), nq, 0, visible, &request, padded);
      radius_neighbours(input, request.radius.limit_hi, request.radius.limit_lo, request.radius.cap, pool_,
                        result.radius);
      result.radius.epoch = buffer.epoch;
      return result;
    }
    std::vector<Candidate> found;
    std::vector<float> distances;
    find_neighbours(store, request.queries.data(), nq, k, visible, found, &distances, &request);

    QueryResult result;
    const auto output = request.aggregate.output;
    if (output == AggregateSpec::Output::Neighbors) {
      Neighbors& n = result.neighbors;
      n.num_queries = nq;
      n.k = k;
      n.epoch = buffer.epoch;
      n.distances.resize(nq * k);
      n.ids.resize(nq * k);
      for (std::size_t i = 0; i < nq * k; ++i) {
        n.ids[i] = found[i].id;
        n.distances[i] = found[i].id == kInvalidId ? std::numeric_limits<float>::infinity() : distances[i];
      }
      return result;
    }
    aggregate(store, request, found, distances, result);
    result.classes.epoch = result.regression.epoch = buffer.epoch;
    return result;
  }

  void aggregate(const HostStore& store, const QueryRequest& request, const std::vector<Candidate>& found,
                 const std::vector<float>& distances, QueryResult& result) const {
    const std::size_t nq = request.num_queries, k = request.k;
    const bool classify = request.aggregate.output != AggregateSpec::Output::Values;
    const bool proba = request.aggregate.output == AggregateSpec::Output::Probabilities;
    const std::size_t classes = classify ? config_.target.count : 0;
    const std::size_t outputs = classify ? 0 : config_.target.count;
    result.size_predictions(request.aggregate.output, nq, config_.target.count);
    pool_.parallel_for(nq, [&](std::size_t q) {
      std::vector<float> dist;
      std::vector<std::int32_t> labels;
      std::vector<float> values;
      std::vector<double> scratch(k), class_weight(classes);
      const Candidate* row = found.data() + q * k;
      for (std::size_t j = 0; j < k && row[j].id != kInvalidId; ++j) {
        dist.push_back(distances[q * k + j]);
      }
      const std::size_t n = dist.size();
      if (classify) {
        for (std::size_t j = 0; j < n; ++j) labels.push_back(store.label(row[j].slot));
        result.classes.labels[q] =
            vote(dist, labels, request.aggregate.weights, class_weight, scratch,
                 proba ? result.classes.probabilities.data() + q * classes : nullptr);
        return;
      }
      values.resize(n);
      for (std::size_t o = 0; o < outputs; ++o) {
        for (std::size_t j = 0; j < n; ++j) values[j] = store.values(row[j].slot)[o];
        result.regression.values[q * outputs + o] = regress(dist, values, request.aggregate.regression, scratch);
      }
    });
  }

  StoreConfig config_;
  std::size_t stored_dim_;
  mutable std::mutex mutex_;  // guards front_ swaps and reader counts
  mutable std::condition_variable unread_;
  Buffer buffers_[2];
  int front_ = 0;
  ResolvedBatch pending_;     // applied to the front buffer, not yet to the back one
  bool has_pending_ = false;
  bool back_unfilled_ = false;  // the back buffer holds nothing yet: reserve() copies the front first
  std::size_t pending_slots_ = 0;  // slots pending_ writes (its highest slot + 1)
  mutable ThreadPool pool_;
  std::atomic<double> max_norm_{0.0};  // >= every stored vector's L2 norm (inner product; exact_rank.hpp)
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const StoreConfig& config) {
  if (!cpu_search_supported()) {
    throw BackendUnavailable(concat("CPU backend: the search kernels were built for ", cpu_search_isa(),
                                    " (AVX2 + FMA) and this CPU lacks them; rebuild with -DSTREAMKNN_CPU_ISA=portable"));
  }
  return std::make_unique<CpuBackend>(config);
}

}  // namespace streamknn::detail
