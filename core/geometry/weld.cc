#include "core/geometry/weld.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_map>

namespace sinew {
namespace {

struct Cell {
  int64_t x, y, z;
  bool operator==(const Cell&) const = default;
};
struct CellHash {
  size_t operator()(const Cell& c) const {
    uint64_t h = 1469598103934665603ull;
    for (int64_t k : {c.x, c.y, c.z}) h = (h ^ uint64_t(k)) * 1099511628211ull;
    return size_t(h);
  }
};

// Equal positions: keyed by their bits, −0.0 as +0.0.
std::vector<uint32_t> WeldExact(std::span<const float> xyz) {
  const size_t n = xyz.size() / 3;
  std::vector<uint32_t> rep(n);
  std::unordered_map<Cell, uint32_t, CellHash> first;
  first.reserve(n);
  for (size_t v = 0; v < n; ++v) {
    int64_t k[3];
    bool finite = true;
    for (int c = 0; c < 3; ++c) {
      const float f = xyz[3 * v + c] == 0.0f ? 0.0f : xyz[3 * v + c];
      finite = finite && std::isfinite(f);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      k[c] = bits;
    }
    rep[v] = finite ? first.try_emplace(Cell{k[0], k[1], k[2]}, uint32_t(v)).first->second : uint32_t(v);
  }
  return rep;
}

// Cells `tolerance` wide: a representative within it of a vertex lies in one of the 27 cells
// around the vertex's. Cell indices past ±2^52 (a tolerance far below the coordinates' own
// resolution) are refused (false): the callers fall back on equal positions.
bool CellOf(const double p[3], double inv, Cell* cell) {
  constexpr double kMaxCell = 4.5e15;
  double q[3];
  for (int c = 0; c < 3; ++c) {
    q[c] = std::floor(p[c] * inv);
    if (!(std::isfinite(q[c]) && std::abs(q[c]) < kMaxCell)) return false;
  }
  *cell = Cell{int64_t(q[0]), int64_t(q[1]), int64_t(q[2])};
  return true;
}

// The first representative, in index order, within the tolerance of p that `accept(u, d2)` takes,
// among the lists `pick(cell entry)` of the 27 cells around `home` (each list in index order);
// UINT32_MAX when none.
template <class Map, class Pick, class Accept>
uint32_t FirstNear(const Map& cells, const Cell& home, const double p[3], std::span<const float> xyz, double tol2,
                   Pick pick, Accept accept) {
  uint32_t best = std::numeric_limits<uint32_t>::max();
  for (int64_t dx = -1; dx <= 1; ++dx) {
    for (int64_t dy = -1; dy <= 1; ++dy) {
      for (int64_t dz = -1; dz <= 1; ++dz) {
        const auto it = cells.find(Cell{home.x + dx, home.y + dy, home.z + dz});
        if (it == cells.end()) continue;
        for (uint32_t u : pick(it->second)) {
          if (u >= best) break;
          double d2 = 0;
          for (int c = 0; c < 3; ++c) d2 += (p[c] - xyz[3 * u + c]) * (p[c] - xyz[3 * u + c]);
          if (d2 <= tol2 && accept(u, d2)) {
            best = u;
            break;
          }
        }
      }
    }
  }
  return best;
}

}  // namespace

std::vector<uint32_t> WeldByPosition(std::span<const float> xyz, double tolerance,
                                     const std::function<bool(uint32_t, uint32_t)>& may_weld) {
  const size_t n = xyz.size() / 3;
  if (!(tolerance > 0) || !std::isfinite(tolerance)) return WeldExact(xyz);
  const double inv = 1.0 / tolerance, tol2 = tolerance * tolerance;
  std::vector<uint32_t> rep(n);
  std::unordered_map<Cell, std::vector<uint32_t>, CellHash> cells;
  cells.reserve(n);
  for (size_t v = 0; v < n; ++v) {
    const double p[3] = {xyz[3 * v], xyz[3 * v + 1], xyz[3 * v + 2]};
    Cell home;
    if (!CellOf(p, inv, &home)) return WeldExact(xyz);
    uint32_t best = FirstNear(
        cells, home, p, xyz, tol2, [](const std::vector<uint32_t>& reps) -> const std::vector<uint32_t>& { return reps; },
        [&](uint32_t u, double d2) { return d2 == 0 || !may_weld || may_weld(u, uint32_t(v)); });
    if (best == std::numeric_limits<uint32_t>::max()) {
      best = uint32_t(v);
      cells[home].push_back(best);
    }
    rep[v] = best;
  }
  return rep;
}

std::vector<uint32_t> WeldSeams(std::span<const float> xyz, std::span<const uint32_t> triangles, double tolerance) {
  const std::vector<uint32_t> equal = WeldExact(xyz);
  if (!(tolerance > 0) || !std::isfinite(tolerance)) return equal;  // as WeldByPosition
  // Open seams: edges of the equal-position mesh that one triangle uses.
  std::unordered_map<uint64_t, uint32_t> uses;
  uses.reserve(triangles.size());
  auto edge = [&](uint32_t a, uint32_t b) {
    a = equal[a];
    b = equal[b];
    return a < b ? uint64_t(a) << 32 | b : uint64_t(b) << 32 | a;
  };
  for (size_t t = 0; t + 2 < triangles.size(); t += 3) {
    for (int k = 0; k < 3; ++k) {
      const uint32_t a = triangles[t + k], b = triangles[t + (k + 1) % 3];
      if (equal[a] != equal[b]) ++uses[edge(a, b)];  // a degenerate triangle's collapsed edge is no seam
    }
  }
  std::vector<uint8_t> open(equal.size(), 0);
  for (const auto& [e, n] : uses) {
    if (n == 1) open[e >> 32] = open[e & 0xffffffffu] = 1;
  }
  // WeldByPosition with may_weld(u, v) = equal positions, or either open, in expected O(n): a
  // vertex at an earlier vertex's position takes that one's representative (the rule reads only
  // positions and their open flags), and a vertex not on an open seam looks only at the
  // representatives that are (each cell keeps them apart). Through WeldByPosition's predicate,
  // until 2026-12-07, every vertex of a cluster of closed-surface vertices within the tolerance of
  // each other scanned all the others: a 60 000-vertex sphere of radius 1e-5 beside a unit
  // tetrahedron took 5.5 s for a first quality report.
  const size_t n = xyz.size() / 3;
  const double inv = 1.0 / tolerance, tol2 = tolerance * tolerance;
  struct Reps {
    std::vector<uint32_t> all, open;  // in index order
  };
  std::unordered_map<Cell, Reps, CellHash> cells;
  cells.reserve(n);
  std::vector<uint32_t> rep(n);
  for (size_t v = 0; v < n; ++v) {
    if (equal[v] != v) {
      rep[v] = rep[equal[v]];
      continue;
    }
    const double p[3] = {xyz[3 * v], xyz[3 * v + 1], xyz[3 * v + 2]};
    Cell home;
    if (!CellOf(p, inv, &home)) return equal;  // as WeldByPosition: equal positions only
    const bool v_open = open[v] != 0;
    uint32_t best = FirstNear(
        cells, home, p, xyz, tol2, [&](const Reps& r) -> const std::vector<uint32_t>& { return v_open ? r.all : r.open; },
        [](uint32_t, double) { return true; });
    if (best == std::numeric_limits<uint32_t>::max()) {
      best = uint32_t(v);
      Reps& r = cells[home];
      r.all.push_back(best);
      if (v_open) r.open.push_back(best);
    }
    rep[v] = best;
  }
  return rep;
}

double RestWeldTolerance(std::span<const float> xyz, std::span<const uint32_t> triangles) {
  const size_t n = xyz.size() / 3;
  std::vector<uint8_t> used(n, triangles.empty() ? 1 : 0);
  for (uint32_t v : triangles) {
    if (v < n) used[v] = 1;
  }
  double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
  bool any = false;
  for (size_t v = 0; v < n; ++v) {
    if (!used[v]) continue;
    any = true;
    for (int c = 0; c < 3; ++c) {
      const double x = xyz[3 * v + c];
      if (!std::isfinite(x)) return 0;
      lo[c] = std::min(lo[c], x);
      hi[c] = std::max(hi[c], x);
    }
  }
  if (!any) return 0;
  const double diag = std::sqrt((hi[0] - lo[0]) * (hi[0] - lo[0]) + (hi[1] - lo[1]) * (hi[1] - lo[1]) +
                                (hi[2] - lo[2]) * (hi[2] - lo[2]));
  return std::isfinite(diag) ? 1e-5 * diag : 0;
}

}  // namespace sinew
