#include "clients/import/supercages.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/util/utf8.h"

namespace sinew {
namespace {

// ---- Text helpers -------------------------------------------------------------------------------

absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open (", std::strerror(errno), ")"));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return std::move(ss).str();
}

// Calls fn(line_number, tokens) for every line with at least one token; '#' starts a comment
// (the whole line for comment-only lines). Stops at the first error.
template <typename Fn>
absl::Status ForEachLine(const std::string& text, Fn&& fn) {
  std::vector<std::string_view> tokens;
  size_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (const size_t hash = line.find('#'); hash != std::string_view::npos) {
      line = line.substr(0, hash);
    }
    tokens.clear();
    size_t i = 0;
    while (i < line.size()) {
      while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
      size_t j = i;
      while (j < line.size() && !std::isspace(static_cast<unsigned char>(line[j]))) ++j;
      if (j > i) tokens.push_back(line.substr(i, j - i));
      i = j;
    }
    if (tokens.empty()) continue;
    if (absl::Status st = fn(line_no, tokens); !st.ok()) return st;
  }
  return absl::OkStatus();
}

// Comment lines of a file, without the '#', trimmed (for version headers).
std::vector<std::string> CommentLines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos || line[b] != '#') continue;
    std::string c = line.substr(b + 1);
    const size_t s = c.find_first_not_of(" \t");
    const size_t e = c.find_last_not_of(" \t\r");
    out.push_back(s == std::string::npos ? std::string() : c.substr(s, e - s + 1));
  }
  return out;
}

absl::Status LineError(const std::string& path, size_t line, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat(path, ":", line, ": ", message));
}

std::string Str(std::string_view s) { return std::string(s); }

bool ParseDouble(std::string_view s, double* out) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size() && !s.empty();
}

bool ParseInt(std::string_view s, int64_t* out) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size() && !s.empty();
}

const char* Axis(size_t i) { return i == 0 ? "x" : i == 1 ? "y" : "z"; }

// Parses tokens[first..first+count) (count <= 3) as finite numbers, components x, y, z of `what`.
absl::Status ParseFinite(const std::string& path, size_t line,
                         const std::vector<std::string_view>& tokens, size_t first, size_t count,
                         const char* what, double* out) {
  for (size_t i = 0; i < count; ++i) {
    const std::string_view tok = tokens[first + i];
    if (!ParseDouble(tok, &out[i])) {
      return LineError(path, line, absl::StrCat(what, " ", Axis(i), " \"", Str(tok),
                                                "\" is not a number"));
    }
    if (!std::isfinite(out[i])) {
      return LineError(path, line, absl::StrCat(what, " ", Axis(i), " \"", Str(tok),
                                                "\" is not finite"));
    }
  }
  return absl::OkStatus();
}

// A file's stem as a name: UTF-8 (ValidUtf8), as the rig's protobuf strings must be.
std::string Stem(const std::string& path) { return ValidUtf8(std::filesystem::path(path).stem().string()); }

// Joints ordered parents first; error naming `path` when parents form a cycle.
absl::StatusOr<std::vector<int32_t>> ParentsFirst(const std::vector<int32_t>& parents,
                                                  const std::string& path) {
  const size_t n = parents.size();
  std::vector<std::vector<int32_t>> children(n);
  std::vector<int32_t> stack, order;
  for (size_t j = 0; j < n; ++j) {
    if (parents[j] < 0) stack.push_back(static_cast<int32_t>(j));
    else children[parents[j]].push_back(static_cast<int32_t>(j));
  }
  while (!stack.empty()) {
    const int32_t j = stack.back();
    stack.pop_back();
    order.push_back(j);
    for (auto it = children[j].rbegin(); it != children[j].rend(); ++it) stack.push_back(*it);
  }
  if (order.size() != n) {
    std::vector<bool> reached(n, false);
    for (int32_t j : order) reached[j] = true;
    for (size_t j = 0; j < n; ++j) {
      if (!reached[j]) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": joint ", j, " lies on a cycle of parent links"));
      }
    }
  }
  return order;
}

Similarity InverseRigid(const Similarity& s) {
  Similarity r;
  r.rotation = s.rotation.conjugate();
  r.scale = 1.0 / s.scale;
  r.translation = -(r.scale * (r.rotation * s.translation));
  return r;
}

// Global frames from local ones.
std::vector<Similarity> WorldFrames(const Skeleton& sk, const std::vector<int32_t>& order) {
  std::vector<Similarity> world(sk.size());
  for (int32_t j : order) {
    const int32_t p = sk.parents[j];
    world[j] = p < 0 ? sk.rest_local[j] : world[p] * sk.rest_local[j];
  }
  return world;
}

// Keyframe times of `k` lines, checked: finite, >= 0, strictly increasing.
absl::Status AddKeyTime(const std::string& path, size_t line,
                        const std::vector<std::string_view>& t, std::vector<double>* times) {
  if (t.size() != 2) {
    return LineError(path, line, absl::StrCat("expected 'k <time>' (2 fields), got ", t.size(),
                                              " fields"));
  }
  double time;
  if (!ParseDouble(t[1], &time) || !std::isfinite(time)) {
    return LineError(path, line, absl::StrCat("key time \"", Str(t[1]), "\" is not a finite number"));
  }
  if (time < 0) return LineError(path, line, absl::StrCat("key time ", time, " is negative"));
  if (!times->empty() && !(time > times->back())) {
    return LineError(path, line, absl::StrCat("key time ", time, " does not increase (previous ",
                                              times->back(), ")"));
  }
  times->push_back(time);
  return absl::OkStatus();
}

// Keyframe index of an `s`/`c` line.
absl::Status ParseKeyIndex(const std::string& path, size_t line, std::string_view tok,
                           size_t key_count, size_t* key) {
  int64_t k;
  if (!ParseInt(tok, &k)) {
    return LineError(path, line, absl::StrCat("keyframe index \"", Str(tok), "\" is not an integer"));
  }
  if (k < 0 || static_cast<size_t>(k) >= key_count) {
    return LineError(path, line, absl::StrCat("keyframe index ", k, " out of range (", key_count,
                                              " 'k' lines before this one)"));
  }
  *key = static_cast<size_t>(k);
  return absl::OkStatus();
}

}  // namespace

// ---- Public readers -----------------------------------------------------------------------------

Eigen::Quaterniond SuperCagesEuler(double rx_deg, double ry_deg, double rz_deg) {
  constexpr double kDeg = 3.14159265358979323846 / 180.0;
  return (Eigen::AngleAxisd(rz_deg * kDeg, Eigen::Vector3d::UnitZ()) *
          Eigen::AngleAxisd(ry_deg * kDeg, Eigen::Vector3d::UnitY()) *
          Eigen::AngleAxisd(rx_deg * kDeg, Eigen::Vector3d::UnitX()))
      .normalized();
}

SuperCagesFiles SuperCagesFilesIn(const std::string& dir, const std::string& name) {
  const std::filesystem::path d(dir);
  auto path = [&](const std::string& file) { return (d / (name + file)).string(); };
  auto optional = [&](const std::string& file) {
    std::error_code ec;
    const std::string p = path(file);
    return std::filesystem::exists(p, ec) ? p : std::string();
  };
  SuperCagesFiles f;
  f.mesh = path(".obj");
  f.skeleton = path(".skt");
  f.weights = path(".skw");
  f.cage = optional("_cage.obj");
  f.skeleton_clip = optional("_skelAnim.txt");
  f.cage_clip = optional("_cageAnim.txt");
  return f;
}

absl::Status ReadObj(const std::string& path, std::vector<float>* positions,
                     std::vector<uint32_t>* triangles) {
  auto text = ReadText(path);
  if (!text.ok()) return text.status();
  positions->clear();
  triangles->clear();
  // Positive indices beyond the vertices read so far (legal if defined later): checked at the end.
  std::vector<std::pair<int64_t, size_t>> forward;  // (1-based index, line)
  std::vector<int64_t> poly;
  absl::Status st = ForEachLine(*text, [&](size_t line, const std::vector<std::string_view>& t) {
    if (t[0] == "v") {
      if (t.size() < 4) {
        return LineError(path, line, absl::StrCat("vertex needs 3 coordinates, got ", t.size() - 1));
      }
      const size_t v = positions->size() / 3;
      for (size_t i = 0; i < 3; ++i) {
        double c;
        if (!ParseDouble(t[1 + i], &c)) {
          return LineError(path, line, absl::StrCat("vertex ", v + 1, " coordinate ", Axis(i), " \"",
                                                    Str(t[1 + i]), "\" is not a number"));
        }
        if (!std::isfinite(c) || std::abs(c) > std::numeric_limits<float>::max()) {
          return LineError(path, line, absl::StrCat("vertex ", v + 1, " coordinate ", Axis(i), " \"",
                                                    Str(t[1 + i]), "\" is not finite"));
        }
        positions->push_back(static_cast<float>(c));
      }
    } else if (t[0] == "f") {
      if (t.size() < 4) {
        return LineError(path, line, absl::StrCat("face needs at least 3 vertices, got ",
                                                  t.size() - 1));
      }
      const int64_t read = static_cast<int64_t>(positions->size() / 3);
      poly.clear();
      for (size_t i = 1; i < t.size(); ++i) {
        const std::string_view tok = t[i].substr(0, t[i].find('/'));
        int64_t idx;
        if (!ParseInt(tok, &idx)) {
          return LineError(path, line, absl::StrCat("face vertex \"", Str(t[i]),
                                                    "\" does not start with an integer index"));
        }
        if (idx == 0) {
          return LineError(path, line, "face index 0 (OBJ indices start at 1; negative ones count "
                                       "back from the last vertex)");
        }
        if (idx < 0) {
          if (idx < -read) {  // not -idx > read: -INT64_MIN overflows
            return LineError(path, line, absl::StrCat("relative face index ", idx, " reaches before "
                                                      "the first vertex (", read, " read so far)"));
          }
          idx = read + idx;  // -1 = last vertex read
        } else {
          if (idx > std::numeric_limits<uint32_t>::max()) {
            return LineError(path, line, absl::StrCat("face index ", idx, " is too large"));
          }
          if (idx > read) forward.emplace_back(idx, line);
          idx -= 1;
        }
        poly.push_back(idx);
      }
      for (size_t i = 1; i + 1 < poly.size(); ++i) {  // fan
        triangles->push_back(static_cast<uint32_t>(poly[0]));
        triangles->push_back(static_cast<uint32_t>(poly[i]));
        triangles->push_back(static_cast<uint32_t>(poly[i + 1]));
      }
    }
    return absl::OkStatus();
  });
  if (!st.ok()) return st;
  const size_t n = positions->size() / 3;
  for (const auto& [idx, line] : forward) {
    if (static_cast<size_t>(idx) > n) {
      return LineError(path, line, absl::StrCat("face index ", idx, " out of range (", n,
                                                " vertices)"));
    }
  }
  if (n == 0) return absl::InvalidArgumentError(absl::StrCat(path, ": no vertices ('v' lines)"));
  return absl::OkStatus();
}

absl::StatusOr<Skeleton> ReadSkt(const std::string& path) {
  auto text = ReadText(path);
  if (!text.ok()) return text.status();
  struct Row {
    int64_t index;
    std::string name;
    int64_t parent;
    Eigen::Vector3d euler;
    Eigen::Vector3d position;
    size_t line;
  };
  std::vector<Row> rows;
  absl::Status st = ForEachLine(*text, [&](size_t line, const std::vector<std::string_view>& t) {
    if (t[0] != "j") {
      return LineError(path, line, absl::StrCat("unknown record \"", Str(t[0]),
                                                "\" (expected 'j' joint lines)"));
    }
    if (t.size() != 7 && t.size() != 10) {
      return LineError(path, line, absl::StrCat(
          "expected 'j <index> <name> <parent> <x y z>' (7 fields) or 'j <index> <name> <parent> "
          "<rx ry rz> <x y z>' (10 fields), got ", t.size(), " fields"));
    }
    Row r;
    r.line = line;
    if (!ParseInt(t[1], &r.index)) {
      return LineError(path, line, absl::StrCat("joint index \"", Str(t[1]), "\" is not an integer"));
    }
    r.name = ValidUtf8(Str(t[2]));  // UTF-8 for the rig (a Latin-1 name failed the upload until 2026-12-07)
    if (!ParseInt(t[3], &r.parent)) {
      return LineError(path, line, absl::StrCat("parent index \"", Str(t[3]), "\" is not an integer"));
    }
    r.euler.setZero();
    if (t.size() == 10) {
      if (auto s = ParseFinite(path, line, t, 4, 3, "rest rotation", r.euler.data()); !s.ok()) {
        return s;
      }
    }
    if (auto s = ParseFinite(path, line, t, t.size() - 3, 3, "position", r.position.data());
        !s.ok()) {
      return s;
    }
    rows.push_back(std::move(r));
    return absl::OkStatus();
  });
  if (!st.ok()) return st;
  const size_t n = rows.size();
  if (n == 0) return absl::InvalidArgumentError(absl::StrCat(path, ": no joints ('j' lines)"));
  std::vector<const Row*> by_index(n, nullptr);
  absl::flat_hash_map<std::string, size_t> names;
  for (const Row& r : rows) {
    if (r.index < 0 || static_cast<size_t>(r.index) >= n) {
      return LineError(path, r.line, absl::StrCat("joint index ", r.index, " out of range (", n,
                                                  " joints: indices 0..", n - 1, ")"));
    }
    if (by_index[r.index] != nullptr) {
      return LineError(path, r.line, absl::StrCat("joint index ", r.index, " already given on line ",
                                                  by_index[r.index]->line));
    }
    by_index[r.index] = &r;
    if (auto [it, fresh] = names.emplace(r.name, r.line); !fresh) {
      return LineError(path, r.line, absl::StrCat("joint name \"", r.name,
                                                  "\" already given on line ", it->second));
    }
    if (r.parent < -1 || r.parent >= static_cast<int64_t>(n) || r.parent == r.index) {
      return LineError(path, r.line, absl::StrCat("parent index ", r.parent, " of joint ", r.index,
                                                  " is not -1 or another joint's index (", n,
                                                  " joints)"));
    }
  }
  Skeleton sk;
  sk.names.resize(n);
  sk.parents.resize(n);
  std::vector<Similarity> world(n);
  for (size_t j = 0; j < n; ++j) {
    const Row& r = *by_index[j];
    sk.names[j] = r.name;
    sk.parents[j] = static_cast<int32_t>(r.parent);
    world[j].rotation = SuperCagesEuler(r.euler.x(), r.euler.y(), r.euler.z());
    world[j].translation = r.position;
  }
  if (auto order = ParentsFirst(sk.parents, path); !order.ok()) return order.status();
  sk.rest_local.resize(n);
  for (size_t j = 0; j < n; ++j) {
    const int32_t p = sk.parents[j];
    sk.rest_local[j] = p < 0 ? world[j] : InverseRigid(world[p]) * world[j];
  }
  return sk;
}

absl::StatusOr<WeightsInput> ReadSkw(const std::string& path, size_t vertex_count,
                                     size_t joint_count) {
  auto text = ReadText(path);
  if (!text.ok()) return text.status();
  struct Entry {
    uint32_t vertex;
    uint32_t joint;
    float weight;
  };
  std::vector<Entry> entries;
  absl::Status st = ForEachLine(*text, [&](size_t line, const std::vector<std::string_view>& t) {
    if (t.size() != 3) {
      return LineError(path, line, absl::StrCat("expected '<jointIndex> <vertexIndex> <weight>' "
                                                "(3 fields), got ", t.size(), " fields"));
    }
    int64_t j, v;
    double w;
    if (!ParseInt(t[0], &j)) {
      return LineError(path, line, absl::StrCat("joint index \"", Str(t[0]), "\" is not an integer"));
    }
    if (!ParseInt(t[1], &v)) {
      return LineError(path, line, absl::StrCat("vertex index \"", Str(t[1]), "\" is not an integer"));
    }
    if (!ParseDouble(t[2], &w)) {
      return LineError(path, line, absl::StrCat("weight \"", Str(t[2]), "\" is not a number"));
    }
    if (j < 0 || static_cast<uint64_t>(j) >= joint_count) {
      return LineError(path, line, absl::StrCat("joint index ", j, " out of range (", joint_count,
                                                " joints)"));
    }
    if (v < 0 || static_cast<uint64_t>(v) >= vertex_count) {
      return LineError(path, line, absl::StrCat("vertex index ", v, " out of range (", vertex_count,
                                                " vertices)"));
    }
    if (!std::isfinite(w) || w < 0 || w > std::numeric_limits<float>::max()) {
      return LineError(path, line, absl::StrCat("weight ", Str(t[2]), " is ",
                                                !std::isfinite(w) ? "not finite"
                                                : w < 0           ? "negative"
                                                                  : "beyond float's range"));
    }
    entries.push_back({static_cast<uint32_t>(v), static_cast<uint32_t>(j), static_cast<float>(w)});
    return absl::OkStatus();
  });
  if (!st.ok()) return st;
  WeightsInput out;
  out.normalize = true;
  out.offsets.assign(vertex_count + 1, 0);
  for (const Entry& e : entries) ++out.offsets[e.vertex + 1];
  for (size_t v = 0; v < vertex_count; ++v) {
    if (out.offsets[v + 1] == 0) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": vertex ", v, " has no weight lines (",
                                                     vertex_count, " vertices)"));
    }
    out.offsets[v + 1] += out.offsets[v];
  }
  out.joints.resize(entries.size());
  out.weights.resize(entries.size());
  std::vector<uint32_t> fill(out.offsets.begin(), out.offsets.end() - 1);
  for (const Entry& e : entries) {
    const uint32_t at = fill[e.vertex]++;
    out.joints[at] = e.joint;
    out.weights[at] = e.weight;
  }
  return out;
}

absl::StatusOr<Clip> ReadSkeletonClip(const std::string& path, const Skeleton& skeleton,
                                      std::vector<std::string>* notes) {
  auto text = ReadText(path);
  if (!text.ok()) return text.status();
  for (const std::string& c : CommentLines(*text)) {
    if (c == "V1" || c == "V2") {
      return absl::UnimplementedError(absl::StrCat(
          path, ": skeleton animation version ", c, " is not supported (only \"# V3\": global "
          "Euler rotations and global positions)"));
    }
  }
  const size_t n = skeleton.size();
  if (n == 0 || skeleton.rest_local.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": the skeleton has no joints"));
  }
  struct Row {
    Eigen::Vector3d euler;
    Eigen::Vector3d position;
  };
  std::vector<double> times;
  std::vector<std::vector<Row>> keys;  // [key][joint]
  absl::Status st = ForEachLine(*text, [&](size_t line, const std::vector<std::string_view>& t) {
    if (t[0] == "k") {
      if (auto s = AddKeyTime(path, line, t, &times); !s.ok()) return s;
      keys.emplace_back();
      return absl::OkStatus();
    }
    if (t[0] != "s") {
      return LineError(path, line, absl::StrCat("unknown record \"", Str(t[0]),
                                                "\" (expected 'k' or 's' lines)"));
    }
    if (t.size() == 18) {
      return LineError(path, line, "16-number matrix ('# V1' format) is not supported");
    }
    if (t.size() != 8) {
      return LineError(path, line, absl::StrCat("expected 's <key> <rx ry rz> <tx ty tz>' (8 "
                                                "fields), got ", t.size(), " fields"));
    }
    size_t k;
    if (auto s = ParseKeyIndex(path, line, t[1], times.size(), &k); !s.ok()) return s;
    if (keys[k].size() == n) {
      return LineError(path, line, absl::StrCat("keyframe ", k, " has more 's' lines than the ", n,
                                                " joints of the skeleton"));
    }
    Row r;
    if (auto s = ParseFinite(path, line, t, 2, 3, "rotation", r.euler.data()); !s.ok()) return s;
    if (auto s = ParseFinite(path, line, t, 5, 3, "translation", r.position.data()); !s.ok()) {
      return s;
    }
    keys[k].push_back(r);
    return absl::OkStatus();
  });
  if (!st.ok()) return st;
  if (times.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no keyframes ('k' lines)"));
  }
  for (size_t k = 0; k < keys.size(); ++k) {
    if (keys[k].size() != n) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": keyframe ", k, " has ",
                                                     keys[k].size(), " 's' lines, expected ", n,
                                                     " (one per joint, in joint order)"));
    }
  }
  auto order = ParentsFirst(skeleton.parents, path);
  if (!order.ok()) return order.status();
  const std::vector<Similarity> rest_world = WorldFrames(skeleton, *order);

  Clip clip;
  clip.name = Stem(path);
  clip.duration = times.back();
  clip.tracks.resize(n);
  for (JointTrack& tr : clip.tracks) {
    tr.rotation_times = times;
    tr.translation_times = times;
  }
  // Statistics of what the rebuilt positions drop from the file.
  double max_pos_dev = 0, max_len_dev = 0;
  size_t pos_joint = 0, pos_key = 0, len_joint = 0, len_key = 0;
  std::vector<Similarity> world(n);
  for (size_t k = 0; k < keys.size(); ++k) {
    for (int32_t j : *order) {
      const Row& r = keys[k][j];
      const int32_t p = skeleton.parents[j];
      const Eigen::Quaterniond global = SuperCagesEuler(r.euler.x(), r.euler.y(), r.euler.z());
      Similarity local;
      if (p < 0) {
        local.rotation = global;
        local.translation =
            rest_world[j].translation + (r.position - keys.front()[j].position);
        local.scale = skeleton.rest_local[j].scale;
        world[j] = local;
      } else {
        local.rotation = (world[p].rotation.conjugate() * global).normalized();
        local.translation = skeleton.rest_local[j].translation;
        local.scale = skeleton.rest_local[j].scale;
        world[j] = world[p] * local;
      }
      JointTrack& tr = clip.tracks[j];
      if (!tr.rotations.empty() && tr.rotations.back().dot(local.rotation) < 0) {
        local.rotation.coeffs() *= -1;  // same hemisphere as the previous key
      }
      tr.rotations.push_back(local.rotation);
      tr.translations.push_back(local.translation);

      const double dev = (world[j].translation - r.position).norm();
      if (dev > max_pos_dev) {
        max_pos_dev = dev;
        pos_joint = j;
        pos_key = k;
      }
      if (p >= 0) {
        const double stored = (r.position - keys[k][p].position).norm();
        const double rest = (rest_world[j].translation - rest_world[p].translation).norm();
        if (std::abs(stored - rest) > max_len_dev) {
          max_len_dev = std::abs(stored - rest);
          len_joint = j;
          len_key = k;
        }
      }
    }
  }
  if (notes != nullptr) {
    const std::string file = std::filesystem::path(path).filename().string();
    notes->push_back(absl::StrCat(
        file, ": rotations read as Euler angles in degrees, R = Rz*Ry*Rx, global (world) joint "
        "orientations; converted to parent-local keys"));
    notes->push_back(absl::StrFormat(
        "%s: joint positions rebuilt by forward kinematics from the skeleton's bone offsets (bone "
        "lengths kept); the file's stored positions would change bone lengths by up to %.4g "
        "(joint %d \"%s\", key %d) and differ from the rebuilt ones by up to %.4g (joint %d "
        "\"%s\", key %d)",
        file, max_len_dev, len_joint, skeleton.names[len_joint], len_key, max_pos_dev, pos_joint,
        skeleton.names[pos_joint], pos_key));
    for (size_t j = 0; j < n; ++j) {
      if (skeleton.parents[j] >= 0) continue;
      const Eigen::Vector3d d = keys.front()[j].position - rest_world[j].translation;
      notes->push_back(absl::StrFormat(
          "%s: root joint %d \"%s\" translation taken relative to the first key; the file puts "
          "it (%.4g, %.4g, %.4g) away from the rest position (%.4g units), an offset dropped",
          file, j, skeleton.names[j], d.x(), d.y(), d.z(), d.norm()));
    }
  }
  return clip;
}

absl::StatusOr<CageClip> ReadCageClip(const std::string& path, size_t cage_vertex_count) {
  auto text = ReadText(path);
  if (!text.ok()) return text.status();
  CageClip clip;
  absl::Status st = ForEachLine(*text, [&](size_t line, const std::vector<std::string_view>& t) {
    if (t[0] == "k") {
      if (auto s = AddKeyTime(path, line, t, &clip.times); !s.ok()) return s;
      clip.offsets.emplace_back();
      return absl::OkStatus();
    }
    if (t[0] != "c") {
      return LineError(path, line, absl::StrCat("unknown record \"", Str(t[0]),
                                                "\" (expected 'k' or 'c' lines)"));
    }
    if (t.size() != 5) {
      return LineError(path, line, absl::StrCat("expected 'c <key> <dx dy dz>' (5 fields), got ",
                                                t.size(), " fields"));
    }
    size_t k;
    if (auto s = ParseKeyIndex(path, line, t[1], clip.times.size(), &k); !s.ok()) return s;
    if (cage_vertex_count > 0 && clip.offsets[k].size() == 3 * cage_vertex_count) {
      return LineError(path, line, absl::StrCat("keyframe ", k, " has more 'c' lines than the ",
                                                cage_vertex_count, " cage vertices"));
    }
    double d[3];
    if (auto s = ParseFinite(path, line, t, 2, 3, "offset", d); !s.ok()) return s;
    for (int i = 0; i < 3; ++i) {
      if (std::abs(d[i]) > std::numeric_limits<float>::max()) {
        return LineError(path, line, absl::StrCat("offset ", Axis(i), " \"", Str(t[2 + i]), "\" is beyond float's range"));
      }
    }
    for (double x : d) clip.offsets[k].push_back(static_cast<float>(x));
    return absl::OkStatus();
  });
  if (!st.ok()) return st;
  if (clip.times.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no keyframes ('k' lines)"));
  }
  const size_t expected = cage_vertex_count > 0 ? cage_vertex_count : clip.offsets[0].size() / 3;
  for (size_t k = 0; k < clip.offsets.size(); ++k) {
    if (clip.offsets[k].size() != 3 * expected || expected == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": keyframe ", k, " has ", clip.offsets[k].size() / 3, " 'c' lines, expected ",
          expected, cage_vertex_count > 0 ? " (one per cage vertex)" : " (as keyframe 0)"));
    }
  }
  return clip;
}

absl::StatusOr<SuperCagesRig> ReadSuperCages(const SuperCagesFiles& files) {
  if (files.mesh.empty()) return absl::InvalidArgumentError("SuperCagesFiles.mesh: no path");
  if (files.skeleton.empty()) return absl::InvalidArgumentError("SuperCagesFiles.skeleton: no path");
  if (files.weights.empty()) return absl::InvalidArgumentError("SuperCagesFiles.weights: no path");
  SuperCagesRig out;
  Rig& rig = out.rig.rig;
  rig.name = Stem(files.mesh);
  if (auto st = ReadObj(files.mesh, &rig.positions, &rig.triangles); !st.ok()) return st;
  auto skeleton = ReadSkt(files.skeleton);
  if (!skeleton.ok()) return skeleton.status();
  rig.skeleton = *std::move(skeleton);
  auto weights = ReadSkw(files.weights, rig.vertex_count(), rig.joint_count());
  if (!weights.ok()) return weights.status();
  out.rig.weights = *std::move(weights);
  {
    const WeightsInput& w = out.rig.weights;
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (size_t v = 0; v + 1 < w.offsets.size(); ++v) {
      double sum = 0;
      for (uint32_t e = w.offsets[v]; e < w.offsets[v + 1]; ++e) sum += w.weights[e];
      lo = std::min(lo, sum);
      hi = std::max(hi, sum);
    }
    out.notes.push_back(absl::StrFormat(
        "%s: per-vertex weight sums range %.7g..%.7g; normalize = true rescales them to 1",
        std::filesystem::path(files.weights).filename().string(), lo, hi));
  }
  if (!files.cage.empty()) {
    Cage cage;
    cage.name = Stem(files.cage);
    if (auto st = ReadObj(files.cage, &cage.positions, &cage.triangles); !st.ok()) return st;
    rig.cages.push_back(std::move(cage));
  }
  if (!files.skeleton_clip.empty()) {
    auto clip = ReadSkeletonClip(files.skeleton_clip, rig.skeleton, &out.notes);
    if (!clip.ok()) return clip.status();
    out.skeleton_clip = *std::move(clip);
  }
  if (!files.cage_clip.empty()) {
    const size_t cage_vertices = rig.cages.empty() ? 0 : rig.cages[0].vertex_count();
    auto clip = ReadCageClip(files.cage_clip, cage_vertices);
    if (!clip.ok()) return clip.status();
    out.cage_clip = *std::move(clip);
    out.notes.push_back(absl::StrCat(
        std::filesystem::path(files.cage_clip).filename().string(),
        ": cage offsets stored as given; they are offsets from the rest (deformation) cage, "
        "applied before skinning (docs/supercages-formats.md)",
        rig.cages.empty() ? "; no cage file was given, so the vertex count is unchecked" : ""));
  }
  return out;
}

}  // namespace sinew
