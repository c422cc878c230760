// GPU twin of core/cage's per-frame product: a vertex as its rest position (when there is one)
// plus a dense row of coefficients times per-frame 3-vectors. Mean value coordinates:
// rest + Φ_v · (C' − C0); Green coordinates: rest + [φ_v ψ_v] · [v' − v; s n' − n].
#pragma once

#include <cstddef>
#include <cstdint>

#include "gpu/runtime/hd.h"

namespace sinew::gpu {

// p: 3 floats per coefficient column.
SINEW_HD void CagePoint(const float* rest, const float* coeffs, uint32_t cols, const float* p,
                        uint32_t v, float* out) {
  const float* row = coeffs + size_t(v) * cols;
  float x = 0, y = 0, z = 0;
  for (uint32_t k = 0; k < cols; ++k) {
    x += row[k] * p[3 * k];
    y += row[k] * p[3 * k + 1];
    z += row[k] * p[3 * k + 2];
  }
  if (rest) {
    x += rest[3 * size_t(v)];
    y += rest[3 * size_t(v) + 1];
    z += rest[3 * size_t(v) + 2];
  }
  out[0] = x;
  out[1] = y;
  out[2] = z;
}

}  // namespace sinew::gpu
