#include "core/normals/normals.h"

#include <algorithm>
#include <cmath>

namespace sinew {

VertexNormals::VertexNormals(const Rig& rig) {
  const size_t n = rig.vertex_count(), t = rig.triangle_count();
  if (t == 0) return;
  triangles_ = rig.triangles;
  offsets_.assign(n + 1, 0);
  for (uint32_t v : triangles_) ++offsets_[v + 1];
  for (size_t v = 0; v < n; ++v) offsets_[v + 1] += offsets_[v];
  around_.resize(triangles_.size());
  std::vector<uint32_t> fill(offsets_.begin(), offsets_.end() - 1);
  for (size_t f = 0; f < t; ++f) {
    for (int k = 0; k < 3; ++k) around_[fill[triangles_[3 * f + k]]++] = uint32_t(f);
  }
}

void VertexNormals::Compute(std::span<const float> positions, std::span<float> out, ThreadPool* pool) const {
  const size_t n = offsets_.empty() ? out.size() / 3 : offsets_.size() - 1;
  if (offsets_.empty()) {
    std::fill(out.begin(), out.end(), 0.f);
    return;
  }
  const float* p = positions.data();
  const uint32_t* tri = triangles_.data();
  ParallelFor(pool, n, 2048, [&](size_t b, size_t e) {
    for (size_t v = b; v < e; ++v) {
      double nx = 0, ny = 0, nz = 0;
      for (uint32_t a = offsets_[v]; a < offsets_[v + 1]; ++a) {
        const uint32_t* f = tri + 3 * size_t(around_[a]);
        const float* p0 = p + 3 * size_t(f[0]);
        const float* p1 = p + 3 * size_t(f[1]);
        const float* p2 = p + 3 * size_t(f[2]);
        const double ux = p1[0] - p0[0], uy = p1[1] - p0[1], uz = p1[2] - p0[2];
        const double wx = p2[0] - p0[0], wy = p2[1] - p0[1], wz = p2[2] - p0[2];
        nx += uy * wz - uz * wy;
        ny += uz * wx - ux * wz;
        nz += ux * wy - uy * wx;
      }
      const double len = std::sqrt(nx * nx + ny * ny + nz * nz);
      const double s = len > 0 ? 1 / len : 0;
      out[3 * v] = float(nx * s);
      out[3 * v + 1] = float(ny * s);
      out[3 * v + 2] = float(nz * s);
    }
  });
}

namespace {
float SignNotZero(float x) { return x >= 0 ? 1.f : -1.f; }
int16_t Snorm16(float x) { return int16_t(std::lround(std::clamp(x, -1.f, 1.f) * 32767.f)); }
}  // namespace

void EncodeOctahedral(std::span<const float> normals, std::span<int16_t> out) {
  for (size_t v = 0; v < normals.size() / 3; ++v) {
    const float x = normals[3 * v], y = normals[3 * v + 1], z = normals[3 * v + 2];
    const float l1 = std::abs(x) + std::abs(y) + std::abs(z);
    float u = 0, w = 0;
    if (l1 > 0) {
      u = x / l1;
      w = y / l1;
      if (z < 0) {
        const float pu = (1 - std::abs(w)) * SignNotZero(u), pw = (1 - std::abs(u)) * SignNotZero(w);
        u = pu;
        w = pw;
      }
    }
    out[2 * v] = Snorm16(u);
    out[2 * v + 1] = Snorm16(w);
  }
}

void DecodeOctahedral(std::span<const int16_t> encoded, std::span<float> out) {
  for (size_t v = 0; v < encoded.size() / 2; ++v) {
    const float u = std::max(encoded[2 * v] / 32767.f, -1.f), w = std::max(encoded[2 * v + 1] / 32767.f, -1.f);
    float x = u, y = w;
    const float z = 1 - std::abs(u) - std::abs(w);
    if (z < 0) {
      x = (1 - std::abs(w)) * SignNotZero(u);
      y = (1 - std::abs(u)) * SignNotZero(w);
    }
    const float len = std::sqrt(x * x + y * y + z * z);
    out[3 * v] = x / len;
    out[3 * v + 1] = y / len;
    out[3 * v + 2] = z / len;
  }
}

}  // namespace sinew
