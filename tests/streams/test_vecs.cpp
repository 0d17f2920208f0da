// The .fvecs / .ivecs / .bvecs readers: round trips, --limit, and every malformed record.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "scratch_dir.hpp"
#include "streams/errors.hpp"
#include "streams/vecs_source.hpp"

using namespace streamknn::streams;
using test::bytes_of;

namespace {

template <class T>
std::string record(const std::vector<T>& v, std::int32_t dim = -1) {
  std::string out = bytes_of<std::int32_t>(dim < 0 ? static_cast<std::int32_t>(v.size()) : dim);
  for (T x : v) out += bytes_of(x);
  return out;
}

std::string vecs_error(const std::string& name, const std::string& bytes) {
  test::ScratchDir dir;
  const std::string path = dir.write(name, bytes);
  try {
    read_vecs(path);
  } catch (const DataError& e) {
    const std::string message = e.what();
    CHECK_MESSAGE(message.starts_with(path), message);
    return message;
  }
  FAIL_CHECK("no DataError for ", name);
  return {};
}

}  // namespace

TEST_CASE("vecs: the three formats read back what was written") {
  test::ScratchDir dir;
  const Vecs f = read_vecs(dir.write("a.fvecs", record<float>({1.5f, -2}) + record<float>({3, 4e-3f})));
  CHECK(f.kind == VecsKind::Fvecs);
  CHECK(f.count == 2);
  CHECK(f.dim == 2);
  CHECK(f.floats == std::vector<float>{1.5f, -2, 3, 4e-3f});
  const Vecs i = read_vecs(dir.write("a.ivecs", record<std::int32_t>({7, -8, 2147483647})));
  CHECK(i.ints == std::vector<std::int32_t>{7, -8, 2147483647});
  const Vecs b = read_vecs(dir.write("a.bvecs", record<std::uint8_t>({0, 200, 255})));
  CHECK(b.floats == std::vector<float>{0, 200, 255});
}

TEST_CASE("vecs: a limit reads only the first vectors, even of a file bad further on") {
  test::ScratchDir dir;
  const std::string path = dir.write("l.fvecs", record<float>({1}) + record<float>({2}) + "junk");
  const Vecs v = read_vecs(path, 2);
  CHECK(v.count == 2);
  CHECK(v.floats == std::vector<float>{1, 2});
}

TEST_CASE("vecs: malformed files name the vector, component and byte offset") {
  const std::string two = record<float>({1, 2});  // 12 bytes
  CHECK(vecs_error("e.fvecs", "").find("vector 0 (byte offset 0): the file is empty") != std::string::npos);
  CHECK(vecs_error("t.fvecs", two + std::string("\x02\x00", 2)).find("vector 1 (byte offset 12): truncated: 2 bytes left, a 4-byte "
                                                     "dimension expected") != std::string::npos);
  CHECK(vecs_error("b.fvecs", two + bytes_of<std::int32_t>(2) + bytes_of(1.0f))
            .find("vector 1 (byte offset 12): truncated: 4 bytes left of the 8") != std::string::npos);
  CHECK(vecs_error("z.ivecs", bytes_of<std::int32_t>(0)).find("vector 0 (byte offset 0): dimension 0 is outside") !=
        std::string::npos);
  CHECK(vecs_error("n.bvecs", bytes_of<std::int32_t>(-3)).find("dimension -3") != std::string::npos);
  CHECK(vecs_error("c.fvecs", two + record<float>({1, 2, 3}))
            .find("vector 1 (byte offset 12): dimension 3, but vector 0 has 2") != std::string::npos);
  CHECK(vecs_error("nan.fvecs", two + record<float>({1, std::numeric_limits<float>::quiet_NaN()}))
            .find("vector 1, component 1 (byte offset 20): NaN") != std::string::npos);
  CHECK(vecs_error("inf.fvecs", record<float>({std::numeric_limits<float>::infinity(), 0}))
            .find("vector 0, component 0 (byte offset 4): infinite value") != std::string::npos);
  CHECK_THROWS_AS(read_vecs("file.txt"), DataError);
  CHECK_THROWS_WITH_AS(read_vecs("/nonexistent/x.fvecs"), "/nonexistent/x.fvecs: cannot open the file for reading",
                       DataError);
}

TEST_CASE("vecs source: features with labels or regression targets") {
  test::ScratchDir dir;
  const std::string x = dir.write("x.bvecs", record<std::uint8_t>({1, 2}) + record<std::uint8_t>({3, 4}) +
                                                 record<std::uint8_t>({5, 6}));
  auto classes = open_vecs(x, dir.write("y.ivecs", record<std::int32_t>({9}) + record<std::int32_t>({4}) +
                                                         record<std::int32_t>({9})),
                           Task::Classify);
  CHECK(classes->info().dim == 2);
  CHECK(classes->info().class_names == std::vector<std::string>{"4", "9"});
  Chunk c;
  CHECK(classes->read(10, c) == 3);
  CHECK(c.features == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(c.labels == std::vector<std::int32_t>{1, 0, 1});
  CHECK(classes->where(2, 1) == x + ", vector 2, component 1 (byte offset 17)");

  auto values = open_vecs(x, dir.write("t.fvecs", record<float>({0.5f}) + record<float>({1}) + record<float>({2})),
                          Task::Regress, 2);
  CHECK(values->read(10, c) == 2);
  CHECK(c.values == std::vector<float>{0.5f, 1});
}

TEST_CASE("vecs source: labels that do not fit the vectors") {
  test::ScratchDir dir;
  const std::string x = dir.write("x.fvecs", record<float>({1}) + record<float>({2}));
  CHECK_THROWS_WITH_AS(open_vecs(x, dir.write("one.ivecs", record<std::int32_t>({1})), Task::Classify),
                       doctest::Contains("1 labels for the 2 vectors"), DataError);
  CHECK_THROWS_WITH_AS(open_vecs(x, dir.write("wide.ivecs", record<std::int32_t>({1, 2}) + record<std::int32_t>({1, 2})),
                                 Task::Classify),
                       doctest::Contains("dimension 2; a labels file holds one value per vector"), DataError);
  CHECK_THROWS_WITH_AS(open_vecs(x, dir.write("real.fvecs", record<float>({1}) + record<float>({0.5f})), Task::Classify),
                       doctest::Contains("vector 1, component 0 (byte offset 12): class 0.5"), DataError);
}

TEST_CASE("vecs source: vectors as points without targets (clustering)") {
  test::ScratchDir dir;
  const std::string x = dir.write("x.bvecs", record<std::uint8_t>({1, 2}) + record<std::uint8_t>({3, 4}) +
                                                 record<std::uint8_t>({5, 6}));
  auto points = open_vecs_points(x);
  CHECK(!points->info().has_targets);
  CHECK(points->info().feature_names == std::vector<std::string>{"x0", "x1"});
  Chunk c;
  CHECK(points->read(10, c) == 3);
  CHECK(c.features == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(c.labels.empty());
  CHECK(c.values.empty());
  CHECK(points->where(2, 1) == x + ", vector 2, component 1 (byte offset 17)");
  CHECK(open_vecs_points(x, 2)->read(10, c) == 2);
  const std::string i = dir.write("i.ivecs", record<std::int32_t>({-7, 8}));
  CHECK(open_vecs_points(i)->read(10, c) == 1);
  CHECK(c.features == std::vector<float>{-7, 8});
}
