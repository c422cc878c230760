// Vertices that are one point of the surface. Imported meshes repeat a vertex per face corner,
// UV seam or hard edge, and exporters leave the copies on a mirror seam a few float ulps apart
// (assimp-testmodels' Testwuson.X: 9.5e-7 in a 3.7 diagonal, with the two copies' normals 180°
// apart). Every method that works on the surface rather than on the vertex list (implicit
// skinning's nodes and fields, the quality measure's one-rings, pbs's components) welds them
// here, so that a seam neither tears nor feeds two contradictory samples to a fit.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace sinew {

// Per vertex (xyz: x,y,z per vertex), its representative: the first vertex in index order, among
// the representatives before it, at its position or within `tolerance` (Euclidean) of it with,
// when `may_weld` is given, may_weld(representative, vertex); a vertex with none is its own
// representative. Representatives are never moved, so every copy lies within `tolerance` of its
// representative (chains do not drift). Equal positions always weld (0.0 and −0.0 alike; NaN
// never); tolerance 0, or a mesh with a coordinate past 2^52 tolerances (or not finite), welds
// only those. Deterministic; expected O(n) (a hash grid of cells `tolerance` wide) without
// `may_weld`; with it, a cluster of vertices within `tolerance` that it keeps apart is compared
// pair by pair (WeldSeams does not go through it).
std::vector<uint32_t> WeldByPosition(std::span<const float> xyz, double tolerance,
                                     const std::function<bool(uint32_t, uint32_t)>& may_weld = nullptr);

// The points of a triangle mesh's surface: equal positions welded, and a vertex within
// `tolerance` of another welded to it when either lies on an open seam (an edge of the
// equal-position mesh that one triangle uses; a degenerate triangle's collapsed edge is none):
// that closes a mirror seam exported a few ulps apart — on Testwuson.X one side of most is open
// and the other not (asking both to be open left its implicit skin torn by 3 % of the diagonal) —
// and leaves two closed surfaces that touch (a ball pressed 1e-6 into a box) apart. An open rim
// within the tolerance of a closed surface's vertex (a hem snapped onto the body's vertices) is
// welded to it too: it then moves with that point. The same representatives as WeldByPosition
// with that rule as `may_weld`, in expected O(n).
std::vector<uint32_t> WeldSeams(std::span<const float> xyz, std::span<const uint32_t> triangles, double tolerance);

// The tolerance rest meshes are welded with: 1e-5 of the bounding box's diagonal (20 µm on a 2 m
// character; float's own rounding is ~1e-7 of a coordinate, modelled detail is never that fine)
// of the vertices `triangles` use (every vertex when it is empty): a vertex no triangle uses, far
// from the mesh, does not widen it (until 2026-12-07 one 300 units from a unit mesh welded two
// sheets 0.002 apart into one). 0 for an empty mesh or one without a finite extent.
double RestWeldTolerance(std::span<const float> xyz, std::span<const uint32_t> triangles = {});

}  // namespace sinew
