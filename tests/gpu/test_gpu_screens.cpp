// GPU suite, multi-chunk scan paths and the screens (skips without a CUDA device): the CUDA
// backend against the CPU backend where one query is bounded by its first tiles; groups of 3-8
// with staged loads; the sample pass's tile-major blocks and its margin where every rank ties;
// batches screened by dot products in groups of 12 (inner product), 16 and 32 (and stores where
// only the screen's margin keeps the answer); the dense screen of batches over small stores;
// stores of about one tile per warp; the selection's first prefix.
#include "gpu/gpu_twin.hpp"

using namespace test;
using namespace gpu_twin;

TEST_CASE("GPU equals CPU where one query bounds itself from its first tiles (large stores, no sample pass)") {
  // One query over a store of three tiles or more per scan warp and dim > 8 runs no sample pass:
  // the scan's blocks publish their first tiles' smallest ranks and the last block lowers the
  // threshold to the k-th of them (up to k = the scan's block count; k = 300 is past it, the
  // plain cold start). Each metric kind, erased slots, duplicates, a store of one repeated point
  // (every rank ties: the answer is the k smallest ids), and different queries one after another
  // (each launch counts its blocks afresh).
  check_shapes(5210,
             {StoreShape{16, 600'000, 1, 3, Metric::L2, 0.2, false},
              StoreShape{128, 500'000, 64, 3, Metric::L2, 0.05, false},
              StoreShape{12, 700'000, 100, 2, Metric::InnerProduct, 0.1, false},
              StoreShape{40, 450'000, 33, 2, Metric::Cosine, 0.0, true},
              StoreShape{9, 1'000'000, 256, 2, Metric::L2, 0.5, false},
              StoreShape{16, 450'000, 300, 1, Metric::L2, 0.1, false},
              StoreShape{16, 500'000, 16, 2, Metric::L2, 0.0, false, true}},
             /*as_batch=*/false, /*each_alone=*/true);
}

TEST_CASE("GPU equals CPU on groups of 3-8 queries over multi-chunk stores (staged point loads)") {
  // Groups of 4 and 8 copy each warp's points into shared memory a stage of four chunks ahead,
  // as one stream across the warp's tiles: chunk counts that are and are not a multiple of the
  // stage (2, 5, 25, 32, 75, 196), stores with and without a sample pass, a warp with one tile or
  // many, partial groups, every multi-chunk metric kind, erased slots, duplicates, one repeated
  // point, visible ranges, each query alone (groups of one) and all in one batch. Where these
  // batches run a sample pass it gives the SMs few warps, so it loads eight chunks per round
  // (SampleParams::batched_loads), here also in partial rounds.
  check_shapes(5270,
               {StoreShape{8, 400'000, 16, 8, Metric::L2, 0.1, false},
                StoreShape{17, 300'000, 64, 4, Metric::InnerProduct, 0.05, true},
                StoreShape{100, 350'000, 128, 7, Metric::L2, 0.2, false},
                StoreShape{128, 500'000, 1, 5, Metric::Cosine, 0.0, true},
                StoreShape{300, 200'000, 100, 8, Metric::L2, 0.3, false},
                StoreShape{784, 70'000, 128, 4, Metric::L2, 0.0, false},
                StoreShape{784, 70'000, 64, 8, Metric::InnerProduct, 0.1, false},
                StoreShape{40, 20'000, 33, 3, Metric::L2, 0.1, false},
                StoreShape{128, 300'000, 64, 6, Metric::L2, 0.0, false, true}},
               /*as_batch=*/true, /*each_alone=*/true);
}

TEST_CASE("GPU equals CPU where the sample pass's tiles exceed L2 (tile-major sample blocks)") {
  // 1,500,000 x 300 and 1,600,000 x 256: the sample (every 32nd tile, about 56 MB) is larger
  // than an H100's 50 MB L2, so one tile's query groups rank it in consecutive blocks
  // (SampleParams::tile_major); 14 queries are 2 groups of 8 and 20 are 2 groups of 16, so a
  // block that took another group's or tile's queries would bound the wrong query; 10 queries are
  // one group of 12, two of its rows empty.
  check_shapes(5510,
               {StoreShape{300, 1'500'000, 32, 10, Metric::L2, 0.1, false},
                StoreShape{300, 1'500'000, 40, 14, Metric::L2, 0.0, false},
                StoreShape{256, 1'600'000, 50, 20, Metric::InnerProduct, 0.0, true}},
               /*as_batch=*/true, /*each_alone=*/false);
}

TEST_CASE("the split sample pass bounds every query where all ranks tie (its margin for the summation order)") {
  // With L2 ranks over 16+ chunks and 8+ queries the sample pass splits each sampled tile's
  // chunks between a block's warps, so its ranks are summed in another order than the scan's and
  // may come out an ulp or so below them; the k-th is raised by a proven margin. On a store of one
  // repeated point every rank ties: a bound below the scan's common rank would admit no point at
  // all. Dims 128 (two slices) to 1,024 (eight), small stores (every 8th tile sampled) and large
  // ones (every 32nd), partial query groups, k up to 128.
  check_shapes(5285,
               {StoreShape{784, 70'000, 64, 16, Metric::L2, 0.0, false, true},
                StoreShape{300, 300'000, 32, 8, Metric::L2, 0.0, false, true},
                StoreShape{1024, 20'000, 16, 12, Metric::L2, 0.0, false, true},
                StoreShape{128, 300'000, 128, 9, Metric::L2, 0.0, false, true},
                StoreShape{200, 100'000, 100, 20, Metric::Cosine, 0.0, false, true},
                StoreShape{132, 300'000, 8, 24, Metric::L2, 0.0, false, true},
                StoreShape{784, 70'000, 128, 8, Metric::L2, 0.1, false}},
               /*as_batch=*/true, /*each_alone=*/false);
}

TEST_CASE("GPU equals CPU where inner-product batches of 9-12 queries are screened (groups of 12)") {
  // Inner product's screen in groups of 12: each lane scores 4 points x 3 queries, whose dot
  // products are the exact ranks. Partial groups (9, 10, 11 queries) and partial last stages
  // (dims 5, 40, 100, 300, 784), large stores (every 16th or 32nd tile sampled) and small ones
  // (every 8th, for these batches at any k), k up to 128, erased slots, duplicates, a store of
  // one repeated point. L2 batches of this size keep the exact form (one L2 row here).
  check_shapes(5296,
               {StoreShape{300, 400'000, 128, 12, Metric::InnerProduct, 0.1, false},
                StoreShape{784, 70'000, 64, 9, Metric::InnerProduct, 0.1, false},
                StoreShape{128, 300'000, 16, 9, Metric::InnerProduct, 0.05, true},
                StoreShape{5, 300'000, 16, 11, Metric::InnerProduct, 0.2, false},
                StoreShape{40, 600'000, 30, 10, Metric::InnerProduct, 0.1, true},
                StoreShape{100, 100'000, 20, 12, Metric::InnerProduct, 0.0, false, true},
                StoreShape{300, 400'000, 64, 12, Metric::L2, 0.1, false}},
               /*as_batch=*/true, /*each_alone=*/false);
}

TEST_CASE("GPU equals CPU where batches of 13-16 queries are screened by dot products (groups of 16)") {
  // The screen's group of 16: each lane scores 4 points x 4 queries, a stage's chunks two at a
  // time. Partial groups (13, 14, 15 queries) and partial last stages (dims 5, 40, 100, 300), a
  // large store (every 32nd tile sampled) and small ones (every 8th), erased slots, duplicates, a
  // store of one repeated point; L2, cosine and inner product.
  check_shapes(5295,
               {StoreShape{300, 400'000, 32, 16, Metric::L2, 0.1, false},
                StoreShape{128, 300'000, 16, 13, Metric::L2, 0.05, true},
                StoreShape{5, 300'000, 16, 15, Metric::L2, 0.2, false},
                StoreShape{40, 600'000, 30, 14, Metric::Cosine, 0.1, true},
                StoreShape{784, 70'000, 64, 16, Metric::L2, 0.0, false},
                StoreShape{100, 100'000, 20, 16, Metric::L2, 0.0, false, true},
                StoreShape{300, 400'000, 32, 13, Metric::InnerProduct, 0.1, false},
                StoreShape{128, 100'000, 30, 16, Metric::InnerProduct, 0.0, false, true}},
               /*as_batch=*/true, /*each_alone=*/false);
}

TEST_CASE("GPU equals CPU where batches of 17+ queries are screened by dot products (groups of 32)") {
  // Stores of several chunks with a sample pass sparse enough for the screen: each lane scores 4
  // points x 8 queries by dot products and only the pairs the screen passes get an exact rank,
  // queued and ranked 32 at a time (inner product: the dot products are the exact ranks, the
  // same FMAs in the same order as the one-point-per-lane loop). Partial groups (20, 33, 40, 48 queries) and
  // partial last stages (dims 5, 40, 100, 300), large stores (every 32nd tile sampled) and a
  // small one (every 8th), k from 1 to 50, erased slots, duplicates and stores of one repeated
  // point (every pair ties: the k smallest ids); L2, cosine and inner product.
  check_shapes(5290,
               {StoreShape{300, 400'000, 32, 33, Metric::L2, 0.1, false},
                StoreShape{128, 300'000, 16, 20, Metric::L2, 0.05, true},
                StoreShape{400, 300'000, 8, 40, Metric::L2, 0.0, false},
                StoreShape{5, 300'000, 16, 40, Metric::L2, 0.2, false},
                StoreShape{40, 600'000, 30, 48, Metric::Cosine, 0.1, true},
                StoreShape{100, 100'000, 1, 20, Metric::L2, 0.3, false},
                StoreShape{64, 200'000, 50, 17, Metric::L2, 0.0, false, true},
                StoreShape{300, 400'000, 32, 40, Metric::InnerProduct, 0.1, false},
                StoreShape{17, 300'000, 8, 64, Metric::InnerProduct, 0.2, true},
                StoreShape{100, 100'000, 30, 20, Metric::InnerProduct, 0.0, false, true}},
               /*as_batch=*/true, /*each_alone=*/false);
}

TEST_CASE("the dot-product screen: each group (sanitizer-sized)") {
  // Stores of 20,000 points of fewer than 64 dims (so the dense screen does not take them), small
  // enough for compute-sanitizer: groups of 12 (inner product), 16 and 32 (partial ones), a
  // sample pass over every 8th tile, k up to 4 so the screen's sparsity rule holds, queued pairs
  // ranked 32 at a time, erased slots, duplicates, a store of one repeated point.
  check_shapes(5297,
               {StoreShape{40, 20'000, 4, 10, Metric::InnerProduct, 0.1, false},
                StoreShape{60, 20'000, 3, 12, Metric::InnerProduct, 0.0, false, true},
                StoreShape{40, 20'000, 4, 14, Metric::L2, 0.1, true},
                StoreShape{60, 20'000, 2, 20, Metric::Cosine, 0.2, false},
                StoreShape{40, 20'000, 4, 33, Metric::L2, 0.0, false, true}},
               /*as_batch=*/true, /*each_alone=*/false);
}

TEST_CASE("the screen keeps every pair within the threshold where the norms dwarf the distances") {
  // Points and queries about 10,000 from the origin in every dimension, 1 apart: |x|^2 is about
  // 10^10, so the float dot products err by hundreds while neighbours are about 100 apart. A
  // screen without its proven margin drops true neighbours here (checked once with the margin
  // set to zero: 33 of 33 queries wrong); with it every answer equals the CPU's.
  check_far_points(5300, 300'000, 33);
}

TEST_CASE("GPU equals CPU where the screen's 32 queries of many dims take one block per SM") {
  // 32 queries of 700+ dims fill half an SM's shared memory, so the screen runs one block per
  // SM with 16 warps (8 where 16 do not fit: dim 1,200), compiled for 512 threads. Without that
  // launch bound the 16-warp block does not launch at all.
  namespace gpu = streamknn::detail::gpu;
  gpu::ScanShape shape;
  shape.query_group = gpu::kScreenGroup;
  shape.screen = true;
  shape.global_lists = true;
  shape.chunks = 196;  // 784 dims
  shape.warps_per_block = gpu::kScreenMaxWarps;
  for (const bool inner_product : {false, true}) {
    shape.inner_product = inner_product;
    CHECK(gpu::configure_scan(shape, 128) >= 1);
  }
  // Small stores (every 8th tile sampled) with at most one pair to rank per query in 4 tiles;
  // partial groups, erased slots, duplicates; L2, cosine and inner product.
  check_shapes(5310,
               {StoreShape{784, 20'000, 16, 40, Metric::L2, 0.1, false},
                StoreShape{1024, 12'000, 8, 33, Metric::L2, 0.0, true},
                StoreShape{1200, 12'000, 8, 20, Metric::L2, 0.2, false},
                StoreShape{784, 24'000, 20, 64, Metric::InnerProduct, 0.1, false},
                StoreShape{800, 12'000, 5, 17, Metric::Cosine, 0.0, true}},
               /*as_batch=*/true, /*each_alone=*/false);
}

TEST_CASE("GPU equals CPU where batches over small stores of many dims take the dense screen") {
  // Batches of 12+ queries (2+ over 256+ dims, 6+ at k >= 128) over stores of fewer than 64
  // tiles per SM with 64+ dims (L2, cosine): a tiled product screens every pair, one block per
  // query ranks the pairs at or below the k-th group minimum exactly and then every pair the
  // screen's margin cannot rule out. Query tiles of 8, 12, 16, 32 and 64 (partial ones too; 5,
  // 6, 7, 10, 13 and 17 queries), product blocks whose share of the store is a whole tile or a
  // group less (70,000 slots at 5 queries, 30,000 at 17) or a few groups (smaller stores), k from
  // 1 to kDenseMaxK and k above the valid points, erased slots, duplicates (ties broken by id), a
  // store of one repeated point (every pair ties: the selection's batches fill and merge many
  // times), dims up to 2,000, and a batch split into launch chunks by the workspace budget (1,100
  // queries over 70,000 slots).
  check_shapes(5320,
               {StoreShape{784, 70'000, 64, 64, Metric::L2, 0.1, false},
                StoreShape{784, 70'000, 128, 16, Metric::L2, 0.0, false},
                StoreShape{100, 30'000, 1, 17, Metric::L2, 0.3, true},
                StoreShape{64, 5'000, 1'024, 40, Metric::L2, 0.0, false},
                StoreShape{1'024, 2'000, 700, 33, Metric::Cosine, 0.2, false},
                StoreShape{300, 500, 600, 20, Metric::L2, 0.5, false},
                StoreShape{2'000, 3'000, 10, 24, Metric::L2, 0.0, true},
                StoreShape{128, 50'000, 50, 100, Metric::L2, 0.0, false, true},
                StoreShape{65, 3'000, 16, 1'000, Metric::Cosine, 0.1, false},
                StoreShape{64, 70'000, 8, 1'100, Metric::L2, 0.05, false},
                StoreShape{300, 8'000, 40, 12, Metric::L2, 0.1, false},
                StoreShape{128, 6'000, 9, 13, Metric::Cosine, 0.0, true},
                StoreShape{784, 70'000, 64, 5, Metric::L2, 0.1, false},
                StoreShape{300, 8'000, 128, 7, Metric::Cosine, 0.2, true},
                StoreShape{128, 6'000, 128, 6, Metric::L2, 0.1, false},
                StoreShape{300, 20'000, 32, 12, Metric::L2, 0.1, false},
                StoreShape{784, 70'000, 100, 10, Metric::L2, 0.1, false}},
               /*as_batch=*/true, /*each_alone=*/false);
}

TEST_CASE("the dense screen on small stores: each selection path (sanitizer-sized)") {
  // Stores of a few thousand points so compute-sanitizer runs in seconds: the k-th group minimum
  // (k below the store's 32-slot groups), the whole row's k-th (k above them), at most k values
  // (every valid slot), ties on one repeated point (the batch overflows and runs window by
  // window), a query tile of 8 (5 queries), 12 (11), 16, 32 and 64.
  check_shapes(5340,
               {StoreShape{100, 3'000, 16, 40, Metric::L2, 0.2, false},
                StoreShape{64, 2'000, 100, 17, Metric::Cosine, 0.1, true},
                StoreShape{200, 1'500, 300, 33, Metric::L2, 0.3, false},
                StoreShape{72, 400, 500, 16, Metric::L2, 0.2, false},
                StoreShape{128, 2'000, 30, 64, Metric::L2, 0.0, false, true},
                StoreShape{300, 2'000, 40, 5, Metric::L2, 0.2, false},
                StoreShape{300, 2'000, 50, 11, Metric::L2, 0.1, false}},
               /*as_batch=*/true, /*each_alone=*/false);
}

TEST_CASE("the dense screen keeps every pair within the bound where the norms dwarf the distances") {
  // As the screen's case above, on a small store (the dense path): |x|^2 about 10^10 against
  // neighbours about 100 apart, so only the proven margin keeps the answer.
  check_far_points(5330, 20'000, 40);
}

TEST_CASE("GPU equals CPU on stores of about one tile per scan warp (lists full of the answer)") {
  // Multi-chunk stores of 500 to 4,300 tiles, one or two queries, no sample pass: every warp
  // scores about one tile, so every block's list holds about k / blocks of the answer and the
  // selection's first round must load enough of each (or fall back). Each metric kind, erased
  // slots, duplicates, a store of one repeated point (the k smallest ids), and each query alone
  // as well as both in one group.
  check_shapes(5250,
             {StoreShape{784, 70'000, 64, 2, Metric::L2, 0.1, false},
              StoreShape{16, 20'000, 1, 2, Metric::InnerProduct, 0.2, false},
              StoreShape{100, 135'000, 100, 1, Metric::L2, 0.0, true},
              StoreShape{40, 50'000, 33, 2, Metric::Cosine, 0.3, true},
              StoreShape{300, 17'000, 128, 2, Metric::L2, 0.1, false},
              StoreShape{8, 30'000, 16, 2, Metric::L2, 0.0, false, true}},
             /*as_batch=*/true, /*each_alone=*/true);
}

TEST_CASE("the selection's first prefix covers every list's share of the answer but for 1 in 256") {
  // first_take(lists, k): the shortest prefix of at least 2 for which lists x P(share >= prefix)
  // <= 1/256, the share Poisson(k / lists); four shares once they average 8 or more; never past k.
  using streamknn::detail::gpu::first_take;
  auto tail = [](double mean, std::uint32_t t) {  // P(Poisson(mean) >= t), summed on its own
    double below = 0;
    for (std::uint32_t i = 0; i < t; ++i) below += std::exp(i * std::log(mean) - mean - std::lgamma(i + 1.0));
    return 1 - below;
  };
  CHECK(first_take(391, 16) == 4);   // one query on 100,000 x 2
  CHECK(first_take(648, 16) == 3);   // one query on 1,000,000 x 2 through the direct search
  CHECK(first_take(274, 64) == 5);   // MNIST-like, K = 64
  CHECK(first_take(274, 128) == 6);  // MNIST-like, K = 128 (the flat 4 failed a third of these)
  CHECK(first_take(8, 128) == 64);   // shares of 16: four of them
  CHECK(first_take(512, 4096) == 32);
  CHECK(first_take(1, 1) == 1);
  CHECK(first_take(3, 2) == 2);      // never past k
  CHECK(first_take(0, 5) == 5);      // no lists: as one
  for (std::uint32_t lists : {1u, 7u, 64u, 132u, 264u, 391u, 1000u}) {
    for (std::uint32_t k : {1u, 5u, 16u, 64u, 100u, 128u, 1000u}) {
      CAPTURE(lists);
      CAPTURE(k);
      const std::uint32_t t = first_take(lists, k);
      const double mean = double(k) / lists;
      CHECK(t <= k);
      if (mean >= 8) {
        CHECK(t == std::min(k, (4 * k + lists - 1) / lists));
      } else if (t < k) {
        CHECK(t >= 2);
        CHECK(lists * tail(mean, t) <= 1.0 / 256 + 1e-12);
        if (t > 2) CHECK(lists * tail(mean, t - 1) > 1.0 / 256 - 1e-12);
      }
    }
  }
}
