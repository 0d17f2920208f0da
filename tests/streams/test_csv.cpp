// The CSV reader: tokenizing, class columns, and every kind of bad input named by line and column.
#include <doctest/doctest.h>

#include "scratch_dir.hpp"
#include "streams/csv_reader.hpp"
#include "streams/csv_source.hpp"
#include "streams/errors.hpp"

using namespace streamknn::streams;

namespace {

std::vector<std::vector<std::string>> records(const std::string& text) {
  CsvReader reader("mem.csv", text);
  CsvRecord r;
  std::vector<std::vector<std::string>> out;
  while (reader.next(r)) out.push_back(r.cells);
  return out;
}

struct Loaded {
  SourceInfo info;
  Chunk all;
};

Loaded load(const test::ScratchDir& dir, const std::string& text, CsvOptions options = {}) {
  auto source = open_csv(dir.write("data.csv", text), options);
  Loaded out{source->info(), {}};
  source->read(1u << 20, out.all);
  return out;
}

std::string data_error(const std::string& text, CsvOptions options = {}) {
  test::ScratchDir dir;
  const std::string path = dir.write("bad.csv", text);
  try {
    auto source = open_csv(path, options);
  } catch (const DataError& e) {
    const std::string message = e.what();
    CHECK_MESSAGE(message.starts_with(path), message);  // every message names the file first
    return message;
  }
  FAIL_CHECK("no DataError for: ", text);
  return {};
}

}  // namespace

TEST_CASE("csv reader: quoted fields, doubled quotes, CRLF, embedded newlines and a BOM") {
  const auto r = records("\xEF\xBB\xBF" "a,\"b,c\",d\r\n\"say \"\"hi\"\"\",,\"two\nlines\"\n");
  REQUIRE(r.size() == 2);
  CHECK(r[0] == std::vector<std::string>{"a", "b,c", "d"});
  CHECK(r[1] == std::vector<std::string>{"say \"hi\"", "", "two\nlines"});
}

TEST_CASE("csv reader: a cell's line is where it starts, after embedded newlines") {
  CsvReader reader("mem.csv", "h1,h2\n\"x\ny\",1\nz,2\n");
  CsvRecord r;
  REQUIRE(reader.next(r));
  REQUIRE(reader.next(r));
  CHECK(r.line == 2);
  CHECK(r.cell_lines == std::vector<std::size_t>{2, 3});
  REQUIRE(reader.next(r));
  CHECK(r.line == 4);
  CHECK_FALSE(reader.next(r));
}

TEST_CASE("csv reader: the last line may lack its newline, and a trailing comma is an empty field") {
  CHECK(records("a,b\n1,2") == std::vector<std::vector<std::string>>{{"a", "b"}, {"1", "2"}});
  CHECK(records("a,b,\n") == std::vector<std::vector<std::string>>{{"a", "b", ""}});
}

TEST_CASE("csv_escape quotes only what needs it, and round-trips through the reader") {
  CHECK(csv_escape("plain") == "plain");
  for (const std::string s : {"a,b", "say \"x\"", "two\nlines", " padded "}) {
    const auto r = records(csv_escape(s) + "\n");
    REQUIRE(r.size() == 1);
    CHECK(r[0][0] == s);
  }
}

TEST_CASE("csv source: features, named classes in order of first appearance, target by name") {
  test::ScratchDir dir;
  const auto d = load(dir, "x,species,y\n1.5,cat,-2\n+3,dog,4e1\n 5 ,cat,6\n0,\"bird, blue\",0\n", {"species"});
  CHECK(d.info.dim == 2);
  CHECK(d.info.feature_names == std::vector<std::string>{"x", "y"});
  CHECK(d.info.target_name == "species");
  CHECK(d.info.class_names == std::vector<std::string>{"cat", "dog", "bird, blue"});
  CHECK(d.info.notes.find("cat=0, dog=1, bird, blue=2") != std::string::npos);
  CHECK(d.all.size == 4);
  CHECK(d.all.features == std::vector<float>{1.5f, -2, 3, 40, 5, 6, 0, 0});
  CHECK(d.all.labels == std::vector<std::int32_t>{0, 1, 0, 2});
}

TEST_CASE("csv source: integer classes are numbered in ascending order of value") {
  test::ScratchDir dir;
  const auto d = load(dir, "a,label\n1,5\n2,-1\n3,3\n4,5.0\n");
  CHECK(d.info.class_names == std::vector<std::string>{"-1", "3", "5"});
  CHECK(d.all.labels == std::vector<std::int32_t>{2, 0, 1, 2});
  CHECK(d.info.notes.find("ascending") != std::string::npos);
  // 0..C-1 stay as they are.
  CHECK(load(dir, "a,label\n1,1\n2,0\n").all.labels == std::vector<std::int32_t>{1, 0});
}

TEST_CASE("csv source: regression targets and --limit") {
  test::ScratchDir dir;
  const auto d = load(dir, "a,b,t\n1,2,0.5\n3,4,-1e3\n5,6,7\n", {"", Task::Regress, 2});
  CHECK(d.info.task == Task::Regress);
  CHECK(d.all.size == 2);
  CHECK(d.all.values == std::vector<float>{0.5f, -1000.0f});
}

TEST_CASE("csv source: where() maps a point and feature back to line and column") {
  test::ScratchDir dir;
  auto source = open_csv(dir.write("w.csv", "a,t,b\n1,x,2\n3,\"y\nz\",4\n5,z,6\n"), {"t"});
  CHECK(source->where(2) == dir.path("w.csv") + ", line 5");
  CHECK(source->where(2, 1) == dir.path("w.csv") + ", line 5, column 3 (\"b\")");
}

TEST_CASE("csv source: every malformed input is a DataError naming line and column") {
  struct Case {
    const char* text;
    const char* where;
    const char* what;
  };
  const Case cases[] = {
      {"a,b,t\n1,2,0\n3,,1\n", "line 3, column 2 (\"b\")", "missing value (empty cell)"},
      {"a,b,t\n1,NA,0\n", "line 2, column 2 (\"b\")", "missing value (\"NA\")"},
      {"a,b,t\n1,?,0\n", "line 2, column 2", "missing value"},
      {"a,b,t\n1,abc,0\n", "line 2, column 2", "\"abc\" is not a number"},
      {"a,b,t\n1,2x,0\n", "line 2, column 2", "\"2x\" is not a number"},
      {"a,b,t\n1,inf,0\n", "line 2, column 2", "not a finite number"},
      {"a,b,t\n1e39,1,0\n", "line 2, column 1", "outside the range of a 32-bit float"},
      {"a,b,t\n1,2,0\n1,2\n", "line 3, column 3", "2 fields, but the header (line 1) has 3"},
      {"a,b,t\n1,2,0,9\n", "line 2, column 4", "4 fields"},
      {"a,b,t\n1,\"2,0\n", "line 2, column 2", "never closed"},
      {"a,b,t\n1,2\"3,0\n", "line 2, column 2", "inside an unquoted field"},
      {"a,b,t\n1,\"2\"x,0\n", "line 2, column 2", "after the closing quote"},
      {"a,b,t\n1,2,0\n\n3,4,1\n", "line 3, column 1", "empty line"},
      {"a,b,t\n1,2,0\n\n", "line 3, column 1", "empty line"},
      {"a,b,t\n1,2,\n", "line 2, column 3 (\"t\")", "missing class (empty cell)"},
      {"a,a,t\n1,2,0\n", "line 1, column 2 (\"a\")", "repeats the name of column 1"},
      {"a,,t\n1,2,0\n", "line 1, column 2", "empty name"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.text);
    const std::string message = data_error(c.text);
    CHECK_MESSAGE(message.find(c.where) != std::string::npos, message);
    CHECK_MESSAGE(message.find(c.what) != std::string::npos, message);
  }
}

TEST_CASE("csv source: bad files and bad targets") {
  CHECK(data_error("").find("line 1: the file is empty") != std::string::npos);
  CHECK(data_error("a,b,t\n").find("line 2: no data rows after the header (line 1)") != std::string::npos);
  CHECK(data_error("t\n1\n").find("at least one feature") != std::string::npos);
  const std::string missing_target = data_error("a,b,t\n1,2,0\n", {"label"});
  CHECK(missing_target.find("no column named \"label\"") != std::string::npos);
  CHECK(missing_target.find("\"a\", \"b\", \"t\"") != std::string::npos);
  const std::string regress = data_error("a,t\n1,2\n2,high\n", {"", Task::Regress});
  CHECK(regress.find("line 3, column 2 (\"t\"): \"high\" is not a number") != std::string::npos);
  try {
    open_csv("/nonexistent/streamknn.csv", {});
    FAIL("no error for a missing file");
  } catch (const DataError& e) {
    CHECK(std::string(e.what()) == "/nonexistent/streamknn.csv: cannot open the file for reading");
  }
}

TEST_CASE("csv source: --attributes columns are attribute words, not features") {
  test::ScratchDir dir;
  const auto d = load(dir, "x,flags,y,region,label\n1,3,2,0x10,a\n4,0,5,7,b\n", {"label", Task::Classify, 0, {"region", "flags"}});
  CHECK(d.info.dim == 2);
  CHECK(d.info.feature_names == std::vector<std::string>{"x", "y"});
  CHECK(d.info.attribute_names == std::vector<std::string>{"region", "flags"});
  CHECK(d.all.features == std::vector<float>{1, 2, 4, 5});
  CHECK(d.all.attributes == std::vector<std::uint32_t>{16, 3, 7, 0});
  // Where() still numbers the features among the remaining columns.
  auto source = open_csv(dir.path("data.csv"), {"label", Task::Classify, 0, {"region", "flags"}});
  CHECK(source->where(1, 1) == dir.path("data.csv") + ", line 3, column 3 (\"y\")");

  const CsvOptions flags{"t", Task::Classify, 0, {"f"}};
  for (const char* bad : {"-1", "4294967296", "1.5", "0x", "abc", ""}) {
    const std::string m = data_error(std::string("a,f,t\n1,2,0\n3,") + bad + ",1\n", flags);
    CHECK_MESSAGE(m.find("line 3, column 2 (\"f\")") != std::string::npos, m);
    CHECK_MESSAGE(m.find("is not an attribute word") != std::string::npos, m);
  }
  CHECK(load(dir, "a,f,t\n1,4294967295,0\n", flags).all.attributes == std::vector<std::uint32_t>{4294967295u});
  CHECK(data_error("a,f,t\n1,2,0\n", {"t", Task::Classify, 0, {"g"}}).find("no column named \"g\" for --attributes") !=
        std::string::npos);
  const std::string path = dir.write("u.csv", "a,f,t\n1,2,0\n");
  CHECK_THROWS_WITH_AS(open_csv(path, {"t", Task::Classify, 0, {"t"}}), doctest::Contains("is the target column"), UsageError);
  CHECK_THROWS_WITH_AS(open_csv(path, {"t", Task::Classify, 0, {"f", "f"}}), doctest::Contains("twice"), UsageError);
  CHECK_THROWS_WITH_AS(open_csv(path, {"t", Task::Classify, 0, {"a", "f"}}), doctest::Contains("no feature column"),
                       UsageError);
}

TEST_CASE("csv source: without targets every column is a feature, but the one --target leaves out unread") {
  test::ScratchDir dir;
  CsvOptions none;
  none.targets = false;
  const auto all = load(dir, "a,b,c\n1,2,3\n4,5,6\n", none);
  CHECK(!all.info.has_targets);
  CHECK(all.info.feature_names == std::vector<std::string>{"a", "b", "c"});
  CHECK(all.info.notes == "every column a feature");
  CHECK(all.all.size == 2);
  CHECK(all.all.features == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(all.all.labels.empty());
  CHECK(all.all.values.empty());
  CHECK(load(dir, "a\n1\n2\n", none).all.features == std::vector<float>{1, 2});  // one column is enough

  CsvOptions skip = none;
  skip.target = "id";
  const std::string text = "id,x,y\n,1,2\nabc,3,4\n";  // the left-out cells are never parsed
  const auto some = load(dir, text, skip);
  CHECK(some.info.feature_names == std::vector<std::string>{"x", "y"});
  CHECK(some.info.notes == "column \"id\" left out");
  CHECK(some.all.features == std::vector<float>{1, 2, 3, 4});
  auto source = open_csv(dir.write("w.csv", text), skip);
  CHECK(source->where(1, 1) == dir.path("w.csv") + ", line 3, column 3 (\"y\")");

  CHECK(data_error("a,b\n1,x\n", none).find("line 2, column 2 (\"b\"): \"x\" is not a number") != std::string::npos);
  CHECK(data_error("a,b\n1,2,3\n", none).find("line 2, column 3: 3 fields") != std::string::npos);
  CHECK_THROWS_WITH_AS(open_csv(dir.write("t.csv", text), {"z", Task::Classify, 0, {}, false}),
                       doctest::Contains("no column named \"z\" for --target"), DataError);
}

TEST_CASE("memory source: a read of every point at once gives what reads in chunks give") {
  test::ScratchDir dir;
  const std::string path = dir.write("m.csv", "a,b,y\n1,2,x\n3,4,y\n5,6,x\n");
  auto whole = open_csv(path, {});
  auto parts = open_csv(path, {});
  CHECK(whole->in_memory());
  Chunk all, part;
  CHECK(whole->read(100, all) == 3);
  CHECK(whole->read(100, all) == 0);  // after the rows were moved out: the end, nothing touched
  CHECK((all.size == 0 && all.features.empty() && all.labels.empty()));
  std::vector<float> features;
  std::vector<std::int32_t> labels;
  while (parts->read(2, part) > 0) {
    features.insert(features.end(), part.features.begin(), part.features.end());
    labels.insert(labels.end(), part.labels.begin(), part.labels.end());
  }
  CHECK(features == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(labels == std::vector<std::int32_t>{0, 1, 0});
  CHECK(whole->where(2, 1) == path + ", line 4, column 2 (\"b\")");  // the locator outlives the move
}
