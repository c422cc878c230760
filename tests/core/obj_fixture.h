// Reads the OBJ fixtures of the core suites (the SuperCages Arm mesh and cage) into a cage
// geometry: `v` and `f` lines, 1-based or negative indices, "i/t/n" forms, polygons fanned.
// Empty geometry when the file cannot be opened (tests skip then).
#pragma once

#include <array>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/cage/mvc.h"

namespace sinew::testing {

inline CageGeometry ReadObjFixture(const std::string& path) {
  std::ifstream in(path);
  std::vector<Eigen::Vector3d> v;
  std::vector<std::array<uint32_t, 3>> t;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream s(line);
    std::string key;
    s >> key;
    if (key == "v") {
      Eigen::Vector3d p;
      s >> p.x() >> p.y() >> p.z();
      v.push_back(p);
    } else if (key == "f") {
      std::vector<uint32_t> ids;
      std::string item;
      while (s >> item) {
        const long i = std::stol(item.substr(0, item.find('/')));
        ids.push_back(static_cast<uint32_t>(i > 0 ? i - 1 : static_cast<long>(v.size()) + i));
      }
      for (size_t k = 1; k + 1 < ids.size(); ++k) t.push_back({ids[0], ids[k], ids[k + 1]});
    }
  }
  CageGeometry g;
  g.vertices.resize(3, static_cast<Eigen::Index>(v.size()));
  for (size_t i = 0; i < v.size(); ++i) g.vertices.col(static_cast<Eigen::Index>(i)) = v[i];
  g.triangles.resize(3, static_cast<Eigen::Index>(t.size()));
  for (size_t f = 0; f < t.size(); ++f) {
    for (int k = 0; k < 3; ++k) g.triangles(k, static_cast<Eigen::Index>(f)) = t[f][k];
  }
  return g;
}

}  // namespace sinew::testing
