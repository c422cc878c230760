#include "core/cage/cage_deformer.h"

#include <atomic>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/util/simd.h"

namespace sinew {

CageGeometry ToCageGeometry(const Cage& cage) {
  CageGeometry g;
  g.vertices = ToPoints(cage.positions);
  const size_t f = cage.triangles.size() / 3;
  g.triangles.resize(3, static_cast<Eigen::Index>(f));
  for (size_t i = 0; i < f; ++i) {
    for (int k = 0; k < 3; ++k) g.triangles(k, static_cast<Eigen::Index>(i)) = cage.triangles[3 * i + k];
  }
  return g;
}

Eigen::Matrix3Xd ToPoints(std::span<const float> xyz) {
  return Eigen::Map<const Eigen::Matrix3Xf>(xyz.data(), 3, static_cast<Eigen::Index>(xyz.size() / 3))
      .cast<double>();
}

void ResolveCage(const Cage& rest, const CageFrame& frame, Eigen::Matrix3Xd& out) {
  const Eigen::Index n = static_cast<Eigen::Index>(rest.vertex_count());
  out.resize(3, n);
  for (Eigen::Index i = 0; i < n; ++i) {
    for (int c = 0; c < 3; ++c) {
      const double v = frame.positions[3 * i + c];
      out(c, i) = frame.mode == CageInputMode::kOffsets ? rest.positions[3 * i + c] + v : v;
    }
  }
}

std::string CageKey(const DeformerConfig& config) { return absl::StrCat("cage=", ParamsOf<CageParams>(config).cage); }

namespace {
constexpr ParamSpec kCageSpecs[] = {
    {"cage", ParamSpec::Type::kInteger, "0", "index into the rig's cages"},
};
}  // namespace

std::span<const ParamSpec> CageParamSpecs() { return kCageSpecs; }

absl::StatusOr<std::shared_ptr<const MethodParams>> ParseCageParams(const ParamSet& set, std::string_view field) {
  auto p = std::make_shared<CageParams>();
  if (auto st = ParamReader(set, field).Count("cage", p->cage, 0, 1u << 20).status(); !st.ok()) return st;
  return std::shared_ptr<const MethodParams>(std::move(p));
}

SINEW_VERTEX_LOOP
static void CageRows(const double* phi, size_t cols, const float* rest, const double* dx,
                     const double* dy, const double* dz, float* out, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) {
    const double* row = phi + i * cols;
    double x = 0, y = 0, z = 0;
    for (size_t j = 0; j < cols; ++j) {
      x += row[j] * dx[j];
      y += row[j] * dy[j];
      z += row[j] * dz[j];
    }
    out[3 * i] = float(rest[3 * i] + x);
    out[3 * i + 1] = float(rest[3 * i + 1] + y);
    out[3 * i + 2] = float(rest[3 * i + 2] + z);
  }
}

void ApplyCageCoordinates(const RowMatrixXd& phi, std::span<const float> rest,
                          const Eigen::Matrix3Xd& delta, std::span<float> out, ThreadPool* pool) {
  // Rows of delta as contiguous arrays (structure of arrays) so the dot products vectorise, in the
  // calling thread's scratch: allocated when the cage grows, not every frame (until 2026-12-07 a
  // fresh matrix per frame, against DESIGN.md's frames that allocate nothing).
  thread_local Eigen::Matrix<double, 3, Eigen::Dynamic, Eigen::RowMajor> scratch;
  if (scratch.cols() < delta.cols()) scratch.resize(3, delta.cols());
  scratch.leftCols(delta.cols()) = delta;
  // The calling thread's: named through a reference, since in the workers below `scratch` would
  // name each worker's own (empty) copy.
  const auto& d = scratch;
  const size_t cols = static_cast<size_t>(phi.cols());
  ParallelFor(pool, static_cast<size_t>(phi.rows()), 1024, [&](size_t b, size_t e) {
    CageRows(phi.data(), cols, rest.data(), d.row(0).data(), d.row(1).data(), d.row(2).data(),
             out.data(), b, e);
  });
}

namespace {

absl::Status CheckCageIndex(const Rig& rig, const DeformerConfig& config, const char* method) {
  const uint32_t cage = ParamsOf<CageParams>(config).cage;
  if (cage >= rig.cages.size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "deformer.cage.cage: method ", method, " uses cage ", cage, " but the rig has ",
        rig.cages.size(), " cages"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckCageConfig(const Rig& rig, const DeformerConfig& config) {
  return CheckCageIndex(rig, config, config.method.c_str());
}

namespace {

struct MvcPrepared final : Prepared {
  RowMatrixXd phi;  // vertices x cage vertices
  size_t Bytes() const override { return sizeof(*this) + sizeof(double) * phi.size(); }
};

struct GreenPrepared final : Prepared {
  CageGeometry rest;
  GreenCoordinates coords;
  // Each face's s·n at rest (GreenFaceTerms of the rest cage): the device stage sends the change
  // from it.
  Eigen::Matrix<double, Eigen::Dynamic, 3, Eigen::RowMajor> rest_face_terms;
  size_t Bytes() const override {
    return sizeof(*this) + sizeof(double) * (coords.phi.size() + coords.psi.size() + rest_face_terms.size());
  }
};

class CageDeformer final : public Deformer {
 public:
  CageDeformer(std::shared_ptr<const Rig> rig, std::shared_ptr<const Prepared> prepared,
               const DeformerConfig& config)
      : rig_(std::move(rig)),
        prepared_(std::move(prepared)),
        mvc_(config.method == "cage-mvc"),
        cage_index_(ParamsOf<CageParams>(config).cage),
        rest_cage_(ToPoints(rig_->cages[cage_index_].positions)) {}

  absl::Status Deform(const FrameInput& frame, std::span<float> out, ThreadPool* pool) override {
    if (auto st = Resolve(frame); !st.ok()) return st;
    if (mvc_) {
      delta_ = cage_ - rest_cage_;
      ApplyCageCoordinates(static_cast<const MvcPrepared&>(*prepared_).phi, rig_->positions, delta_, out, pool);
    } else {
      const auto& g = static_cast<const GreenPrepared&>(*prepared_);
      GreenFaceTerms(g.rest, cage_, face_terms_);
      GreenDeform(g.coords, cage_, face_terms_, out, pool);
    }
    return absl::OkStatus();
  }

  // Device stage, in float: MVC is rest + Φ·(C' − C0); Green is rest + [φ ψ]·[v' − v; s n' − n]
  // (exact at rest: [φ ψ]·[v; n] reproduces the rest point). Until 2026-12-07 Green sent
  // [φ ψ]·[v'; s n'] without a rest term, whose float products lost the rest point's own
  // magnitude: a unit cage 1e4 from the origin read 1.7e-3 of its diagonal off at rest.
  DeviceStage device_stage() const override {
    DeviceStage s;
    s.kernel = "cage";
    s.with_rest = true;
    s.device_data_key = absl::StrCat(mvc_ ? "cage-mvc cage=" : "cage-green cage=", cage_index_);
    return s;
  }
  size_t device_param_count() const override {
    const Cage& rest = rig_->cages[cage_index_];
    return 3 * (rest.vertex_count() + (mvc_ ? 0 : rest.triangles.size() / 3));
  }
  void DeviceCoefficients(std::vector<float>& values, uint32_t& cols) const override {
    if (mvc_) {
      const RowMatrixXd& phi = static_cast<const MvcPrepared&>(*prepared_).phi;
      cols = static_cast<uint32_t>(phi.cols());
      values.assign(phi.data(), phi.data() + phi.size());
      return;
    }
    const GreenCoordinates& g = static_cast<const GreenPrepared&>(*prepared_).coords;
    cols = static_cast<uint32_t>(g.phi.cols() + g.psi.cols());
    values.resize(size_t(g.phi.rows()) * cols);
    for (Eigen::Index i = 0; i < g.phi.rows(); ++i) {
      float* row = &values[size_t(i) * cols];
      for (Eigen::Index k = 0; k < g.phi.cols(); ++k) row[k] = float(g.phi(i, k));
      for (Eigen::Index k = 0; k < g.psi.cols(); ++k) row[g.phi.cols() + k] = float(g.psi(i, k));
    }
  }
  absl::Status DeviceFrame(const FrameInput& frame, std::vector<float>& params) override {
    params.resize(device_param_count());
    if (auto st = Resolve(frame); !st.ok()) return st;
    const Cage& rest = rig_->cages[cage_index_];
    const Eigen::Index n = cage_.cols();
    size_t at = 0;
    for (Eigen::Index k = 0; k < n; ++k) {
      for (int d = 0; d < 3; ++d) params[at++] = float(cage_(d, k) - rest.positions[3 * k + d]);
    }
    if (!mvc_) {
      const auto& g = static_cast<const GreenPrepared&>(*prepared_);
      GreenFaceTerms(g.rest, cage_, face_terms_);
      for (Eigen::Index f = 0; f < face_terms_.rows(); ++f) {
        for (int d = 0; d < 3; ++d) params[at++] = float(face_terms_(f, d) - g.rest_face_terms(f, d));
      }
    }
    return absl::OkStatus();
  }

 private:
  // Checks the frame and resolves its cage positions into cage_.
  absl::Status Resolve(const FrameInput& frame) {
    const char* name = mvc_ ? "cage-mvc" : "cage-green";
    if (frame.pose != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("pose: method ", name, " takes no skeleton pose"));
    }
    if (frame.posed_cage != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("posed_cage: method ", name, " has no posed cage; send cages"));
    }
    if (frame.spheres != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("spheres: method ", name, " takes no sphere-mesh input"));
    }
    if (auto st = ValidateCageFrames(*rig_, frame.cages); !st.ok()) return st;
    if (frame.cages.size() != 1 || frame.cages[0].cage != cage_index_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cages: method ", name, " needs exactly one entry, for cage ", cage_index_));
    }
    ResolveCage(rig_->cages[cage_index_], frame.cages[0], cage_);
    return absl::OkStatus();
  }

 public:
  size_t StateBytes() const override {
    return sizeof(*this) + sizeof(double) * (cage_.size() + delta_.size() + face_terms_.size());
  }

 private:
  std::shared_ptr<const Rig> rig_;
  std::shared_ptr<const Prepared> prepared_;
  bool mvc_;  // mean value coordinates; else Green coordinates
  uint32_t cage_index_;
  Eigen::Matrix3Xd rest_cage_;  // C0, 3 x n
  Eigen::Matrix3Xd cage_, delta_;
  Eigen::Matrix<double, Eigen::Dynamic, 3, Eigen::RowMajor> face_terms_;
};

}  // namespace

absl::Status CheckCoordinateBytes(uint64_t rows, uint64_t columns, uint32_t cage, const char* method) {
  const long double bytes = static_cast<long double>(rows) * static_cast<long double>(columns) * sizeof(double);
  if (bytes <= static_cast<long double>(kMaxCoordinateBytes)) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrFormat(
      "rig.cages[%u]: method %s would keep %llu mesh vertices x %llu coordinates of float64 (%.3g GB), more than "
      "the %llu GiB a cage method's coordinates may take; use a coarser cage or a lighter mesh",
      cage, method, (unsigned long long)rows, (unsigned long long)columns, double(bytes) / 1e9,
      (unsigned long long)(kMaxCoordinateBytes >> 30)));
}

absl::StatusOr<std::shared_ptr<const Prepared>> PrepareMvcCage(const Rig& rig,
                                                               const DeformerConfig& config,
                                                               ThreadPool* pool,
                                                               const ProgressFn& progress) {
  if (auto st = CheckCageIndex(rig, config, "cage-mvc"); !st.ok()) return st;
  const uint32_t index = ParamsOf<CageParams>(config).cage;
  if (auto st = CheckCoordinateBytes(rig.vertex_count(), rig.cages[index].vertex_count(), index, "cage-mvc"); !st.ok()) {
    return st;
  }
  const CageGeometry cage = ToCageGeometry(rig.cages[index]);
  auto p = std::make_shared<MvcPrepared>();
  const size_t m = rig.vertex_count(), n = static_cast<size_t>(cage.vertices.cols());
  p->phi.resize(static_cast<Eigen::Index>(m), static_cast<Eigen::Index>(n));
  std::atomic<size_t> done{0};
  std::atomic<bool> stop{false};  // progress said to stop: the chunks not started are skipped
  ParallelFor(pool, m, 512, [&](size_t b, size_t e) {
    if (stop) return;
    for (size_t i = b; i < e; ++i) {
      const Eigen::Vector3d x(rig.positions[3 * i], rig.positions[3 * i + 1], rig.positions[3 * i + 2]);
      MeanValueCoordinates(cage, x, std::span<double>(p->phi.row(static_cast<Eigen::Index>(i)).data(), n));
    }
    const size_t d = done.fetch_add(e - b) + (e - b);
    if (progress && !progress(double(d) / double(m))) stop = true;
  });
  if (stop) return absl::CancelledError("cage-mvc: preparation cancelled");
  return std::shared_ptr<const Prepared>(std::move(p));
}

absl::StatusOr<std::shared_ptr<const Prepared>> PrepareGreenCage(const Rig& rig,
                                                                 const DeformerConfig& config,
                                                                 ThreadPool* pool,
                                                                 const ProgressFn& progress) {
  if (auto st = CheckCageIndex(rig, config, "cage-green"); !st.ok()) return st;
  const uint32_t index = ParamsOf<CageParams>(config).cage;
  if (auto st = CheckCoordinateBytes(rig.vertex_count(),
                                     rig.cages[index].vertex_count() + rig.cages[index].triangles.size() / 3, index,
                                     "cage-green");
      !st.ok()) {
    return st;
  }
  auto p = std::make_shared<GreenPrepared>();
  p->rest = ToCageGeometry(rig.cages[ParamsOf<CageParams>(config).cage]);
  std::atomic<bool> refused{false};
  p->coords = ComputeGreenCoordinates(p->rest, ToPoints(rig.positions), pool, [&](double f) {
    if (progress && !progress(f)) refused = true;
    return !refused;
  });
  if (refused) return absl::CancelledError("cage-green: preparation cancelled");
  // Overlapping shells (a body box and a limb box in one cage) put points inside twice, where
  // Green's integrals give w·η: until 2026-12-07 such a point came out at twice its place at rest.
  if (p->coords.first_overlap >= 0) {
    const auto i = p->coords.first_overlap;
    return absl::FailedPreconditionError(absl::StrFormat(
        "cage-green: rig.mesh.positions[%d] (%g, %g, %g) is inside rig.cages[%u] %.0f times (winding number "
        "%.3f: its closed shells overlap, or it passes through itself); Green coordinates need each point "
        "enclosed once: merge the shells into one surface, or use cage-mvc, which takes it",
        i, rig.positions[3 * i], rig.positions[3 * i + 1], rig.positions[3 * i + 2], index,
        std::round(p->coords.overlap_winding), p->coords.overlap_winding));
  }
  GreenFaceTerms(p->rest, p->rest.vertices, p->rest_face_terms);
  return std::shared_ptr<const Prepared>(std::move(p));
}

absl::StatusOr<std::unique_ptr<Deformer>> CreateCageDeformer(std::shared_ptr<const Rig> rig,
                                                             std::shared_ptr<const Prepared> prepared,
                                                             const DeformerConfig& config) {
  const char* name = config.method == "cage-mvc" ? "cage-mvc" : "cage-green";
  if (auto st = CheckCageIndex(*rig, config, name); !st.ok()) return st;
  if (!prepared) return absl::InternalError("cage deformer created without its coordinates");
  return std::make_unique<CageDeformer>(std::move(rig), std::move(prepared), config);
}

}  // namespace sinew
