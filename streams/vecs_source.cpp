#include "streams/vecs_source.hpp"

#include <cmath>
#include <cstring>
#include <fstream>

#include "streams/cells.hpp"
#include "streams/errors.hpp"
#include "streams/memory_source.hpp"

namespace streamknn::streams {

namespace {

constexpr std::int32_t kMaxVecsDim = 1 << 20;  // the library's dimension limit

std::string at_vector(const std::string& path, std::size_t vector, std::size_t offset) {
  return path + ", vector " + std::to_string(vector) + " (byte offset " + std::to_string(offset) + ")";
}

std::size_t component_bytes(VecsKind kind) { return kind == VecsKind::Bvecs ? 1 : 4; }

/// The features of a vector file as a source's points: their info (name, dimension, feature
/// names x0, x1, ...), their floats and the locator naming a vector's byte offset.
struct VecsPoints {
  SourceInfo info;
  std::vector<float> x;
  MemorySource::Locator locator;
};

VecsPoints vecs_points(const std::string& path, Vecs features) {
  VecsPoints out;
  out.info.name = path;
  out.info.dim = features.dim;
  for (std::size_t c = 0; c < features.dim; ++c) {
    out.info.feature_names.push_back(std::string("x").append(std::to_string(c)));  // "x" + ... trips GCC 12's -Wrestrict
  }
  out.x = std::move(features.floats);
  if (features.kind == VecsKind::Ivecs) {
    out.x.reserve(features.ints.size());
    for (std::int32_t v : features.ints) out.x.push_back(static_cast<float>(v));
  }
  const std::size_t width = component_bytes(features.kind);
  const std::size_t record = 4 + features.dim * width;
  out.locator = [path, width, record](std::size_t index, std::optional<std::size_t> column) {
    std::string place = path + ", vector " + std::to_string(index);
    if (column) {
      place += ", component " + std::to_string(*column) + " (byte offset " +
               std::to_string(index * record + 4 + *column * width) + ")";
    }
    return place;
  };
  return out;
}

}  // namespace

VecsKind vecs_kind(const std::string& path) {
  if (path.ends_with(".fvecs")) return VecsKind::Fvecs;
  if (path.ends_with(".ivecs")) return VecsKind::Ivecs;
  if (path.ends_with(".bvecs")) return VecsKind::Bvecs;
  throw DataError(path + ": unknown vector file extension (expected .fvecs, .ivecs or .bvecs)");
}

Vecs read_vecs(const std::string& path, std::size_t max_count) {
  Vecs out;
  out.kind = vecs_kind(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(path + ": cannot open the file for reading");
  in.seekg(0, std::ios::end);
  const auto file_size = static_cast<std::size_t>(in.tellg());
  in.seekg(0);
  if (file_size == 0) throw DataError(path + ", vector 0 (byte offset 0): the file is empty (no vectors)");

  // Records are read one at a time so that a --limit reads only what it uses of a large set.
  const std::size_t width = component_bytes(out.kind);
  std::vector<char> body;
  std::size_t offset = 0;
  while (offset < file_size && (max_count == 0 || out.count < max_count)) {
    const std::size_t v = out.count;
    if (file_size - offset < 4) {
      throw DataError(at_vector(path, v, offset) + ": truncated: " + std::to_string(file_size - offset) +
                      " bytes left, a 4-byte dimension expected");
    }
    std::int32_t d = 0;
    in.read(reinterpret_cast<char*>(&d), 4);
    if (d < 1 || d > kMaxVecsDim) {
      throw DataError(at_vector(path, v, offset) + ": dimension " + std::to_string(d) + " is outside [1, " +
                      std::to_string(kMaxVecsDim) + "]");
    }
    if (v == 0) {
      out.dim = static_cast<std::size_t>(d);
      const std::size_t expected = file_size / (4 + out.dim * width);
      if (out.kind == VecsKind::Ivecs) {
        out.ints.reserve(expected * out.dim);
      } else {
        out.floats.reserve(expected * out.dim);
      }
    } else if (static_cast<std::size_t>(d) != out.dim) {
      throw DataError(at_vector(path, v, offset) + ": dimension " + std::to_string(d) + ", but vector 0 has " +
                      std::to_string(out.dim));
    }
    const std::size_t bytes = out.dim * width;
    if (file_size - offset - 4 < bytes) {
      throw DataError(at_vector(path, v, offset) + ": truncated: " + std::to_string(file_size - offset - 4) +
                      " bytes left of the " + std::to_string(bytes) + " its dimension needs");
    }
    body.resize(bytes);
    in.read(body.data(), static_cast<std::streamsize>(bytes));
    if (!in) throw DataError(at_vector(path, v, offset) + ": read error");
    const char* p = body.data();
    for (std::size_t c = 0; c < out.dim; ++c, p += width) {
      switch (out.kind) {
        case VecsKind::Fvecs: {
          float x = 0;
          std::memcpy(&x, p, 4);
          if (!std::isfinite(x)) {
            throw DataError(path + ", vector " + std::to_string(v) + ", component " + std::to_string(c) +
                            " (byte offset " + std::to_string(offset + 4 + c * width) + "): " +
                            (std::isnan(x) ? "NaN" : "infinite value") + " (values must be finite)");
          }
          out.floats.push_back(x);
          break;
        }
        case VecsKind::Ivecs: {
          std::int32_t x = 0;
          std::memcpy(&x, p, 4);
          out.ints.push_back(x);
          break;
        }
        case VecsKind::Bvecs: out.floats.push_back(static_cast<float>(static_cast<unsigned char>(*p))); break;
      }
    }
    offset += 4 + bytes;
    ++out.count;
  }
  return out;
}

std::unique_ptr<Source> open_vecs(const std::string& features_path, const std::string& labels_path, Task task,
                                  std::size_t limit) {
  Vecs features = read_vecs(features_path, limit);
  Vecs targets = read_vecs(labels_path, limit);
  if (targets.dim != 1) {
    throw DataError(at_vector(labels_path, 0, 0) + ": dimension " + std::to_string(targets.dim) +
                    "; a labels file holds one value per vector (dimension 1)");
  }
  if (targets.count != features.count) {
    throw DataError(labels_path + ", vector " + std::to_string(std::min(targets.count, features.count)) + ": " +
                    std::to_string(targets.count) + " labels for the " + std::to_string(features.count) +
                    " vectors of " + features_path);
  }
  VecsPoints points = vecs_points(features_path, std::move(features));
  SourceInfo& info = points.info;
  info.task = task;
  info.target_name = labels_path;
  std::vector<std::int32_t> labels;
  std::vector<float> values;
  if (task == Task::Classify) {
    std::vector<std::int64_t> integers;
    integers.reserve(targets.count);
    for (std::size_t i = 0; i < targets.count; ++i) {
      if (targets.kind == VecsKind::Ivecs) {
        integers.push_back(targets.ints[i]);
        continue;
      }
      const float v = targets.floats[i];
      if (v != std::floor(v) || std::fabs(v) > 2147483647.0f) {
        throw DataError(labels_path + ", vector " + std::to_string(i) + ", component 0 (byte offset " +
                        std::to_string(i * 8 + 4) + "): class " + std::to_string(v) +
                        " is not an integer (use --task regress for real-valued targets)");
      }
      integers.push_back(static_cast<std::int64_t>(v));
    }
    ClassMapping mapping = classes_from_integers(integers, labels_path);
    labels = std::move(mapping.labels);
    info.class_names = std::move(mapping.names);
    info.notes = "labels " + labels_path + ": " + mapping.notes;
  } else {
    if (targets.kind == VecsKind::Ivecs) {
      for (std::int32_t v : targets.ints) values.push_back(static_cast<float>(v));
    } else {
      values = std::move(targets.floats);
    }
    info.notes = "targets " + labels_path + ": regression";
  }
  return std::make_unique<MemorySource>(std::move(info), std::move(points.x), std::move(labels), std::move(values),
                                        std::move(points.locator));
}

std::unique_ptr<Source> open_vecs_points(const std::string& path, std::size_t limit) {
  VecsPoints points = vecs_points(path, read_vecs(path, limit));
  points.info.has_targets = false;
  return std::make_unique<MemorySource>(std::move(points.info), std::move(points.x), std::vector<std::int32_t>{},
                                        std::vector<float>{}, std::move(points.locator));
}

}  // namespace streamknn::streams
