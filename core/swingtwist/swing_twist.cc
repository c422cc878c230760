#include "core/swingtwist/swing_twist.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "core/util/simd.h"

#if SINEW_HAVE_AVX2_KERNELS
#include <immintrin.h>
#endif

namespace sinew {

SwingTwistSplit SplitSwingTwist(const Eigen::Quaterniond& q) {
  SwingTwistSplit r;
  const double w = q.w(), x = q.x(), y = q.y(), z = q.z();
  const double n2 = w * w + z * z;
  if (n2 < 1e-12) {  // a swing of 180°: every twist fits, take none
    r.swing = q;
    r.singular = true;
    return r;
  }
  const double n = std::sqrt(n2);
  // q · conj(q_twist) with q_twist = (w, 0, 0, z) / n: the z part cancels exactly.
  r.swing = Eigen::Quaterniond(n2 / n, (w * x - y * z) / n, (w * y + x * z) / n, 0.0);
  double theta = 2 * std::atan2(z, w);  // (−2π, 2π]: wrap, so that q and −q agree
  if (theta > std::numbers::pi) theta -= 2 * std::numbers::pi;
  if (theta <= -std::numbers::pi) theta += 2 * std::numbers::pi;
  r.theta = theta;
  return r;
}

absl::StatusOr<CanonicalFrames> ComputeCanonicalFrames(const Rig& rig) {
  const Skeleton& sk = rig.skeleton;
  const size_t n = rig.joint_count();
  if (n == 0) return absl::FailedPreconditionError("swing/twist deformers need a skeleton");
  CanonicalFrames f;
  f.rest.resize(n);
  for (size_t j = 0; j < n; ++j) f.rest[j] = Inverse(sk.inverse_bind[j]).col(3);
  Eigen::Vector3d lo = f.rest[0], hi = f.rest[0];
  for (const auto& p : f.rest) {
    lo = lo.cwiseMin(p);
    hi = hi.cwiseMax(p);
  }
  double size = (hi - lo).norm();
  if (size <= 0) size = std::max<double>(rig.bbox_diagonal(), 1e-12);
  const double coincident = 1e-6 * size;

  std::vector<std::vector<int32_t>> children(n);
  for (size_t j = 0; j < n; ++j) {
    if (sk.parents[j] >= 0) children[sk.parents[j]].push_back(int32_t(j));
  }
  // The joint that gives j its axis: a long child, else the first joint away from j in depth
  // first order (children in order), descending only through joints coincident with j.
  // first_away[j] is that depth-first answer, computed children first and reused from a child at
  // exactly j's point (identity rest transforms: helper and twist joints), where the search
  // below the child is the child's own. Until 2026-12-07 every joint searched its whole
  // coincident subtree, O(n²) in a chain of them (16 s at 65 535 joints, before any progress
  // call). Below a child near j but not at its point the search is done as before.
  auto search = [&](size_t j, int32_t below) -> int32_t {  // in `below`'s subtree, away from j
    std::vector<int32_t> stack{below};
    while (!stack.empty()) {
      const int32_t d = stack.back();
      stack.pop_back();
      if ((f.rest[d] - f.rest[j]).norm() > coincident) return d;
      stack.insert(stack.end(), children[d].rbegin(), children[d].rend());
    }
    return -1;
  };
  std::vector<int32_t> first_away(n, -1), axis_joint(n, -1);
  for (auto it = sk.order.rbegin(); it != sk.order.rend(); ++it) {
    const size_t j = size_t(*it);
    for (int32_t c : children[j]) {
      const int32_t found = (f.rest[c] - f.rest[j]).norm() > coincident ? c
                            : f.rest[c] == f.rest[j]                    ? first_away[c]
                                                                        : search(j, c);
      if (found >= 0) {
        first_away[j] = found;
        break;
      }
    }
    axis_joint[j] = first_away[j];
    for (int32_t c : children[j]) {
      if ((f.rest[c] - f.rest[j]).norm() > coincident) {
        axis_joint[j] = c;  // a long child first
        break;
      }
    }
  }

  f.frame.assign(n, IdentityAffine());
  f.inverse.assign(n, IdentityAffine());
  f.bone_length.assign(n, 0.0);
  std::vector<Eigen::Vector3d> axis(n, Eigen::Vector3d::UnitZ());
  for (int32_t j : sk.order) {  // parents first: a leaf takes its parent's axis
    const int32_t a = axis_joint[size_t(j)];
    if (a >= 0) {
      axis[j] = (f.rest[a] - f.rest[j]).normalized();
      f.bone_length[j] = (f.rest[a] - f.rest[j]).norm();
    } else if (sk.parents[j] >= 0) {
      axis[j] = axis[sk.parents[j]];
    }
    const Eigen::Vector3d z = axis[j];
    const Eigen::Vector3d ref = std::abs(z.x()) < 0.9 ? Eigen::Vector3d::UnitX() : Eigen::Vector3d::UnitY();
    const Eigen::Vector3d x = (ref - ref.dot(z) * z).normalized();
    const Eigen::Vector3d y = z.cross(x);
    Affine34d r;
    r.col(0) = x;
    r.col(1) = y;
    r.col(2) = z;
    r.col(3) = f.rest[j];
    f.frame[j] = r;
    f.inverse[j] = Inverse(r);
  }
  return f;
}

namespace {

template <size_t N>
void Store(const Eigen::Matrix<double, 3, N>& m, std::array<float, 3 * N>& out) {
  for (int r = 0; r < 3; ++r) {
    for (size_t c = 0; c < N; ++c) out[r * N + c] = float(m(r, c));
  }
}

}  // namespace

absl::Status SwingTwistJoints(const Rig& rig, const CanonicalFrames& frames, std::span<const Affine34d> skinning,
                              std::span<JointRecord> out, std::span<const int32_t> parents) {
  const Skeleton& sk = rig.skeleton;
  const size_t n = rig.joint_count();
  if (skinning.size() != n || out.size() != n || frames.frame.size() != n || !(parents.empty() || parents.size() == n)) {
    return absl::InternalError("swing/twist: one skinning matrix, one record and one parent per joint");
  }
  for (size_t j = 0; j < n; ++j) {
    const int32_t p = parents.empty() ? sk.parents[j] : parents[j];
    const Affine34d& frame = frames.frame[j];
    Eigen::Quaterniond q = Eigen::Quaterniond::Identity();
    double scale = 1;
    Eigen::Vector3d translation = Eigen::Vector3d::Zero();
    Affine34d a;
    if (p < 0) {
      a = Compose(skinning[j], frame);
    } else {
      a = Compose(skinning[p], frame);
      const Affine34d m = Compose(frames.inverse[j], Compose(Inverse(skinning[p]), Compose(skinning[j], frame)));
      const Eigen::Matrix3d l = m.leftCols<3>();
      const double det = l.determinant();
      scale = det > 0 ? std::cbrt(det) : 0;
      const Eigen::Matrix3d rotation = scale > 0 ? Eigen::Matrix3d(l / scale) : Eigen::Matrix3d::Zero();
      const double orthogonality = (rotation.transpose() * rotation - Eigen::Matrix3d::Identity()).cwiseAbs().maxCoeff();
      if (!(scale > 0) || !(orthogonality <= 1e-3)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "pose: joint ", j, " (", sk.names.empty() ? "" : sk.names[j],
            ") shears, mirrors or scales unevenly relative to its parent; swing/twist deformers take rotations, "
            "uniform scales and translations"));
      }
      q = Eigen::Quaterniond(rotation).normalized();
      translation = m.col(3);
    }
    const SwingTwistSplit split = SplitSwingTwist(q);
    JointRecord& r = out[j];
    Store<4>(a, r.a);
    Store<3>(scale * split.swing.toRotationMatrix() - Eigen::Matrix3d::Identity(), r.b);
    r.theta = float(split.theta);
    Store<4>(frames.inverse[j], r.inverse_frame);
    for (int k = 0; k < 3; ++k) r.translation[k] = float(translation[k]);
    r.unused = 0;
  }
  return absl::OkStatus();
}

absl::Status CheckSwingTwistWeights(const SwingTwistWeights& w, size_t vertex_count, size_t joint_count) {
  if (w.offsets.size() != vertex_count + 1 || w.offsets.front() != 0) {
    return absl::InvalidArgumentError(absl::StrCat("swing/twist weights: ", w.offsets.size(),
                                                   " offsets for ", vertex_count, " vertices"));
  }
  const size_t e = w.offsets.back();
  if (w.joints.size() != e || w.d.size() != e || w.s.size() != e || w.t.size() != e) {
    return absl::InvalidArgumentError("swing/twist weights: joints, d, s and t need one entry per influence");
  }
  auto unit = [](float x) { return std::isfinite(x) && x >= 0 && x <= 1; };
  for (size_t v = 0; v < vertex_count; ++v) {
    if (w.offsets[v + 1] < w.offsets[v] || w.offsets[v + 1] > e) {
      return absl::InvalidArgumentError(absl::StrCat("swing/twist weights: offsets decrease at vertex ", v));
    }
    double sum = 0;
    for (uint32_t k = w.offsets[v]; k < w.offsets[v + 1]; ++k) {
      if (w.joints[k] >= joint_count) {
        return absl::InvalidArgumentError(absl::StrCat("swing/twist weights: vertex ", v, " names joint ",
                                                       w.joints[k], " of ", joint_count));
      }
      if (!unit(w.d[k]) || !unit(w.s[k]) || !unit(w.t[k])) {
        return absl::InvalidArgumentError(absl::StrCat("swing/twist weights: vertex ", v,
                                                       " has a d, s or t outside [0, 1]"));
      }
      sum += w.d[k];
    }
    if (std::abs(sum - 1) > 1e-4) {
      return absl::InvalidArgumentError(absl::StrCat("swing/twist weights: vertex ", v, "'s d sums to ", sum));
    }
  }
  if (!w.parents.empty() && w.parents.size() != joint_count) {
    return absl::InvalidArgumentError(absl::StrCat("swing/twist weights: ", w.parents.size(), " deformer parents for ",
                                                   joint_count, " joints"));
  }
  for (size_t j = 0; j < w.parents.size(); ++j) {
    if (w.parents[j] < -1 || w.parents[j] >= int64_t(joint_count) || w.parents[j] == int64_t(j)) {
      return absl::InvalidArgumentError(absl::StrCat("swing/twist weights: joint ", j, "'s deformer parent ",
                                                     w.parents[j], " is not another joint or -1"));
    }
  }
  return absl::OkStatus();
}

void SwingTwistDeviceRows(const SwingTwistWeights& weights, std::vector<float>& values, uint32_t& cols) {
  const size_t n = weights.offsets.empty() ? 0 : weights.offsets.size() - 1;
  uint32_t widest = 1;
  for (size_t v = 0; v < n; ++v) widest = std::max(widest, weights.offsets[v + 1] - weights.offsets[v]);
  cols = kSwingTwistInfluenceFloats * widest;
  values.assign(n * cols, 0.f);
  for (size_t v = 0; v < n; ++v) {
    float* row = &values[v * cols];
    for (uint32_t k = weights.offsets[v]; k < weights.offsets[v + 1]; ++k, row += kSwingTwistInfluenceFloats) {
      row[0] = float(weights.joints[k]);
      row[1] = weights.d[k];
      row[2] = weights.s[k];
      row[3] = weights.t[k];
    }
  }
}

void SwingTwistDeviceJoints(std::span<const JointRecord> joints, std::span<float> out) {
  static_assert(sizeof(JointRecord) <= kSwingTwistDeviceJointFloats * sizeof(float));
  for (size_t j = 0; j < joints.size(); ++j) {
    float* at = &out[j * kSwingTwistDeviceJointFloats];
    std::memcpy(at, &joints[j], sizeof(JointRecord));
    std::fill(at + sizeof(JointRecord) / sizeof(float), at + kSwingTwistDeviceJointFloats, 0.f);
  }
}

SwingTwistBlocks SwingTwistCpuBlocks(std::span<const float> rest, const SwingTwistWeights& weights,
                                     const CanonicalFrames& frames) {
  SwingTwistBlocks b;
#if SINEW_HAVE_AVX2_KERNELS
  if (!CpuHasAvx2Fma()) return b;
  const size_t n = rest.size() / 3, blocks = (n + kSwingTwistBlockVertices - 1) / kSwingTwistBlockVertices;
  b.block_runs.reserve(blocks + 1);
  b.block_runs.push_back(0);
  b.run_lanes.push_back(0);
  auto lane = [&](float x, float y, float z, float t, float s, float d, uint16_t slot) {
    b.x.push_back(x);
    b.y.push_back(y);
    b.z.push_back(z);
    b.t.push_back(t);
    b.s.push_back(s);
    b.d.push_back(d);
    b.slot.push_back(slot);
  };
  // Vertices ordered by their set of joints (stable: a mesh already in that order keeps it), so
  // that a joint's influences in a block are mostly vertices in a row.
  std::vector<uint16_t> sets(weights.joints);
  for (size_t v = 0; v < n; ++v) std::sort(sets.begin() + weights.offsets[v], sets.begin() + weights.offsets[v + 1]);
  std::vector<uint32_t> position(n);
  std::iota(position.begin(), position.end(), 0u);
  std::stable_sort(position.begin(), position.end(), [&](uint32_t u, uint32_t v) {
    return std::lexicographical_compare(sets.begin() + weights.offsets[u], sets.begin() + weights.offsets[u + 1],
                                        sets.begin() + weights.offsets[v], sets.begin() + weights.offsets[v + 1]);
  });
  if (!std::is_sorted(position.begin(), position.end())) b.vertex = position;
  std::vector<std::pair<uint16_t, uint32_t>> order;  // (joint, position) of each influence
  std::vector<uint32_t> influence, by_joint;
  for (size_t block = 0; block < blocks; ++block) {
    const size_t p0 = block * kSwingTwistBlockVertices, p1 = std::min(n, p0 + kSwingTwistBlockVertices);
    // The block's influences by joint, stable in the position order.
    order.clear();
    influence.clear();
    for (size_t p = p0; p < p1; ++p) {
      for (uint32_t e = weights.offsets[position[p]]; e < weights.offsets[position[p] + 1]; ++e) {
        order.emplace_back(weights.joints[e], uint32_t(p));
        influence.push_back(e);
      }
    }
    by_joint.resize(order.size());
    std::iota(by_joint.begin(), by_joint.end(), 0u);
    std::stable_sort(by_joint.begin(), by_joint.end(), [&](uint32_t a, uint32_t c) { return order[a].first < order[c].first; });
    for (size_t k = 0; k < by_joint.size();) {
      const uint16_t j = order[by_joint[k]].first;
      const Affine34d& inv = frames.inverse[j];
      for (; k < by_joint.size() && order[by_joint[k]].first == j; ++k) {
        const uint32_t e = influence[by_joint[k]], p = order[by_joint[k]].second, v = position[p];
        const Eigen::Vector3d x = inv.leftCols<3>() * Eigen::Vector3d(rest[3 * v], rest[3 * v + 1], rest[3 * v + 2]) + inv.col(3);
        lane(float(x.x()), float(x.y()), float(x.z()), weights.t[e], weights.s[e], weights.d[e], uint16_t(p - p0));
      }
      while (b.x.size() % 8 != 0) lane(0, 0, 0, 0, 0, 0, kSwingTwistPaddingSlot);  // skipped
      for (size_t g = b.dense.size() * 8; g < b.x.size(); g += 8) {  // eight vertices in a row: one vector sum
        bool row = true;
        for (int i = 1; i < 8; ++i) row = row && b.slot[g + i] == b.slot[g] + i;
        b.dense.push_back(row);
      }
      b.run_joint.push_back(j);
      b.run_lanes.push_back(uint32_t(b.x.size()));
    }
    b.block_runs.push_back(uint32_t(b.run_joint.size()));
  }
  for (auto* f : {&b.x, &b.y, &b.z, &b.t, &b.s, &b.d}) f->shrink_to_fit();
  b.slot.shrink_to_fit();
  b.dense.shrink_to_fit();
  b.run_lanes.shrink_to_fit();
  b.run_joint.shrink_to_fit();
#else
  (void)rest;
  (void)weights;
  (void)frames;
#endif
  return b;
}

size_t SwingTwistBlocks::Bytes() const {
  return sizeof(uint32_t) * (block_runs.capacity() + run_lanes.capacity() + vertex.capacity()) +
         sizeof(uint16_t) * (run_joint.capacity() + slot.capacity()) +
         sizeof(float) * (x.capacity() + y.capacity() + z.capacity() + t.capacity() + s.capacity() + d.capacity()) +
         dense.capacity();
}

namespace {

#if SINEW_HAVE_AVX2_KERNELS
// sin and cos of eight angles: x = qπ/2 + r with π/2 in three parts (exact products with q up to
// about 1e4), Cephes' minimax polynomials on |r| ≤ π/4, the quadrant by swap and sign.
__attribute__((target("avx2,fma"))) inline void SinCos8(__m256 x, __m256& sin, __m256& cos) {
  const __m256 q = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(float(2 / std::numbers::pi))),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(q, _mm256_set1_ps(1.5703125f), x);
  r = _mm256_fnmadd_ps(q, _mm256_set1_ps(4.837512969970703125e-4f), r);
  r = _mm256_fnmadd_ps(q, _mm256_set1_ps(7.54978995489188216e-8f), r);
  const __m256 r2 = _mm256_mul_ps(r, r);
  __m256 sp = _mm256_fmadd_ps(_mm256_set1_ps(-1.9515295891e-4f), r2, _mm256_set1_ps(8.3321608736e-3f));
  sp = _mm256_fmadd_ps(sp, r2, _mm256_set1_ps(-1.6666654611e-1f));
  const __m256 sr = _mm256_fmadd_ps(_mm256_mul_ps(sp, r2), r, r);
  __m256 cp = _mm256_fmadd_ps(_mm256_set1_ps(2.443315711809948e-5f), r2, _mm256_set1_ps(-1.388731625493765e-3f));
  cp = _mm256_fmadd_ps(cp, r2, _mm256_set1_ps(4.166664568298827e-2f));
  const __m256 cr = _mm256_fmadd_ps(_mm256_mul_ps(cp, r2), r2, _mm256_fnmadd_ps(_mm256_set1_ps(0.5f), r2, _mm256_set1_ps(1.f)));
  const __m256i qi = _mm256_cvtps_epi32(q);
  const __m256 swap = _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(qi, _mm256_set1_epi32(1)), _mm256_set1_epi32(1)));
  const __m256i two = _mm256_set1_epi32(2);
  const __m256 sin_sign = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_and_si256(qi, two), 30));
  const __m256 cos_sign = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_and_si256(_mm256_add_epi32(qi, _mm256_set1_epi32(1)), two), 30));
  sin = _mm256_xor_ps(_mm256_blendv_ps(sr, cr, swap), sin_sign);
  cos = _mm256_xor_ps(_mm256_blendv_ps(cr, sr, swap), cos_sign);
}

// One block: every run's lanes eight at a time, summed into the block's vertices, then written out.
__attribute__((target("avx2,fma"))) void Avx2Block(const SwingTwistBlocks& b, size_t block, const JointRecord* joints,
                                                   size_t p0, size_t count, float* __restrict out) {
  alignas(32) float acc[3][kSwingTwistBlockVertices];
  for (auto& a : acc) std::fill(a, a + count, 0.f);
  alignas(32) float lanes[3][8];
  const float *px = b.x.data(), *py = b.y.data(), *pz = b.z.data(), *pt = b.t.data(), *ps = b.s.data(),
              *pd = b.d.data();
  const uint16_t* slot = b.slot.data();
  const uint8_t* dense = b.dense.data();
  for (uint32_t run = b.block_runs[block]; run < b.block_runs[block + 1]; ++run) {
    // The record spread over eight lanes once per run (the multiply-adds then read it from
    // memory: sixteen registers do not hold it): B, τ, A, θ.
    const JointRecord& rec = joints[b.run_joint[run]];
    alignas(32) __m256 m[9], tau[3], a[12];
    for (int i = 0; i < 9; ++i) m[i] = _mm256_set1_ps(rec.b[i]);
    for (int i = 0; i < 3; ++i) tau[i] = _mm256_set1_ps(rec.translation[i]);
    for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_ps(rec.a[i]);
    const __m256 theta = _mm256_set1_ps(rec.theta);
    for (uint32_t l = b.run_lanes[run]; l < b.run_lanes[run + 1]; l += 8) {
      __m256 sn, c;
      SinCos8(_mm256_mul_ps(_mm256_loadu_ps(pt + l), theta), sn, c);
      const __m256 x = _mm256_loadu_ps(px + l), y = _mm256_loadu_ps(py + l);
      // x̃ twisted about z by t θ, then g = y + s ((σ Q_swing − I) y + τ), then d (A g + a).
      const __m256 y0 = _mm256_fmsub_ps(c, x, _mm256_mul_ps(sn, y));
      const __m256 y1 = _mm256_fmadd_ps(sn, x, _mm256_mul_ps(c, y));
      const __m256 y2 = _mm256_loadu_ps(pz + l);
      const __m256 s = _mm256_loadu_ps(ps + l);
      __m256 g[3];
      for (int i = 0; i < 3; ++i) {
        const __m256 h =
            _mm256_fmadd_ps(m[3 * i], y0, _mm256_fmadd_ps(m[3 * i + 1], y1, _mm256_fmadd_ps(m[3 * i + 2], y2, tau[i])));
        g[i] = _mm256_fmadd_ps(s, h, i == 0 ? y0 : i == 1 ? y1 : y2);
      }
      const __m256 d = _mm256_loadu_ps(pd + l);
      for (int i = 0; i < 3; ++i) {
        const __m256 o =
            _mm256_fmadd_ps(a[4 * i], g[0], _mm256_fmadd_ps(a[4 * i + 1], g[1], _mm256_fmadd_ps(a[4 * i + 2], g[2], a[4 * i + 3])));
        _mm256_store_ps(lanes[i], _mm256_mul_ps(d, o));
      }
      if (dense[l / 8]) {
        float* at = &acc[0][slot[l]];
        for (int i = 0; i < 3; ++i, at += kSwingTwistBlockVertices) {
          _mm256_storeu_ps(at, _mm256_add_ps(_mm256_loadu_ps(at), _mm256_load_ps(lanes[i])));
        }
        continue;
      }
      for (int k = 0; k < 8; ++k) {
        const uint16_t v = slot[l + k];
        if (v == kSwingTwistPaddingSlot) break;  // the run's padding: dropped, so that no record reaches vertex 0
        acc[0][v] += lanes[0][k];
        acc[1][v] += lanes[1][k];
        acc[2][v] += lanes[2][k];
      }
    }
  }
  if (b.vertex.empty()) {
    for (size_t i = 0; i < count; ++i) {
      out[3 * (p0 + i)] = acc[0][i];
      out[3 * (p0 + i) + 1] = acc[1][i];
      out[3 * (p0 + i) + 2] = acc[2][i];
    }
    return;
  }
  for (size_t i = 0; i < count; ++i) {
    const size_t v = b.vertex[p0 + i];
    out[3 * v] = acc[0][i];
    out[3 * v + 1] = acc[1][i];
    out[3 * v + 2] = acc[2][i];
  }
}
#endif

}  // namespace

void SwingTwistSkinningPortableRange(std::span<const float> rest, const SwingTwistWeights& weights,
                                     std::span<const JointRecord> joints, std::span<float> out, size_t begin,
                                     size_t end) {
  for (size_t v = begin; v < end; ++v) {
    const float px = rest[3 * v], py = rest[3 * v + 1], pz = rest[3 * v + 2];
    float ox = 0, oy = 0, oz = 0;
    for (uint32_t k = weights.offsets[v]; k < weights.offsets[v + 1]; ++k) {
      const JointRecord& r = joints[weights.joints[k]];
      const float* m = r.inverse_frame.data();
      // x̃ = R⁻¹ p̃, twisted about z by t·θ.
      const float x = m[0] * px + m[1] * py + m[2] * pz + m[3];
      const float y = m[4] * px + m[5] * py + m[6] * pz + m[7];
      const float z = m[8] * px + m[9] * py + m[10] * pz + m[11];
      const float phi = weights.t[k] * r.theta;
      const float c = std::cos(phi), sn = std::sin(phi);
      const float y0 = c * x - sn * y, y1 = sn * x + c * y, y2 = z;
      // g = y + s ((σ Q_swing − I) y + τ).
      const float s = weights.s[k];
      const float* b = r.b.data();
      const float* tau = r.translation.data();
      const float g0 = y0 + s * (b[0] * y0 + b[1] * y1 + b[2] * y2 + tau[0]);
      const float g1 = y1 + s * (b[3] * y0 + b[4] * y1 + b[5] * y2 + tau[1]);
      const float g2 = y2 + s * (b[6] * y0 + b[7] * y1 + b[8] * y2 + tau[2]);
      const float* a = r.a.data();
      const float d = weights.d[k];
      ox += d * (a[0] * g0 + a[1] * g1 + a[2] * g2 + a[3]);
      oy += d * (a[4] * g0 + a[5] * g1 + a[6] * g2 + a[7]);
      oz += d * (a[8] * g0 + a[9] * g1 + a[10] * g2 + a[11]);
    }
    out[3 * v] = ox;
    out[3 * v + 1] = oy;
    out[3 * v + 2] = oz;
  }
}

void SwingTwistSkinning(std::span<const float> rest, const SwingTwistWeights& weights,
                        std::span<const JointRecord> joints, std::span<float> out, ThreadPool* pool,
                        const SwingTwistBlocks* blocks) {
  const size_t n = rest.size() / 3;
#if SINEW_HAVE_AVX2_KERNELS
  // Blocks made for another vertex count (a caller's mistake) would write out of `out`: then the
  // portable loop.
  const bool fits = blocks != nullptr && !blocks->empty() &&
                    blocks->block_runs.size() - 1 == (n + kSwingTwistBlockVertices - 1) / kSwingTwistBlockVertices &&
                    (blocks->vertex.empty() || blocks->vertex.size() == n) && out.size() >= 3 * n;
  if (fits && CpuHasAvx2Fma()) {
    const size_t count = blocks->block_runs.size() - 1;
    ParallelFor(pool, count, 4, [&](size_t begin, size_t end) {
      for (size_t block = begin; block < end; ++block) {
        const size_t p0 = block * kSwingTwistBlockVertices;
        Avx2Block(*blocks, block, joints.data(), p0, std::min<size_t>(kSwingTwistBlockVertices, n - p0), out.data());
      }
    });
    return;
  }
#else
  (void)blocks;
#endif
  ParallelFor(pool, n, 4096, [&](size_t begin, size_t end) {
    SwingTwistSkinningPortableRange(rest, weights, joints, out, begin, end);
  });
}

}  // namespace sinew
