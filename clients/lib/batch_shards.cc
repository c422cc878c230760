#include "clients/lib/batch_shards.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "clients/lib/point_cache.h"
#include "core/util/atomic_file.h"

namespace sinew::client {
namespace {

namespace fs = std::filesystem;

constexpr char kManifestMagic[] = "sinew-batch-shard 1";

bool ParseU64(absl::string_view s, uint64_t* out) {
  if (s.empty() || s.size() > 19) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return absl::SimpleAtoi(s, out);
}

std::string Frames(FrameRange r) {
  return r.size() == 1 ? absl::StrCat("frame ", r.begin) : absl::StrCat("frames ", r.begin, " to ", r.end - 1);
}

std::string Of(Shard s) { return absl::StrCat("shard ", s.index, " of ", s.count); }

}  // namespace

absl::StatusOr<Shard> ParseShard(absl::string_view spec) {
  const std::vector<absl::string_view> parts = absl::StrSplit(spec, '/');
  Shard s;
  if (parts.size() != 2 || !ParseU64(parts[0], &s.index) || !ParseU64(parts[1], &s.count)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--shard: \"", spec.substr(0, 64), "\" is not I/N (shard I, 0-based, of N; e.g. 0/3)"));
  }
  if (s.count < 1 || s.count > kMaxShards) {
    return absl::InvalidArgumentError(absl::StrCat("--shard: N = ", s.count, " is not in [1, ", kMaxShards, "]"));
  }
  if (s.index >= s.count) {
    return absl::InvalidArgumentError(
        absl::StrCat("--shard: index ", s.index, " is not below the shard count ", s.count, " (indices are 0-based)"));
  }
  return s;
}

absl::StatusOr<Shard> ShardFromEnvironment(uint64_t count, const char* variable) {
  if (count < 1 || count > kMaxShards) {
    return absl::InvalidArgumentError(absl::StrCat("--shard-from-env: N = ", count, " is not in [1, ", kMaxShards, "]"));
  }
  const char* value = std::getenv(variable);
  if (value == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--shard-from-env: $", variable, " is not set (a Kubernetes Indexed Job sets it in each pod; elsewhere "
        "give --shard I/N)"));
  }
  Shard s;
  s.count = count;
  if (!ParseU64(value, &s.index)) {
    return absl::InvalidArgumentError(absl::StrCat("--shard-from-env: $", variable, " = \"",
                                                   absl::string_view(value).substr(0, 64), "\" is not a shard index"));
  }
  if (s.index >= count) {
    return absl::InvalidArgumentError(absl::StrCat("--shard-from-env: $", variable, " = ", s.index,
                                                   " is not below the shard count ", count));
  }
  return s;
}

FrameRange ShardFrames(uint64_t total, Shard shard) {
  // 128-bit products: total * index must not wrap.
  const auto at = [&](uint64_t i) {
    return static_cast<uint64_t>(static_cast<unsigned __int128>(total) * i / shard.count);
  };
  return FrameRange{at(shard.index), at(shard.index + 1)};
}

std::string ShardName(Shard shard) { return absl::StrCat("shard-", shard.index, "-of-", shard.count); }

std::string ShardPartPath(const std::string& pc2, Shard shard) { return absl::StrCat(pc2, ".", ShardName(shard)); }

std::string Pc2JobPath(const std::string& pc2) { return pc2 + ".job"; }

std::string ObjJobPath(const std::string& obj_dir, const std::string& stem) {
  return (std::filesystem::path(obj_dir) / (stem + ".job")).string();
}

std::string ShardManifestPath(const std::string& pc2, const std::string& obj_dir, Shard shard) {
  if (!pc2.empty()) return ShardPartPath(pc2, shard) + ".manifest";
  return (fs::path(obj_dir) / (ShardName(shard) + ".manifest")).string();
}

absl::Status WriteShardManifest(const std::string& path, const ShardManifest& m) {
  std::ostringstream text;
  text << kManifestMagic << "\n"
       << "job " << m.job << "\n"
       << "shard " << m.shard.index << " " << m.shard.count << "\n"
       << "total_frames " << m.total_frames << "\n"
       << "frames " << m.frames.begin << " " << m.frames.end << "\n"
       << "points " << m.points << "\n"
       << "backend " << m.backend << "\n"
       << "stem " << m.stem << "\n";
  return WriteFileAtomically(path, text.str());
}

absl::StatusOr<ShardManifest> ReadShardManifest(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    if (std::error_code ec; !fs::exists(path, ec)) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return absl::ErrnoToStatus(errno, absl::StrCat("open ", path));
  }
  const auto bad = [&](int line, absl::string_view why) {
    return absl::FailedPreconditionError(absl::StrCat(path, ":", line, ": ", why, " (not a shard manifest "
                                                      "written by sinew batch --shard; run the shard again with --no-resume)"));
  };
  std::string line;
  if (!std::getline(in, line) || line != kManifestMagic) return bad(1, "first line is not \"sinew-batch-shard 1\"");
  ShardManifest m;
  std::set<std::string> seen;
  const std::vector<std::string> keys = {"job", "shard", "total_frames", "frames", "points", "backend", "stem"};
  for (int n = 2; std::getline(in, line); ++n) {
    const size_t sp = line.find(' ');
    const std::string key = line.substr(0, sp), value = sp == std::string::npos ? "" : line.substr(sp + 1);
    if (!seen.insert(key).second) return bad(n, absl::StrCat("\"", key.substr(0, 32), "\" given twice"));
    const std::vector<absl::string_view> words = absl::StrSplit(value, ' ');
    uint64_t a = 0, b = 0;
    if (key == "job") {
      if (value.size() != 64) return bad(n, "job is not a 64-digit fingerprint");
      m.job = value;
    } else if (key == "shard" || key == "frames") {
      if (words.size() != 2 || !ParseU64(words[0], &a) || !ParseU64(words[1], &b)) return bad(n, key + " is not two numbers");
      if (key == "shard") {
        if (b < 1 || b > kMaxShards || a >= b) return bad(n, "shard index not below the count");
        m.shard = Shard{a, b};
      } else {
        if (a > b) return bad(n, "frames end before they begin");
        m.frames = FrameRange{a, b};
      }
    } else if (key == "total_frames" || key == "points") {
      if (!ParseU64(value, &a)) return bad(n, key + " is not a number");
      if (key == "points") {
        if (a == 0 || a > 0x7fffffffu) return bad(n, "points out of range");
        m.points = static_cast<uint32_t>(a);
      } else {
        m.total_frames = a;
      }
    } else if (key == "backend") {
      if (value != "cpu" && value != "gpu" && value != "none") return bad(n, "backend is not cpu, gpu or none");
      m.backend = value;
    } else if (key == "stem") {
      if (value.empty() || value.find('/') != std::string::npos) return bad(n, "stem is empty or holds '/'");
      m.stem = value;
    } else {
      return bad(n, absl::StrCat("unknown key \"", key.substr(0, 32), "\""));
    }
  }
  for (const std::string& k : keys) {
    if (!seen.count(k)) return bad(0, absl::StrCat("no \"", k, "\" line"));
  }
  const FrameRange want = ShardFrames(m.total_frames, m.shard);
  if (m.frames.begin != want.begin || m.frames.end != want.end) {
    return bad(0, absl::StrCat(Of(m.shard), " of ", m.total_frames, " frames is frames [", want.begin, ", ", want.end,
                               "), not [", m.frames.begin, ", ", m.frames.end, ")"));
  }
  return m;
}

absl::Status SameShardJob(const ShardManifest& e, const ShardManifest& w, const std::string& path) {
  std::string what;
  if (e.job != w.job) {
    what = "another job (a different asset, clip, --clip-fps, method, parameters, encoding or --backend)";
  } else if (e.shard.index != w.shard.index || e.shard.count != w.shard.count) {
    what = absl::StrCat(Of(e.shard), ", not ", Of(w.shard));
  } else if (e.total_frames != w.total_frames || e.points != w.points) {
    what = absl::StrCat(e.total_frames, " frames of ", e.points, " points, not ", w.total_frames, " of ", w.points);
  } else if (e.stem != w.stem) {
    what = absl::StrCat("OBJ files named ", e.stem, "_*, not ", w.stem, "_*");
  } else {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(
      absl::StrCat(path, ": this shard was started for ", what, "; give the same flags, or --no-resume to start it over"));
}

absl::StatusOr<MergeResult> MergeShards(const MergeOptions& o) {
  if (o.pc2.empty() && o.obj_dir.empty()) return absl::InvalidArgumentError("merge-shards: give --pc2 FILE and/or --obj DIR");
  const std::string name = o.pc2.empty() ? o.obj_dir : o.pc2;
  // Manifests present, by shard count and index.
  const fs::path dir = o.pc2.empty() ? fs::path(o.obj_dir) : fs::path(o.pc2).parent_path();
  const std::string prefix = o.pc2.empty() ? "shard-" : fs::path(o.pc2).filename().string() + ".shard-";
  std::map<uint64_t, std::set<uint64_t>> found;
  std::error_code ec;
  for (fs::directory_iterator it(dir.empty() ? fs::path(".") : dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string f = it->path().filename().string();
    const std::string kSuffix = ".manifest";
    if (f.size() <= prefix.size() + kSuffix.size() || f.compare(0, prefix.size(), prefix) != 0 ||
        f.compare(f.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0) {
      continue;
    }
    const std::string mid = f.substr(prefix.size(), f.size() - prefix.size() - kSuffix.size());  // I-of-N
    const size_t of = mid.find("-of-");
    uint64_t i = 0, n = 0;
    if (of == std::string::npos || !ParseU64(mid.substr(0, of), &i) || !ParseU64(mid.substr(of + 4), &n)) continue;
    if (n >= 1 && n <= kMaxShards && i < n) found[n].insert(i);
  }
  if (ec) return absl::ErrnoToStatus(ec.value(), absl::StrCat("merge-shards: read folder ", dir.string()));
  const std::string pattern = ShardManifestPath(o.pc2, o.obj_dir, Shard{0, 1});
  const std::string pattern_shown = pattern.substr(0, pattern.size() - std::string("0-of-1.manifest").size()) + "I-of-N.manifest";
  uint64_t count = o.shards;
  if (count == 0) {
    if (found.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(name, ": no shards found (", pattern_shown,
                                                        "): run `sinew batch --shard I/N` first"));
    }
    if (found.size() > 1) {
      std::vector<uint64_t> counts;
      for (const auto& [n, _] : found) counts.push_back(n);
      return absl::FailedPreconditionError(absl::StrCat(name, ": manifests of shards of ", absl::StrJoin(counts, ", "),
                                                        " found: say which with --shards N"));
    }
    count = found.begin()->first;
  }
  if (count > kMaxShards) return absl::InvalidArgumentError(absl::StrCat("--shards: ", count, " is above ", kMaxShards));

  std::vector<std::optional<ShardManifest>> manifests(count);
  std::optional<ShardManifest> ref;
  std::string ref_path;
  for (uint64_t i = 0; i < count; ++i) {
    const std::string path = ShardManifestPath(o.pc2, o.obj_dir, Shard{i, count});
    absl::StatusOr<ShardManifest> m = ReadShardManifest(path);
    if (absl::IsNotFound(m.status())) continue;
    if (!m.ok()) return m.status();
    if (m->shard.index != i || m->shard.count != count) {
      return absl::FailedPreconditionError(absl::StrCat(path, ": describes ", Of(m->shard), ", not ", Of(Shard{i, count})));
    }
    if (!ref) {
      ref = *m;
      ref_path = path;
    } else {
      ShardManifest want = *ref;
      want.shard = m->shard;
      if (absl::Status st = SameShardJob(*m, want, path); !st.ok()) {
        return absl::FailedPreconditionError(absl::StrCat(path, " and ", ref_path, " are shards of different jobs (",
                                                          st.message(), ")"));
      }
    }
    manifests[i] = std::move(*m);
  }
  if (!ref) {
    return absl::FailedPreconditionError(absl::StrCat(name, ": none of the ", count, " shards has run (no ",
                                                      pattern_shown, " with N = ", count, ")"));
  }
  // One backend for every frame: a GPU's floats need not equal a CPU's bit for bit.
  std::string backend, backend_of;
  for (uint64_t i = 0; i < count; ++i) {
    if (!manifests[i] || manifests[i]->backend == "none") continue;
    if (backend.empty()) {
      backend = manifests[i]->backend;
      backend_of = Of(manifests[i]->shard);
    } else if (manifests[i]->backend != backend) {
      return absl::FailedPreconditionError(absl::StrCat(
          name, ": ", backend_of, " ran on the ", backend, ", ", Of(manifests[i]->shard), " on the ",
          manifests[i]->backend, "; their frames would not equal one run's: run the shards with the same --backend"));
    }
  }

  const uint64_t total = ref->total_frames;
  std::vector<std::string> missing;
  std::vector<Pc2Part> parts;
  for (uint64_t i = 0; i < count; ++i) {
    const Shard s{i, count};
    const FrameRange r = ShardFrames(total, s);
    if (r.size() == 0) continue;
    if (!manifests[i]) {
      missing.push_back(absl::StrCat(Frames(r), " (", Of(s), " has not run: no ",
                                     ShardManifestPath(o.pc2, o.obj_dir, s), ")"));
      continue;
    }
    if (o.pc2.empty()) continue;
    const std::string part = ShardPartPath(o.pc2, s);
    absl::StatusOr<Pc2Info> info = InspectPc2(part);
    if (absl::IsNotFound(info.status())) {
      missing.push_back(absl::StrCat(Frames(r), " (", Of(s), ": no ", part, ")"));
      continue;
    }
    if (!info.ok()) return info.status();
    if (info->points != ref->points) {
      return absl::FailedPreconditionError(
          absl::StrCat(part, ": holds ", info->points, " points a frame, its manifest says ", ref->points));
    }
    if (info->complete_frames > r.size()) {
      return absl::FailedPreconditionError(absl::StrCat(part, ": holds ", info->complete_frames, " frames, more than ",
                                                        Of(s), "'s ", r.size()));
    }
    if (info->complete_frames < r.size()) {
      missing.push_back(absl::StrCat(Frames(FrameRange{r.begin + info->complete_frames, r.end}), " (", Of(s), ": ",
                                     part, " holds ", info->complete_frames, " of its ", r.size(), " frames)"));
      continue;
    }
    parts.push_back(Pc2Part{part, r.size()});
  }
  if (!o.obj_dir.empty()) {
    std::vector<FrameRange> gaps;
    for (uint64_t f = 0; f < total; ++f) {
      if (std::error_code ec; fs::exists(ObjFramePath(o.obj_dir, ref->stem, f), ec)) continue;
      if (!gaps.empty() && gaps.back().end == f) {
        ++gaps.back().end;
      } else {
        gaps.push_back(FrameRange{f, f + 1});
      }
    }
    for (const FrameRange& g : gaps) {
      uint64_t holder = 0;  // the shard of the gap's first frame
      while (holder + 1 < count && ShardFrames(total, Shard{holder, count}).end <= g.begin) ++holder;
      missing.push_back(absl::StrCat("OBJ ", Frames(g), " (", Of(Shard{holder, count}), ": no ",
                                     ObjFramePath(o.obj_dir, ref->stem, g.begin), g.size() > 1 ? " ..." : "", ")"));
    }
  }
  if (!missing.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        name, ": cannot merge ", count, " shards of ", total, " frames: missing ", absl::StrJoin(missing, "; "),
        ". Run those shards (again: they resume where they stopped), then merge again"));
  }
  // The record an unsharded batch writes: its job, and the backend its frames came from.
  const std::string record =
      absl::StrCat(ref->job, "\n", backend.empty() ? "" : absl::StrCat("backend ", backend, "\n"));
  if (!o.pc2.empty()) {
    // An earlier job's record goes first: until 2026-12-03 a merge killed between the cache and
    // its record left this job's frames under another's record, which a batch of that job would
    // then resume as its own. Without a record, a batch refuses the cache until --no-resume.
    std::error_code gone;
    fs::remove(Pc2JobPath(o.pc2), gone);
    if (gone) return absl::FailedPreconditionError(absl::StrCat(Pc2JobPath(o.pc2), ": ", gone.message()));
    if (absl::Status st = ConcatPc2(parts, o.pc2, ref->points, 0.0f, 1.0f); !st.ok()) return st;
    if (absl::Status st = WriteFileAtomically(Pc2JobPath(o.pc2), record); !st.ok()) return st;
  }
  if (!o.obj_dir.empty()) {
    if (absl::Status st = WriteFileAtomically(ObjJobPath(o.obj_dir, ref->stem), record); !st.ok()) return st;
  }
  return MergeResult{count, total, ref->points};
}

}  // namespace sinew::client
