// Sharded batch jobs: `sinew batch --shard I/N` deforms one contiguous slice of a clip's frames
// (as a Kubernetes Indexed Job hands each pod its JOB_COMPLETION_INDEX), writing its own part,
// and `sinew merge-shards` joins the N parts into the cache one unsharded run would have written,
// byte for byte, or refuses naming the frames that are missing.
//
// Files of shard I of N of a batch writing OUT.pc2:
//   OUT.pc2.shard-I-of-N            a .pc2 holding the shard's frames (resumable like any batch)
//   OUT.pc2.shard-I-of-N.manifest   what the shard is: the job's fingerprint, its frame range,
//                                   the clip's total, points, the backend that ran it
// A batch writing only an OBJ sequence keeps the manifest in the OBJ folder
// (DIR/shard-I-of-N.manifest); the shards' OBJ files go straight into DIR under their frame
// numbers, as a single run's do.
#pragma once

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace sinew::client {

inline constexpr uint64_t kMaxShards = 100000;
inline constexpr char kShardIndexVariable[] = "JOB_COMPLETION_INDEX";

struct Shard {
  uint64_t index = 0;  // 0-based, < count
  uint64_t count = 1;  // 1 = unsharded
};

// "I/N" with 0 <= I < N <= kMaxShards. INVALID_ARGUMENT naming the part that is wrong.
absl::StatusOr<Shard> ParseShard(absl::string_view spec);
// Shard `index` of `count`, the index read from the environment variable `variable` (a
// Kubernetes Indexed Job sets JOB_COMPLETION_INDEX in each pod). INVALID_ARGUMENT when it is
// unset, not a number, or not below `count`.
absl::StatusOr<Shard> ShardFromEnvironment(uint64_t count, const char* variable = kShardIndexVariable);

// Shard I of N of `total` frames: [floor(I*T/N), floor((I+1)*T/N)). Contiguous, in order, the
// sizes differ by at most one; empty when N > T for some I.
struct FrameRange {
  uint64_t begin = 0, end = 0;
  uint64_t size() const { return end - begin; }
};
FrameRange ShardFrames(uint64_t total, Shard shard);

// "shard-I-of-N"
std::string ShardName(Shard shard);
// OUT.pc2 -> OUT.pc2.shard-I-of-N
std::string ShardPartPath(const std::string& pc2, Shard shard);
// Beside the part (pc2 given) or in the OBJ folder (only --obj): see the file comment.
std::string ShardManifestPath(const std::string& pc2, const std::string& obj_dir, Shard shard);
// An unsharded batch's record of the job its outputs hold (one line: the job's hash, as in a
// shard's manifest), beside them: OUT.pc2.job, OBJ_DIR/STEM.job. merge-shards writes them for the
// joined outputs, so that `batch --gltf` resumes past a merged cache of the same job.
std::string Pc2JobPath(const std::string& pc2);
std::string ObjJobPath(const std::string& obj_dir, const std::string& stem);

struct ShardManifest {
  std::string job;  // fingerprint of rig, deformer, encoding, backend preference and clip sampling
  Shard shard;
  uint64_t total_frames = 0;
  FrameRange frames;
  uint32_t points = 0;
  std::string backend;  // the backend that deformed the frames ("cpu", "gpu"; "none": empty range)
  std::string stem;     // the OBJ files' name stem
};

// Atomic (path.tmp, fsync, rename).
absl::Status WriteShardManifest(const std::string& path, const ShardManifest& m);
// Strict: NOT_FOUND when absent; FAILED_PRECONDITION naming the line for anything malformed.
absl::StatusOr<ShardManifest> ReadShardManifest(const std::string& path);
// OK when `existing` (read from `path`) describes the same job and shard as `wanted`;
// FAILED_PRECONDITION naming the first field that differs otherwise. Backends are not compared.
absl::Status SameShardJob(const ShardManifest& existing, const ShardManifest& wanted, const std::string& path);

struct MergeOptions {
  std::string pc2;      // merge OUT.pc2's parts into OUT.pc2 (may be empty: only check the OBJs)
  std::string obj_dir;  // check that the OBJ folder holds every frame (may be empty)
  uint64_t shards = 0;  // N; 0: read from the manifests' names (they must all agree)
};
struct MergeResult {
  uint64_t shards = 0, frames = 0;
  uint32_t points = 0;
};
// Joins the parts of a sharded batch. Refuses (FAILED_PRECONDITION, nothing written) when a
// shard never ran, is incomplete, belongs to another job or ran on another backend, or when OBJ
// frames are missing; the message names the missing frames and the shards that hold them.
absl::StatusOr<MergeResult> MergeShards(const MergeOptions& options);

}  // namespace sinew::client
