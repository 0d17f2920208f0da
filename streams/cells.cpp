#include "streams/cells.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "streams/errors.hpp"

namespace streamknn::streams {

namespace {

std::string_view trimmed(std::string_view s) {
  const auto blank = [](char c) { return c == ' ' || c == '\t'; };
  while (!s.empty() && blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && blank(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace

bool is_missing(std::string_view cell) noexcept {
  static constexpr std::array<std::string_view, 9> placeholders = {"NA", "N/A", "NaN", "nan", "NULL", "null",
                                                                   "None", "?", ""};
  const std::string_view t = trimmed(cell);
  return std::find(placeholders.begin(), placeholders.end(), t) != placeholders.end();
}

std::string quote_cell(std::string_view cell) {
  std::string shown(cell.substr(0, 40));
  if (cell.size() > 40) shown += "...";
  return "\"" + shown + "\"";
}

ParsedNumber parse_number(std::string_view cell) {
  ParsedNumber out;
  if (is_missing(cell)) {
    out.problem = cell.empty() ? "missing value (empty cell)" : "missing value (" + quote_cell(cell) + ")";
    return out;
  }
  std::string_view t = trimmed(cell);
  if (t.starts_with('+')) t.remove_prefix(1);
  double v = 0;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec == std::errc::result_out_of_range) {
    out.problem = quote_cell(cell) + " is out of the range of a double";
    return out;
  }
  if (ec != std::errc() || end != t.data() + t.size() || t.empty()) {
    out.problem = quote_cell(cell) + " is not a number";
    return out;
  }
  if (!std::isfinite(v)) {
    out.problem = quote_cell(cell) + " is not a finite number";
    return out;
  }
  if (std::fabs(v) > std::numeric_limits<float>::max()) {
    out.problem = quote_cell(cell) + " is outside the range of a 32-bit float";
    return out;
  }
  out.ok = true;
  out.value = v;
  return out;
}

bool parse_integer_class(std::string_view cell, std::int64_t& value) {
  const ParsedNumber n = parse_number(cell);
  if (!n.ok || n.value != std::floor(n.value)) return false;
  if (n.value < std::numeric_limits<std::int32_t>::min() || n.value > std::numeric_limits<std::int32_t>::max()) {
    return false;
  }
  value = static_cast<std::int64_t>(n.value);
  return true;
}

ClassMapping classes_from_integers(std::span<const std::int64_t> values, const std::string& what) {
  std::vector<std::int64_t> distinct(values.begin(), values.end());
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  if (distinct.size() > kMaxClasses) {
    throw DataError(what + ": " + std::to_string(distinct.size()) + " distinct classes, more than the " +
                    std::to_string(kMaxClasses) + " a store holds (is this a regression target? use --task regress)");
  }
  ClassMapping out;
  out.labels.reserve(values.size());
  for (std::int64_t v : values) {
    out.labels.push_back(static_cast<std::int32_t>(std::lower_bound(distinct.begin(), distinct.end(), v) - distinct.begin()));
  }
  bool identity = true;
  for (std::size_t i = 0; i < distinct.size(); ++i) {
    out.names.push_back(std::to_string(distinct[i]));
    identity &= distinct[i] == static_cast<std::int64_t>(i);
  }
  out.notes = std::to_string(distinct.size()) + " integer classes";
  if (!identity) out.notes += ", numbered in ascending order of value";
  return out;
}

ClassMapping classes_from_names(std::span<const std::string> names, const std::string& what) {
  ClassMapping out;
  std::unordered_map<std::string, std::int32_t> label_of;
  out.labels.reserve(names.size());
  for (const std::string& name : names) {
    auto [it, fresh] = label_of.try_emplace(name, static_cast<std::int32_t>(out.names.size()));
    if (fresh) {
      if (out.names.size() == kMaxClasses) {
        throw DataError(what + ": more than " + std::to_string(kMaxClasses) +
                        " distinct classes, more than a store holds (is this a regression target? use --task regress)");
      }
      out.names.push_back(name);
    }
    out.labels.push_back(it->second);
  }
  out.notes = std::to_string(out.names.size()) + " named classes, numbered in order of first appearance:";
  for (std::size_t i = 0; i < out.names.size() && i < 20; ++i) {
    out.notes += (i ? ", " : " ") + out.names[i] + "=" + std::to_string(i);
  }
  if (out.names.size() > 20) out.notes += ", ...";
  return out;
}

}  // namespace streamknn::streams
