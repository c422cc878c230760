#include "core/implicit/operators.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <numbers>

#include <Eigen/OrderingMethods>
#include <Eigen/SparseCholesky>
#include <Eigen/SparseCore>

#include "absl/strings/str_cat.h"
#include "core/util/atomic_file.h"

namespace sinew {

const char* JointOperatorName(JointOperator op) {
  switch (op) {
    case JointOperator::kUnion: return "union";
    case JointOperator::kCleanUnion: return "clean-union";
    case JointOperator::kContact: return "contact";
    case JointOperator::kBulge: return "bulge";
  }
  return "?";
}

namespace {

double Smoothstep(double x) {
  x = std::clamp(x, 0.0, 1.0);
  return x * x * (3 - 2 * x);
}

// Cubic B-spline basis on the clamped knot vector {0,0,0,0,½,1,1,1,1} (5 control points),
// evaluated with de Boor's recursion.
Eigen::Vector2d DeBoor(const Eigen::Vector2d (&p)[5], double t) {
  static constexpr double kKnots[9] = {0, 0, 0, 0, 0.5, 1, 1, 1, 1};
  t = std::clamp(t, 0.0, 1.0);
  const int k = t < 0.5 ? 3 : 4;  // knot span [u_k, u_{k+1})
  Eigen::Vector2d d[4];
  for (int j = 0; j < 4; ++j) d[j] = p[j + k - 3];
  for (int r = 1; r <= 3; ++r) {
    for (int j = 3; j >= r; --j) {
      const int i = j + k - 3;
      const double den = kKnots[i + 4 - r] - kKnots[i];
      const double a = den > 0 ? (t - kKnots[i]) / den : 0;
      d[j] = (1 - a) * d[j - 1] + a * d[j];
    }
  }
  return d[3];
}

// Distance from q to segment [a, b] and the signed area sign (q left of a→b: +).
double SegmentDistance2(const Eigen::Vector2d& q, const Eigen::Vector2d& a, const Eigen::Vector2d& b, double* side) {
  const Eigen::Vector2d ab = b - a;
  const double t = std::clamp((q - a).dot(ab) / std::max(ab.squaredNorm(), 1e-300), 0.0, 1.0);
  const Eigen::Vector2d c = a + t * ab;
  *side = ab.x() * (q.y() - a.y()) - ab.y() * (q.x() - a.x());
  return (q - c).norm();
}

// Solves one d slice: Δ²g = 0 on the free nodes (13-point stencil), with fixed values where
// `fixed` is set. A ghost layer beyond f = 1 holds 1 (zero slope there; spec §2.5.4).
absl::Status SolveSlice(int n, std::vector<double>& g, const std::vector<char>& fixed) {
  std::vector<int> unknown(size_t(n) * n, -1);
  int m = 0;
  for (int idx = 0; idx < n * n; ++idx) {
    if (!fixed[idx]) unknown[idx] = m++;
  }
  if (m == 0) return absl::OkStatus();
  std::vector<Eigen::Triplet<double>> entries;
  entries.reserve(size_t(m) * 13);
  Eigen::VectorXd rhs = Eigen::VectorXd::Zero(m);
  static constexpr int kStencil[13][3] = {{0, 0, 20},  {1, 0, -8},  {-1, 0, -8}, {0, 1, -8}, {0, -1, -8},
                                          {1, 1, 2},   {1, -1, 2},  {-1, 1, 2},  {-1, -1, 2}, {2, 0, 1},
                                          {-2, 0, 1},  {0, 2, 1},   {0, -2, 1}};
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < n; ++i) {
      const int row = unknown[j * n + i];
      if (row < 0) continue;
      for (const auto& s : kStencil) {
        const int ii = i + s[0], jj = j + s[1];
        double value;
        if (ii >= n || jj >= n) {
          value = 1.0;  // ghost beyond f = 1
        } else if (ii < 0 || jj < 0) {
          return absl::InternalError("operator stencil left the grid (the two axis layers must be fixed)");
        } else if (const int col = unknown[jj * n + ii]; col >= 0) {
          entries.emplace_back(row, col, double(s[2]));
          continue;
        } else {
          value = g[jj * n + ii];
        }
        rhs[row] -= s[2] * value;
      }
    }
  }
  Eigen::SparseMatrix<double> a(m, m);
  a.setFromTriplets(entries.begin(), entries.end());
  Eigen::SimplicialLDLT<Eigen::SparseMatrix<double>, Eigen::Lower, Eigen::AMDOrdering<int>> solver(a);
  if (solver.info() != Eigen::Success) return absl::InternalError("operator slice: factorisation failed");
  const Eigen::VectorXd x = solver.solve(rhs);
  if (solver.info() != Eigen::Success) return absl::InternalError("operator slice: solve failed");
  for (int idx = 0; idx < n * n; ++idx) {
    if (unknown[idx] >= 0) g[idx] = x[unknown[idx]];
  }
  return absl::OkStatus();
}

}  // namespace

Eigen::Vector2d BulgeProfile(double d, double t) {
  static const double kX[5] = {0, 0.15, 0.39, 0.44, 0.5};
  static const double kBulgeY[5] = {0.5, 0.45, 0.40, 0.44, 0.5};
  Eigen::Vector2d p[5];
  for (int k = 0; k < 5; ++k) p[k] = Eigen::Vector2d(kX[k], 0.5 + d * (kBulgeY[k] - 0.5));
  return DeBoor(p, t);
}

double ContactController(double alpha) {
  const double half = std::numbers::pi / 2;
  return alpha <= half ? 0.0 : Smoothstep((alpha - half) / half);
}

double BulgeController(double alpha) { return Smoothstep(alpha / (std::numbers::pi / 2)); }

absl::StatusOr<OperatorGrid> OperatorGrid::Build(OperatorShape shape, const OperatorGridOptions& options,
                                                 ThreadPool* pool, const ProgressFn& progress) {
  if (options.resolution < 9 || options.resolution % 2 == 0 || options.resolution > 1025) {
    return absl::InvalidArgumentError("operator resolution: an odd number of nodes in [9, 1025]");
  }
  if (options.slices < 2 || options.slices > 1025) return absl::InvalidArgumentError("operator slices: in [2, 1025]");
  if (!(options.kappa > 0 && options.kappa <= 1)) return absl::InvalidArgumentError("operator kappa: in (0, 1]");
  OperatorGrid grid;
  grid.shape_ = shape;
  grid.options_ = options;
  const int n = grid.n_ = options.resolution;
  const int nd = grid.nd_ = options.slices;
  grid.cells_.assign(size_t(n) * n * nd, Eigen::Vector4f::Zero());
  const double h = 1.0 / (n - 1);
  const int half = (n - 1) / 2;
  std::atomic<int> done{0};
  std::mutex error_mutex;
  absl::Status error;
  ParallelFor(pool, size_t(nd), 1, [&](size_t kb, size_t ke) {
    for (size_t k = kb; k < ke; ++k) {
      const double d = double(k) / (nd - 1);
      std::vector<double> g(size_t(n) * n, 0.0);
      std::vector<char> fixed(size_t(n) * n, 0);
      auto set = [&](int i, int j, double v) {
        g[j * n + i] = v;
        fixed[j * n + i] = 1;
      };
      // Eq. 4.3 boundaries: two layers on each axis side (value and zero slope), 1 on f = 1.
      for (int j = 0; j < n; ++j) {
        for (int i = 0; i < n; ++i) {
          const bool low_i = i < 2, low_j = j < 2;
          if (i == n - 1 || j == n - 1) {
            set(i, j, 1.0);
          } else if (low_i && low_j) {
            set(i, j, std::max(i, j) * h);  // the (0,0) corner: both rules cannot hold (spec §2.5.4)
          } else if (low_j) {
            set(i, j, i * h);
          } else if (low_i) {
            set(i, j, j * h);
          }
        }
      }
      // Profile curve (Eq. 4.4).
      if (shape == OperatorShape::kBulge && d > 0) {
        // Rasterise both spline branches: the corners of every crossed cell get 0.5 + signed
        // distance (positive on the side of (1, 1)).
        constexpr int kSamples = 4096;
        std::vector<Eigen::Vector2d> curve(kSamples + 1);
        for (int s = 0; s <= kSamples; ++s) curve[s] = BulgeProfile(d, double(s) / kSamples);
        auto distance = [&](const Eigen::Vector2d& q, bool mirror) {
          const Eigen::Vector2d p = mirror ? Eigen::Vector2d(q.y(), q.x()) : q;
          double best = 1e300, best_side = 0;
          for (int s = 0; s < kSamples; ++s) {
            double side;
            const double dist = SegmentDistance2(p, curve[s], curve[s + 1], &side);
            if (dist < best) {
              best = dist;
              best_side = side;
            }
          }
          return best_side >= 0 ? best : -best;  // left of the purple branch = towards (1, 1)
        };
        for (int branch = 0; branch < 2; ++branch) {
          for (int s = 0; s <= kSamples; ++s) {
            const Eigen::Vector2d c = branch ? Eigen::Vector2d(curve[s].y(), curve[s].x()) : curve[s];
            const int ci = std::clamp(int(std::floor(c.x() / h)), 0, n - 2);
            const int cj = std::clamp(int(std::floor(c.y() / h)), 0, n - 2);
            for (int dj = 0; dj < 2; ++dj) {
              for (int di = 0; di < 2; ++di) {
                const int i = ci + di, j = cj + dj;
                if (i < 2 || j < 2 || i == n - 1 || j == n - 1) continue;
                if (fixed[j * n + i] == 2) continue;
                const Eigen::Vector2d q(i * h, j * h);
                // The nearer branch decides (they meet at (0.5, 0.5)).
                const double a = distance(q, false), b = distance(q, true);
                g[j * n + i] = 0.5 + (std::abs(a) < std::abs(b) ? a : b);
                fixed[j * n + i] = 2;
              }
            }
          }
        }
      } else {
        for (int i = 2; i <= half; ++i) set(i, half, 0.5);
        for (int j = 2; j <= half; ++j) set(half, j, 0.5);
      }
      // Green contact segment: diagonal nodes only, up to 0.5 + 0.5·d·κ.
      const int end = half + int(std::lround(0.5 * d * options.kappa * (n - 1)));
      for (int t = half; t <= std::min(end, n - 2); ++t) set(t, t, 0.5);
      if (auto st = SolveSlice(n, g, fixed); !st.ok()) {
        std::lock_guard<std::mutex> lock(error_mutex);
        error = st;
        return;
      }
      // Values and central-difference derivatives (one-sided on the borders).
      for (int j = 0; j < n; ++j) {
        for (int i = 0; i < n; ++i) {
          auto at = [&](int ii, int jj) { return g[jj * n + ii]; };
          const double d1 = i == 0 ? (at(1, j) - at(0, j)) / h
                            : i == n - 1 ? (at(n - 1, j) - at(n - 2, j)) / h
                                         : (at(i + 1, j) - at(i - 1, j)) / (2 * h);
          const double d2 = j == 0 ? (at(i, 1) - at(i, 0)) / h
                            : j == n - 1 ? (at(i, n - 1) - at(i, n - 2)) / h
                                         : (at(i, j + 1) - at(i, j - 1)) / (2 * h);
          // Bi-harmonic interpolation is not monotone (spec pitfall 13): it overshoots 1 by
          // ~1e-5 next to the f = 1 sides; the value is clamped to the field range.
          grid.cells_[grid.Index(i, j, int(k))] =
              Eigen::Vector4f(float(std::clamp(at(i, j), 0.0, 1.0)), float(d1), float(d2), 0.f);
        }
      }
      const int finished = ++done;
      if (progress) progress(double(finished) / nd);
    }
  });
  if (!error.ok()) return error;
  return grid;
}

namespace {
// x clamped to [0, 1], NaN read as 0: std::clamp passes a NaN through, and a NaN cast to int is
// undefined (on x86, INT_MIN: a read far outside the grid). A field of infinite gradients gives
// the controller's d a NaN.
float Unit(float x) { return x > 0 ? (x < 1 ? x : 1.f) : 0.f; }
}  // namespace

float OperatorGrid::Sample(float f1, float f2, float d, float* g1, float* g2) const {
  const float s = float(n_ - 1), sd = float(nd_ - 1);
  const float u = Unit(f1) * s, v = Unit(f2) * s, w = Unit(d) * sd;
  const int i = std::min(int(u), n_ - 2), j = std::min(int(v), n_ - 2), k = std::min(int(w), nd_ - 2);
  const float tu = u - float(i), tv = v - float(j), tw = w - float(k);
  const size_t plane = size_t(n_) * n_;
  const Eigen::Vector4f* c = &cells_[Index(i, j, k)];
  const size_t row = size_t(n_);
  auto lerp = [](const Eigen::Vector4f& a, const Eigen::Vector4f& b, float t) -> Eigen::Vector4f { return a + t * (b - a); };
  const Eigen::Vector4f a0 = lerp(lerp(c[0], c[1], tu), lerp(c[row], c[row + 1], tu), tv);
  const Eigen::Vector4f a1 = lerp(lerp(c[plane], c[plane + 1], tu), lerp(c[plane + row], c[plane + row + 1], tu), tv);
  const Eigen::Vector4f r = lerp(a0, a1, tw);
  if (g1) *g1 = r[1];
  if (g2) *g2 = r[2];
  return r[0];
}

namespace {
constexpr char kMagic[8] = {'S', 'N', 'W', 'O', 'P', 'G', 'R', 'D'};
constexpr uint32_t kVersion = 1;

uint64_t Fnv1a(const void* data, size_t bytes, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

struct FileHeader {
  char magic[8];
  uint32_t version;
  uint32_t shape;
  int32_t n, nd;
  double kappa;
  uint64_t checksum;
};
}  // namespace

absl::Status OperatorGrid::Save(const std::string& path) const {
  FileHeader h{};
  std::memcpy(h.magic, kMagic, 8);
  h.version = kVersion;
  h.shape = uint32_t(shape_);
  h.n = n_;
  h.nd = nd_;
  h.kappa = options_.kappa;
  h.checksum = Fnv1a(cells_.data(), Bytes());
  // Written whole under a unique temporary name, then renamed: a reader never sees half a file,
  // and servers sharing a cache directory never write one temporary.
  return WriteFileAtomically(path, {std::string_view(reinterpret_cast<const char*>(&h), sizeof h),
                                    std::string_view(reinterpret_cast<const char*>(cells_.data()), Bytes())});
}

absl::StatusOr<OperatorGrid> OperatorGrid::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  FileHeader h{};
  in.read(reinterpret_cast<char*>(&h), sizeof h);
  if (!in || std::memcmp(h.magic, kMagic, 8) != 0 || h.version != kVersion) {
    return absl::DataLossError(absl::StrCat(path, ": not a sinew operator grid (version ", kVersion, ")"));
  }
  if (h.n < 9 || h.n > 1025 || h.nd < 2 || h.nd > 1025 || (h.shape != 1 && h.shape != 2)) {
    return absl::DataLossError(absl::StrCat(path, ": bad header"));
  }
  OperatorGrid g;
  g.shape_ = OperatorShape(h.shape);
  g.n_ = h.n;
  g.nd_ = h.nd;
  g.options_ = {h.n, h.nd, h.kappa};
  g.cells_.resize(size_t(h.n) * h.n * h.nd);
  in.read(reinterpret_cast<char*>(g.cells_.data()), std::streamsize(g.Bytes()));
  if (!in || in.peek() != std::char_traits<char>::eof()) return absl::DataLossError(absl::StrCat(path, ": truncated or too long"));
  if (Fnv1a(g.cells_.data(), g.Bytes()) != h.checksum) return absl::DataLossError(absl::StrCat(path, ": checksum mismatch"));
  return g;
}

namespace {
std::mutex g_cache_mutex;
std::string g_cache_directory;
std::map<std::tuple<int, int, double>, std::shared_ptr<const CompositionOperators>> g_operators;
std::mutex g_build_mutex;

absl::StatusOr<OperatorGrid> LoadOrBuild(OperatorShape shape, const OperatorGridOptions& options,
                                         const std::string& dir, ThreadPool* pool, const ProgressFn& progress) {
  std::string path;
  if (!dir.empty()) {
    path = absl::StrCat(dir, "/", shape == OperatorShape::kContact ? "contact" : "bulge", "-", options.resolution,
                        "x", options.slices, "-k", std::lround(options.kappa * 1000), ".sinewop");
    // The file must hold what its name says: the shape, the resolution and the slices too (until
    // 2026-12-07 only κ was compared, and a bulge grid copied over a contact one was taken, 6.5 %
    // of a radius off at 120°). Anything else is built again and written over it.
    auto loaded = OperatorGrid::Load(path);
    if (loaded.ok() && loaded->shape() == shape && loaded->options().kappa == options.kappa &&
        loaded->options().resolution == options.resolution && loaded->options().slices == options.slices) {
      if (progress) progress(1.0);
      return loaded;
    }
    if (loaded.ok() || loaded.status().code() != absl::StatusCode::kNotFound) {
      std::fprintf(stderr, "sinew: operator cache %s: %s; building it again\n", path.c_str(),
                   loaded.ok() ? "holds another grid than its name says" : std::string(loaded.status().message()).c_str());
    }
  }
  auto built = OperatorGrid::Build(shape, options, pool, progress);
  if (built.ok() && !path.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (auto st = built->Save(path); !st.ok()) {
      std::fprintf(stderr, "sinew: operator cache not written (%s)\n", std::string(st.message()).c_str());
    }
  }
  return built;
}
}  // namespace

void SetOperatorCacheDirectory(std::string directory) {
  std::lock_guard<std::mutex> lock(g_cache_mutex);
  g_cache_directory = std::move(directory);
}

std::string OperatorCacheDirectory() {
  std::lock_guard<std::mutex> lock(g_cache_mutex);
  return g_cache_directory;
}

absl::StatusOr<std::shared_ptr<const CompositionOperators>> SharedOperators(const OperatorGridOptions& options,
                                                                            ThreadPool* pool,
                                                                            const ProgressFn& progress) {
  const auto key = std::make_tuple(options.resolution, options.slices, options.kappa);
  {
    std::lock_guard<std::mutex> lock(g_cache_mutex);
    if (auto it = g_operators.find(key); it != g_operators.end()) return it->second;
  }
  // One builder at a time; the others wait for its result instead of building again.
  std::lock_guard<std::mutex> build(g_build_mutex);
  std::string dir;
  {
    std::lock_guard<std::mutex> lock(g_cache_mutex);
    if (auto it = g_operators.find(key); it != g_operators.end()) return it->second;
    dir = g_cache_directory;
  }
  auto ops = std::make_shared<CompositionOperators>();
  auto contact = LoadOrBuild(OperatorShape::kContact, options, dir, pool,
                             [&](double p) { return !progress || progress(0.5 * p); });
  if (!contact.ok()) return contact.status();
  auto bulge = LoadOrBuild(OperatorShape::kBulge, options, dir, pool,
                           [&](double p) { return !progress || progress(0.5 + 0.5 * p); });
  if (!bulge.ok()) return bulge.status();
  ops->contact = std::move(*contact);
  ops->bulge = std::move(*bulge);
  std::lock_guard<std::mutex> lock(g_cache_mutex);
  auto& slot = g_operators[key];
  slot = std::move(ops);
  return slot;
}

}  // namespace sinew
