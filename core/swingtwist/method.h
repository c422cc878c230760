// The "swing-twist" method: elasticity-inspired joint deformers (Kavan & Sorkine 2012) — swing
// and twist deformers per joint (swing_twist.h) with weights precomputed per rig from a
// voxelization of the rest mesh (weights.h). Registered in core/deformer/registry.cc.
#pragma once

#include <memory>
#include <span>

#include "core/deformer/deformer.h"
#include "core/swingtwist/swing_twist.h"
#include "core/swingtwist/weights.h"

namespace sinew {

struct SwingTwistParams : MethodParams {
  double voxel_size = 0;        // 0: the mesh's longest bounding-box side / 64
  uint32_t max_iterations = 30;  // of each EMW solve
  uint32_t influences = 4;       // deformers kept per vertex
  uint32_t swing_samples = 1;    // per axis and sign: 1 = the paper's R_x, R_y at ±90°
  uint32_t twist_samples = 1;    // per sign: 1 = the paper's R_z at ±90°
  double epsilon = 1e-6;         // regularization of each weight solve (spec §2.4)
  double tolerance = 1e-4;       // relative energy decrease that ends a weight solve
  // Per session, not part of the weights: each joint's twist angle continues from the previous
  // frame's (the nearest θ + 2πk) instead of wrapping at ±180°, so twists past half a turn stay
  // continuous. Makes the session stateful (Reset starts again from the rest pose).
  bool unwrap_twist = false;
};

std::span<const ParamSpec> SwingTwistParamSpecs();
absl::StatusOr<std::shared_ptr<const MethodParams>> ParseSwingTwistParams(const ParamSet& set, std::string_view field);

// The per-rig precompute: frames, weights, and what it took.
struct SwingTwistModel : Prepared {
  CanonicalFrames frames;
  SwingTwistWeights weights;
  ElasticWeightsStats stats;
  SwingTwistBlocks cpu_blocks;  // the CPU kernel's layout, made from the weights (not saved)
  size_t Bytes() const override;
};

// MethodInfo::check: skinning weights, inverse binds that are similarities.
absl::Status CheckSwingTwistConfig(const Rig& rig, const DeformerConfig& config);
absl::StatusOr<std::shared_ptr<const Prepared>> PrepareSwingTwist(const Rig& rig, const DeformerConfig& config,
                                                                  ThreadPool* pool, const ProgressFn& progress);
std::string SwingTwistKey(const DeformerConfig& config);
bool SwingTwistStateful(const DeformerConfig& config);  // unwrap_twist
// The weights and their statistics as bytes (the frames are recomputed from the rig on load).
std::string SaveSwingTwist(const Prepared& prepared);
absl::StatusOr<std::shared_ptr<const Prepared>> LoadSwingTwist(const Rig& rig, const DeformerConfig& config,
                                                               std::string_view bytes);
absl::StatusOr<std::unique_ptr<Deformer>> CreateSwingTwistDeformer(std::shared_ptr<const Rig> rig,
                                                                   std::shared_ptr<const Prepared> prepared,
                                                                   const DeformerConfig& config);

}  // namespace sinew
