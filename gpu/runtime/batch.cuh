// The batch's per-vertex dispatch: finds the item of global vertex g and runs its method.
// Shared by the CUDA kernel and the CPU emulation. Adding a kernel: see gpu/runtime/kernels.h
// (multi-pass device programs, which run after it: gpu/runtime/program.h).
#pragma once

#include "gpu/baseline/baseline.cuh"
#include "gpu/cage/cage.cuh"
#include "gpu/dqs/dqs.cuh"
#include "gpu/lbs/lbs.cuh"
#include "gpu/runtime/device_api.h"
#include "gpu/runtime/kernels.h"
#include "gpu/swingtwist/swing_twist.cuh"

namespace sinew::gpu {

// kBaseline: whether the batch may hold baseline items. Its double-precision closest points made
// the one kernel 255 registers and a 1.6 kB stack for every method (nvcc 13, sm_80/sm_90; 72 and
// none without them): a batch without them runs the kernel without them.
template <bool kBaseline = true>
SINEW_HD void BatchVertex(const BatchItem* items, uint32_t item_count, const float* joint_data,
                          uint32_t g, float* out) {
  const BatchItem& it = items[ItemAt<BatchItem, &BatchItem::vertex_offset>(items, item_count, g)];
  const uint32_t v = g - it.vertex_offset;
  const float* p = joint_data + it.param_offset;
  float* o = out + 3 * size_t(g);
  switch (static_cast<GpuMethod>(it.method)) {
    case GpuMethod::kLbs: LbsVertex(it.rest, it.offsets, it.joints, it.weights, p, v, o); break;
    case GpuMethod::kDqs: DqsVertex(it.rest, it.offsets, it.joints, it.weights, p, v, o); break;
    case GpuMethod::kCage: CagePoint(it.rest, it.coeffs, it.coeff_cols, p, v, o); break;
    case GpuMethod::kCageThenLbs:  // the cage moves the rest point, the skeleton poses it
    case GpuMethod::kCageThenDqs: {
      float r[3];
      CagePoint(it.rest, it.coeffs, it.coeff_cols, p, v, r);
      const float* joints = p + 3 * size_t(it.coeff_cols);
      if (static_cast<GpuMethod>(it.method) == GpuMethod::kCageThenLbs) {
        LbsPoint(it.offsets, it.joints, it.weights, joints, v, r[0], r[1], r[2], o);
      } else {
        DqsPoint(it.offsets, it.joints, it.weights, joints, v, r[0], r[1], r[2], o);
      }
      break;
    }
    case GpuMethod::kBlend: {
      float l[3], d[3];
      LbsVertex(it.rest, it.offsets, it.joints, it.weights, p, v, l);
      DqsVertex(it.rest, it.offsets, it.joints, it.weights, p + 12 * size_t(it.joint_count), v, d);
      const float b = it.coeffs[v];
      for (int k = 0; k < 3; ++k) o[k] = l[k] + b * (d[k] - l[k]);
      break;
    }
    case GpuMethod::kSwingTwist: SwingTwistVertex(it.rest, it.coeffs, it.coeff_cols, p, v, o); break;
    case GpuMethod::kBaseline:
      if constexpr (kBaseline) BaselineVertex(it.coeffs, p, v, o);
      break;
    default: break;  // device programs write their vertices after this kernel
  }
}

}  // namespace sinew::gpu
