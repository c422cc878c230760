// Per-vertex normals of a deformed triangle mesh, for any method: the area-weighted average of
// the normals of the triangles around each vertex (the sum of their cross products — twice their
// area times their unit normal — normalised), computed from the deformed positions alone.
// A vertex with no triangle of non-zero area gets (0, 0, 0).
//
// Data layout: per rig, the triangles around each vertex as CSR (offsets: vertex_count + 1,
// then triangle indices), built once and shared by the rig's sessions. A frame gathers, per
// vertex, the cross products of its triangles from the positions: no scratch, no atomics,
// parallel over vertices, no allocation.
//
// Point sets (no triangles) have no mesh to differentiate; skinning methods rotate uploaded
// normals instead (FrameExtras::normals).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/parallel/thread_pool.h"
#include "core/rig/rig.h"

namespace sinew {

class VertexNormals {
 public:
  // The rig's vertex → triangle adjacency; empty when the rig has no triangles.
  explicit VertexNormals(const Rig& rig);

  bool empty() const { return triangles_.empty(); }
  size_t Bytes() const { return sizeof(uint32_t) * (offsets_.size() + around_.size() + triangles_.size()); }

  // out: x,y,z per vertex, unit or zero; positions: x,y,z per vertex of the deformed mesh.
  void Compute(std::span<const float> positions, std::span<float> out, ThreadPool* pool) const;

  // The adjacency, for a device twin (gpu/normals/) to upload.
  std::span<const uint32_t> offsets() const { return offsets_; }
  std::span<const uint32_t> around() const { return around_; }
  std::span<const uint32_t> triangles() const { return triangles_; }

 private:
  std::vector<uint32_t> offsets_;    // vertex_count + 1
  std::vector<uint32_t> around_;     // triangle indices per vertex
  std::vector<uint32_t> triangles_;  // the rig's triangles, 3 per triangle
};

// Octahedral encoding of a unit vector in two signed 16-bit values (Cigolle et al. 2014):
// direction kept within 0.01° (tested); (0, 0, 0) encodes as (0, 0) and decodes to +z.
void EncodeOctahedral(std::span<const float> normals, std::span<int16_t> out);
void DecodeOctahedral(std::span<const int16_t> encoded, std::span<float> out);

}  // namespace sinew
