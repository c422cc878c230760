// Pipelines: a session's deformer as an ordered chain of stages, each a registered method,
// e.g. cage-mvc → lbs (a cage edits the rest mesh, the skeleton poses it: SuperCages' hybrid
// without its updaters), dqs → implicit (implicit skinning corrects dual quaternion skinning),
// lbs → (later) position-based dynamics.
//
// Stage k > 0 reads stage k − 1's positions as its MethodInfo::follows says (as its rest mesh,
// or as the posed positions it corrects; a method that can only deform the rig's own rest mesh
// must be first). Each stage sees only the frame inputs its method reads (MethodInfo::inputs); a
// frame input no stage reads is refused. Stateful stages keep their state (Reset resets every
// stage); extras come from the last stage that has them.
//
// Data layout: the stages' deformers, one buffer of 3 floats per vertex between them (stages
// alternate between it and the caller's output, so that the last writes the output) and the
// device parameters of each stage; steady-state frames allocate nothing beyond their stages.
//
// Device: a pipeline runs on a device when one kernel runs all of it: a single stage's own, or
// the fused "cage+lbs" / "cage+dqs" kernel for a cage stage followed by LBS or DQS.
// Any other chain has no device stage (it runs on the CPU; BACKEND_GPU is refused).
#pragma once

#include <memory>
#include <vector>

#include "core/deformer/deformer.h"

namespace sinew {

inline constexpr size_t kMaxStages = 8;

// The pipeline's structure: 1 to kMaxStages registered stages, none of them a pipeline, every
// stage after the first a method that can follow one. INVALID_ARGUMENT naming
// `field`.stages[k]. (Each stage's parameters were checked when they were parsed.)
absl::Status CheckPipeline(const DeformerConfig& config, std::string_view field);

// A stage's error as the pipeline's: its "deformer.X" field becomes "deformer.stages[k].X"
// (other messages get "deformer.stages[k]: " in front); the code is kept.
absl::Status InStage(const absl::Status& status, size_t k);

// True when a stage keeps history (frames must be replayed in order, see MethodInfo::stateful).
bool PipelineStateful(const DeformerConfig& config);
// Whether a frame's cost follows the inputs' motion (MethodInfo::cost_follows_motion) for the
// method or some stage of the pipeline.
bool PipelineCostFollowsMotion(const DeformerConfig& config);

// The pipeline over `stages`, created by the host (each with its shared preparation) in the
// order of config.stages, which CheckPipeline has accepted.
std::unique_ptr<Deformer> MakePipeline(std::shared_ptr<const Rig> rig, const DeformerConfig& config,
                                       std::vector<std::unique_ptr<Deformer>> stages);

}  // namespace sinew
