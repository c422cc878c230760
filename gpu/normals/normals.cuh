// Per-vertex normals of the deformed mesh on the device (twin of core/normals): for each vertex,
// the sum of the cross products of its triangles (area-weighted face normals) from the batch's
// output positions, normalised; (0, 0, 0) with no triangle of non-zero area. Double
// accumulation in the same order as the CPU, so the emulated device matches it exactly.
//
// A pass over the batch's normal rows (every vertex of the frames that want normals), run after
// the per-vertex kernel and the device programs have written the positions.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "gpu/runtime/hd.h"

namespace sinew::gpu {

// One frame's normals in a batch: device addresses of the rig's vertex → triangle adjacency
// (core's VertexNormals CSR) and of the frame's rows in the batch output.
struct NormalsItem {
  const uint32_t* offsets;    // vertex_count + 1
  const uint32_t* around;     // triangle indices per vertex
  const uint32_t* triangles;  // 3 per triangle
  const float* positions;     // the frame's deformed positions, 3 per vertex
  float* normals;             // the frame's normals, 3 per vertex
  uint32_t row_offset;        // first row of this item in the batch's normal rows
  uint32_t vertex_count;
};

SINEW_HD void VertexNormal(const NormalsItem& it, uint32_t v) {
  double nx = 0, ny = 0, nz = 0;
  const float* p = it.positions;
  for (uint32_t a = it.offsets[v]; a < it.offsets[v + 1]; ++a) {
    const uint32_t* f = it.triangles + 3 * size_t(it.around[a]);
    const float* p0 = p + 3 * size_t(f[0]);
    const float* p1 = p + 3 * size_t(f[1]);
    const float* p2 = p + 3 * size_t(f[2]);
    const double ux = p1[0] - p0[0], uy = p1[1] - p0[1], uz = p1[2] - p0[2];
    const double wx = p2[0] - p0[0], wy = p2[1] - p0[1], wz = p2[2] - p0[2];
    nx += uy * wz - uz * wy;
    ny += uz * wx - ux * wz;
    nz += ux * wy - uy * wx;
  }
  const double len = sqrt(nx * nx + ny * ny + nz * nz);
  const double s = len > 0 ? 1 / len : 0;
  it.normals[3 * size_t(v)] = float(nx * s);
  it.normals[3 * size_t(v) + 1] = float(ny * s);
  it.normals[3 * size_t(v) + 2] = float(nz * s);
}

// Row g of the batch's normal rows (items sorted by row_offset).
SINEW_HD void NormalRow(const NormalsItem* items, uint32_t count, uint32_t g) {
  const NormalsItem& it = items[ItemAt<NormalsItem, &NormalsItem::row_offset>(items, count, g)];
  const uint32_t v = g - it.row_offset;
  if (v < it.vertex_count) VertexNormal(it, v);
}

// The pass on a CUDA stream (normals/normals_cuda.cu; CUDA builds only).
bool RunNormalsCuda(void* cuda_stream, const NormalsItem* items, uint32_t count, uint32_t rows, std::string* error);

}  // namespace sinew::gpu
