// Checks that a triangle cage can drive cage coordinates: closed (every edge shared by exactly
// two faces, in opposite directions), consistently and outwardly oriented (positive volume),
// and enclosing the points it deforms (generalised winding number 1).
#pragma once

#include <span>
#include <string>

#include "absl/status/status.h"
#include "core/rig/rig.h"

namespace sinew {

// INVALID_ARGUMENT naming `field` ("rig.cages[0]") and the face or edge at fault.
absl::Status CheckCageClosedAndOriented(const Cage& cage, const std::string& field);

// INVALID_ARGUMENT naming the first vertex on no triangle (indices already checked). Such a
// vertex moves nothing but sets the cage's size: MVC's and Green's snap distances and
// CheckCageEncloses' on-the-cage tolerance scale with the bounding box (until 2026-12-07 an
// unused vertex at 1e13 let a mesh vertex well outside the cage through and snapped every point
// to its nearest face). The server refuses it at upload; BuildRig does not, so that rigs kept in
// --state-dir before still load.
absl::Status CheckCageVerticesOnFaces(const Cage& cage, const std::string& field);

// Winding number of point x with respect to the closed cage (1 inside, 0 outside).
double CageWindingNumber(const Cage& cage, const Eigen::Vector3d& x);

// INVALID_ARGUMENT naming the first point (as `points_field`[i]) whose winding number is 0.5 or
// below, i.e. that lies outside the cage; a point on the cage's surface (within float rounding of
// a face: 4 float epsilons of the cage's largest coordinate, at least 1e-12 of its diagonal) is
// enclosed. Past 4e6 point-face pairs the winding numbers come from WindingNumberTree, with the
// nearest face and then the exact sum where that reads within 0.25 of ½.
absl::Status CheckCageEncloses(const Cage& cage, std::span<const float> points, const std::string& field,
                               const std::string& points_field);

}  // namespace sinew
