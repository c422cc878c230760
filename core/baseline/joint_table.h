// Per-frame tables of baseline skinning's joint solve (seed 003, spec §3.7.2). A baseline's solve
// at a joint depends on the frame and on the baseline's azimuth φ only (its neighbour's azimuth is
// the rest pairing of φ), yet each point solves it again for both of its section's ends: half of
// a frame's work on a dense point set, for a few thousand distinct functions of one angle. Here,
// once per frame, every joint end that enough points use is solved at N azimuths (N a power of
// two from 256 to 4096, one per 32 points) and the targets' offsets are interpolated per point
// (cubic Lagrange through four samples: error O(h⁴)). Outputs then equal the exact solve's to
// float rounding (1.2e-7 on the tests' 30k-point bar, N = 512), except where a baseline's joint
// end switches between an arc and a crease: there the section's end moves steeply with the
// targets (1e-14 rad moved one point of the benchmark's 100k by 5e-6).
//
// An interval is used only where the solve is smooth there: no sample of its stencil degenerate,
// no jump between neighbouring samples (≤ 0.2 rad) and small second differences (≤ 0.02 rad);
// elsewhere (tight folds, a degenerate pivot circle, a target switching roots) the point solves
// exactly, as without tables. The rest pose is exact: every sample's offset is zero there.
//
// Data layout: at preparation, the joint ends (bone, side, neighbour, the neighbour's side) with
// their sample ranges and the neighbour's rest azimuth at every sample, and per point the table of
// each end (PointCode order); per frame, two offsets and a flag byte per sample. Building a frame
// allocates nothing once the scratch has grown.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "core/baseline/encode.h"
#include "core/baseline/section.h"
#include "core/parallel/thread_pool.h"

namespace sinew::baseline {

inline constexpr uint32_t kNoTable = 0xffffffffu;

struct JointKey {
  uint32_t bone = 0, other = 0;
  uint8_t side = 0, other_side = 0;
};

struct JointTables {
  std::vector<JointKey> keys;
  std::vector<uint32_t> offset;                  // key k's samples: [offset[k], offset[k + 1]), a power of two
  std::vector<double> rest_other;                // per sample: the neighbour's rest azimuth paired with φ
  std::vector<std::array<uint32_t, 2>> of_code;  // per point, per side: its key, or kNoTable
  size_t Bytes() const;
};

// The tables worth building for these codes over the rest ends (2 per bone): joint ends with at
// least `min_points` points (default: 2048; fewer solve each point's joints themselves).
JointTables PlanJointTables(std::span<const PointCode> codes, std::span<const End<double>> rest_ends,
                            uint32_t min_points = 2048);

// One frame's samples.
struct JointFrame {
  std::vector<double> d1, d2;   // per sample: target − azimuth on the bone, on the neighbour (radians)
  std::vector<uint8_t> flags;   // per sample: bit 0 degenerate, bit 1 the interval [i, i + 1] usable
};

// Solves every sample for the frame's ends (2 per bone) and twists.
void BuildJointFrame(const JointTables& tables, std::span<const End<double>> ends, std::span<const double> twist,
                     ThreadPool* pool, JointFrame& frame);

// Fills v.solved and sets v.given from key `key`'s table for the baseline at azimuth φ (on the
// bone, at rest) when its interval is usable; else leaves v as it is (the section solves).
void LookUpJoint(const JointTables& tables, const JointFrame& frame, uint32_t key, double phi, EndView<double>& v);

}  // namespace sinew::baseline
