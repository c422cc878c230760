// Evaluation of the composed implicit field with every bone field moved by its bone (seed 000
// §2.5.6), shared by the preparation (rest pose) and both deformers. Internal to core/implicit.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include <Eigen/Core>

#include "core/implicit/device_layout.h"
#include "core/implicit/implicit_skinning.h"

namespace sinew::implicit_internal {

using implicit_device::kMaxCandidates;

// One moved field for the current (sub)frame: posed point -> rest point, and the matrix that
// takes a rest-space gradient to posed space (A⁻ᵀ; R/s for a similarity).
struct LeafFrame {
  Eigen::Matrix3f inv_linear;
  Eigen::Vector3f inv_translation;
  Eigen::Matrix3f gradient;
  Eigen::Vector3f center;  // posed bounding-sphere centre
  float radius2;
  // The posed point x in the field's rest frame (where its grid is sampled).
  Eigen::Vector3f ToRest(const Eigen::Vector3f& x) const { return inv_linear * x + inv_translation; }
};

struct FieldValue {
  float f = 0;
  Eigen::Vector3f g = Eigen::Vector3f::Zero();
};

// Bone field `leaf` moved by its frame: its value at x and its posed gradient.
inline FieldValue LeafFieldValue(const ImplicitModel& m, const LeafFrame& lf, size_t leaf, const Eigen::Vector3f& x) {
  FieldValue v;
  Eigen::Vector3f gr;
  v.f = m.grids[leaf].Sample(lf.ToRest(x), &gr);
  v.g = lf.gradient * gr;
  return v;
}

class Evaluator {
 public:
  Evaluator(const ImplicitModel& m, const LeafFrame* leaves) : m_(m), leaves_(leaves) {}

  // `cand`: `count` leaves in ascending order (as Candidates gives them).
  FieldValue Eval(const Eigen::Vector3f& x, const uint16_t* cand, int count) const {
    if (m_.tree.root < 0 || count == 0) return {};
    return Node(m_.tree.root, x, cand, cand + count, nullptr);
  }

  // The same with the controllers' values held: `controls` has kMaxCandidates − 1 slots, one per
  // operator whose two children both hold a candidate (in evaluation order). With `record`,
  // each such operator writes its live d there (NaN where a child's field was 0); without, it
  // uses the held d where it is not NaN. With d held, g1 ∇f1 + g2 ∇f2 is the gradient of the
  // value, up to the grid: g1, g2 are the nodes' ∂g/∂f interpolated, not the derivatives of the
  // interpolated g (the live gradient also omits ∂g/∂d · ∇d, spec pitfall 17).
  FieldValue EvalHeld(const Eigen::Vector3f& x, const uint16_t* cand, int count, float* controls, bool record) const {
    if (m_.tree.root < 0 || count == 0) return {};
    Prefetch(x, cand, count);
    Held held{controls, record, 0};
    return Node(m_.tree.root, x, cand, cand + count, &held);
  }

 private:
  // The candidates' grid cells, requested before the walk samples them one after another. Only
  // EvalHeld does it: the elastic relaxation visits every node once a round, so each visit
  // misses the cache; the projections (Eval) sample one vertex many times in a row, where the
  // cells are already cached and the request would only cost.
  void Prefetch(const Eigen::Vector3f& x, const uint16_t* cand, int count) const {
    for (int k = 0; k < count; ++k) {
      const LeafFrame& lf = leaves_[cand[k]];
      m_.grids[cand[k]].Prefetch(lf.ToRest(x));
    }
  }

  struct Held {
    float* controls;
    bool record;
    int next_slot;
  };

  // The subtree at `index` over the candidates [begin, end), those among its leaves (ascending,
  // so a subtree's candidates are a contiguous run and its children split it at the right
  // child's first leaf). A subtree with no candidate is 0; with one, that leaf's value: every
  // operator on the way down sees a 0 child, passes the other on (g(0, f) = f) and holds no
  // controller, so a long chain of the skeleton is not walked for it. (Where that value is 0,
  // each operator passes on its right child: the leaf's gradient comes back only from the
  // subtree's last leaf, as the walk would give it.)
  FieldValue Node(int32_t index, const Eigen::Vector3f& x, const uint16_t* begin, const uint16_t* end,
                  Held* held) const {
    if (begin == end) return {};
    const CompositionTree::Node& n = m_.tree.nodes[index];
    if (end - begin == 1) {
      const FieldValue v = LeafFieldValue(m_, leaves_[*begin], *begin, x);
      return v.f != 0 || *begin + 1 == n.hi ? v : FieldValue{};
    }
    if (n.left < 0) return LeafFieldValue(m_, leaves_[n.leaf], n.leaf, x);  // (candidates are distinct)
    const uint16_t* split = begin;
    while (split != end && *split < m_.tree.nodes[n.left].hi) ++split;
    float* slot = nullptr;  // this operator's held controller, if it has one
    if (held && split != begin && split != end) slot = held->controls + held->next_slot++;
    const bool record = held && held->record;
    const FieldValue a = Node(n.left, x, begin, split, held);
    const FieldValue b = Node(n.right, x, split, end, held);
    if (a.f == 0 || b.f == 0) {
      if (slot && record) *slot = std::numeric_limits<float>::quiet_NaN();
      return a.f == 0 ? b : a;  // exact: g(0, f) = f
    }
    FieldValue r;
    if (n.op == JointOperator::kUnion) return a.f >= b.f ? a : b;
    float d = 0;
    if (slot && !record && !std::isnan(*slot)) {
      d = *slot;
    } else if (n.op != JointOperator::kCleanUnion) {
      const float na = a.g.squaredNorm(), nb = b.g.squaredNorm(), dot = a.g.dot(b.g);
      // A null gradient (a child's contact valley, a critical point): the controller's d(0).
      // Contact is 0 up to 90°, i.e. wherever the gradients' dot product is not negative.
      if (na > 0 && nb > 0 && (n.op == JointOperator::kBulge || dot < 0)) {
        const double alpha = std::acos(std::clamp(double(dot) / std::sqrt(double(na) * nb), -1.0, 1.0));
        d = float(n.op == JointOperator::kBulge ? BulgeController(alpha) : ContactController(alpha));
      }
    }
    if (slot && record) *slot = d;
    const OperatorGrid& op = n.op == JointOperator::kBulge ? m_.operators->bulge : m_.operators->contact;
    float g1, g2;
    r.f = op.Sample(a.f, b.f, d, &g1, &g2);
    r.g = g1 * a.g + g2 * b.g;  // ∂g/∂d·∇d neglected unless held (spec pitfall 17)
    return r;
  }

  const ImplicitModel& m_;
  const LeafFrame* leaves_;
};

inline void MakeLeafFrames(const ImplicitModel& m, std::span<const Affine34d> transforms, std::vector<LeafFrame>& out) {
  out.resize(m.fields.size());
  for (size_t i = 0; i < m.fields.size(); ++i) {
    const Affine34d& t = transforms[m.fields[i].joint];
    const Affine34d inv = Inverse(t);
    LeafFrame& lf = out[i];
    lf.inv_linear = inv.leftCols<3>().cast<float>();
    lf.inv_translation = inv.col(3).cast<float>();
    lf.gradient = inv.leftCols<3>().transpose().cast<float>();
    lf.center = (t.leftCols<3>() * m.sphere_centers[i].cast<double>() + t.col(3)).cast<float>();
    const double s = std::cbrt(std::abs(t.leftCols<3>().determinant()));
    lf.radius2 = float(std::pow(s * m.sphere_radii[i], 2));
  }
}

// The device layout of a moved field (core/implicit/device_layout.h).
inline void WriteLeafFrame(const LeafFrame& lf, float* out) {
  using namespace implicit_device;
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 3; ++c) {
      out[kLeafInvLinear + 3 * r + c] = lf.inv_linear(r, c);
      out[kLeafGradient + 3 * r + c] = lf.gradient(r, c);
    }
    out[kLeafInvTranslation + r] = lf.inv_translation[r];
    out[kLeafCenter + r] = lf.center[r];
  }
  out[kLeafRadius2] = lf.radius2;
  out[kLeafRadius2 + 1] = out[kLeafRadius2 + 2] = out[kLeafRadius2 + 3] = 0;
}

// The fields whose (posed) bounding sphere contains x, in leaf order. Where more than
// kMaxCandidates spheres contain x (a hand: fingers, metacarpals and the forearm overlap up to 13
// deep), the kMaxCandidates whose fields are largest at x, then the nearest (deepest in their
// spheres), then the lowest index. Leaving out a field that is 0 at x changes nothing (the
// composition's g(0, f) = f); spheres are loose, so most of them are. Ranking by depth in the
// sphere alone (until 2026-11-28) let a big sphere whose field is 0 there push out a node's
// own field: 108 of the SuperCages Arm's 2 089 nodes and 130 of BCN_Epileptic's 2 633 lost it at
// rest, 183 and 466 composed a wrong value there, and the composed field jumped wherever the
// ranking changed. The device's FindCandidates (gpu/implicit/implicit.cuh) is the same.
inline int Candidates(const ImplicitModel& m, const std::vector<LeafFrame>& leaves, const Eigen::Vector3f& x,
                      uint16_t* out) {
  int count = 0, inside = 0;
  for (size_t i = 0; i < leaves.size(); ++i) {
    if ((x - leaves[i].center).squaredNorm() - leaves[i].radius2 <= 0) {
      if (count < kMaxCandidates) out[count++] = uint16_t(i);
      ++inside;
    }
  }
  if (inside <= kMaxCandidates) return count;  // already in leaf order
  float value[kMaxCandidates], excess[kMaxCandidates];
  count = 0;
  for (size_t i = 0; i < leaves.size(); ++i) {
    const float e = (x - leaves[i].center).squaredNorm() - leaves[i].radius2;
    if (e > 0) continue;
    const float f = LeafFieldValue(m, leaves[i], i, x).f;
    if (count < kMaxCandidates) {
      out[count] = uint16_t(i);
      value[count] = f;
      excess[count++] = e;
      continue;
    }
    int worst = 0;  // the smallest value, then the largest excess (the later index on a tie)
    for (int k = 1; k < kMaxCandidates; ++k) {
      if (value[k] < value[worst] || (value[k] == value[worst] && excess[k] >= excess[worst])) worst = k;
    }
    if (f > value[worst] || (f == value[worst] && e < excess[worst])) {
      out[worst] = uint16_t(i);
      value[worst] = f;
      excess[worst] = e;
    }
  }
  for (int a = 1; a < count; ++a) {  // at most kMaxCandidates: insertion sort
    for (int b = a; b > 0 && out[b - 1] > out[b]; --b) std::swap(out[b - 1], out[b]);
  }
  return count;
}

inline Eigen::Vector3f P3(const std::vector<float>& xyz, size_t i) { return Eigen::Vector3f(xyz[3 * i], xyz[3 * i + 1], xyz[3 * i + 2]); }


}  // namespace sinew::implicit_internal
