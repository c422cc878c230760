// A procedural point set for baseline skinning (the paper's synthetic "striped bar", Fig. 20):
// points on a ridged tube round a chain of sphere-mesh bones along x, closed by hemispheres, with a
// skeleton whose joints sit at the spheres' centres (joint j carries bone j: frames pose it
// through a skeleton pose) and, for comparisons, the paper's Gaussian weights (Fu et al. 2020a) so
// that LBS and DQS deform the same points. No triangles: a point set.
#pragma once

#include <cstdint>
#include <vector>

#include "core/rig/rig.h"

namespace sinew {

struct PointBarOptions {
  std::vector<double> xs{0, 2, 4};        // sphere centres on the x axis (a bone between neighbours)
  std::vector<double> radii{0.6, 0.6, 0.6};
  double tube = 0.9;                      // the points' distance from the axis (before the ridges)
  uint32_t rings = 60, around = 48;       // points: rings × around on the tube, plus the caps
  bool ridges = true;                     // ±4 % in azimuth and ±3 % along x
  // Each tube point moved by a random fraction of the grid's spacing in azimuth and along x
  // (fixed seed), as a scan's points lie: no two share a baseline.
  bool scattered = false;
  double weight_width = 0.5;              // σ of the Gaussian weights along x
};

RigInput MakePointBar(const PointBarOptions& options = {});

// (Re)computes `in`'s weights as MakePointBar's Gaussians for every point where it is.
void PointBarWeights(const PointBarOptions& options, RigInput& in);

}  // namespace sinew
