// The device program of implicit skinning: the passes of one frame, in order, for every
// implicit session of a batch at once, written once for CUDA (runtime/cuda_api.cu: a kernel per
// pass, implicit/program_cuda.cu) and the CPU emulation (a loop per pass, implicit/device_program.cc).
//
// Everything that must see all nodes of a session finished before it goes on (a Newton step
// before the relaxation reads the neighbours, each CG product before its dot product) is a
// separate pass; a pass over a batch is one kernel, so the device needs no grid-wide barrier.
// What needs only its own node and its component's sums (the CG's update after α) can follow a
// reduction inside the reduction's kernel, which holds a whole component in one block (Chain).
// Sessions differ in iteration counts, sub-steps and convergence: the host launches the batch's
// maximum and each item skips what it does not need, deciding from its own state and from the
// scalars that single-thread reductions write between passes.
//
// An Exec provides:
//   Nodes(pass)     pass(batch, item, node) for every node of every item
//   Vertices(pass)  pass(batch, item, vertex) for every vertex of every item
//   Chain(stages...) per item and connected component c of its mesh, one ChainStage after
//                   another: its pass on each of the component's nodes, then, when
//                   red.Active(c), the sum (or max, red.kMax) of red.Value over them (each
//                   node's value read after its pass), in the fixed order described at
//                   kReduceLanes, handed to red.Finish(c). The stages equal separate passes and
//                   reductions for passes that read and write only their own node (one kernel:
//                   blocks per item and component). A reduction alone is Chain(Sum(red)), which
//                   the program writes Reduce(red) (CountingExec, the exec it runs on)
//   Any(pred)       whether pred(batch, item, c) holds for some connected component c of some
//                   item, once the passes before it are done (the host waits for them; an exec
//                   that cannot tell answers true)
//   AnyNode(pred)   the same for pred(batch, item, node) and some node of some item
//   Retire(t, s)    item t's sub-steps end before sub-step s (its passes from there on do
//                   nothing), in order with the passes launched before and after it
//
// The elastic method's loops ask every kNewtonCheck projection steps whether a node still
// marches, before a relaxation round, every kCgCheck CG iterations and before a round's
// fractional step; they end once the rest is a no-op for every item (the conditions they
// test only ever turn false within their loop). A batch then launches the iterations its items
// use, not the maxima (about 13 500 launches a sub-step), with the same results bit for bit
// (tests/gpu: an elastic session equals itself run with every pass, ImplicitConfig::
// device_every_pass; elastic sessions whose loops end at different counts share batches and
// equal their solo runs). On an H200 that halved the elastic frame on the 4.2k limb and on
// BCN_Epileptic. The history-independent loop asks nothing: it is short, and there the host's
// waits cost more than the launches they saved (16 BCN_Epileptic sessions 2.9 -> 4.5 ms a step).
#pragma once

#include <string>
#include <vector>

#include "gpu/implicit/implicit.cuh"
#include "gpu/implicit/program_counts.h"
#include "gpu/runtime/device_api.h"

namespace sinew::gpu {

// The batch's maxima, which bound the host's loops, and its grid sizes.
struct ImplicitLimits {
  uint32_t nodes = 0;     // of all items (the node grid)
  uint32_t vertices = 0;  // of all items (the vertex grid)
  uint32_t components = 0;  // the most connected components of one item's mesh
  uint32_t largest_component = 0;  // the most nodes of one component of any item
  uint32_t max_iterations = 0;
  uint32_t smoothing_iterations = 0;
  uint32_t relaxation_iterations = 0;
  uint32_t relaxation_rounds = 0;
  uint32_t substeps = 0;
  bool history_independent = false;  // some item runs "implicit"
  bool elastic = false;              // some item runs "elastic-implicit"
  bool every_pass = false;           // some item asks for every pass (ImplicitConfig::device_every_pass)
  bool separate_passes = false;      // some item asks for them (ImplicitConfig::device_separate_passes)
};

// Reductions: lane t of kReduceLanes accumulates a component's nodes t, t + kReduceLanes, ...
// (ImplicitModelView::component_nodes, ascending); then lanes are added pairwise, halving (CUDA:
// blocks per item over its components, shared memory). The emulation follows the
// same order, so both give the same sums. Values are ≥ 0, so 0 is the identity of max too.
inline constexpr uint32_t kReduceLanes = imp::kReduceLanes;
template <bool kMax>
SINEW_HD double ReduceCombine(double a, double b) {
  if constexpr (kMax) return a < b ? b : a;
  else return a + b;
}

// The elastic loops chain the steps after their reductions (Exec::Chain) when no component of
// the batch has more nodes than this; larger ones run them as passes of their own. A chain runs a
// component on one multiprocessor, its passes over the whole device: on an H200 (2026-12-04,
// sinew-bench-implicit) chaining made BCN_Epileptic's elastic frame 26 % shorter (largest
// component 1 004 nodes; 6 383 passes a frame instead of 13 826) and left the 4 200-node limb's
// where it was (88 against 84 ms, one component); larger components were not measured.
inline constexpr uint32_t kChainMaxComponent = 2048;

// A stage of Exec::Chain: `pass` (a node pass that reads and writes only its own node and the
// component's scalars), then `red` (a reduction, run when red.Active(c) after the pass).
template <class Pass, class Reduction>
struct ChainStage {
  Pass pass;
  Reduction red;
};
struct NoPass {
  SINEW_HD void operator()(const ImplicitBatch&, const ImplicitItem&, uint32_t) const {}
};
struct NoReduction {
  static constexpr bool kMax = false;
  SINEW_HD bool Active(const ImplicitBatch&, const ImplicitItem&, uint32_t) const { return false; }
  SINEW_HD double Value(const ImplicitBatch&, const ImplicitItem&, uint32_t) const { return 0; }
  SINEW_HD void Finish(const ImplicitBatch&, const ImplicitItem&, uint32_t, double) const {}
};
template <class Pass, class Reduction>
ChainStage<Pass, Reduction> Stage(const Pass& pass, const Reduction& red) {
  return {pass, red};
}
template <class Pass>
ChainStage<Pass, NoReduction> Stage(const Pass& pass) {
  return {pass, NoReduction{}};
}
template <class Reduction>
ChainStage<NoPass, Reduction> Sum(const Reduction& red) {
  return {NoPass{}, red};
}

namespace passes {

// ---- history-independent implicit skinning (ImplicitDeformer::Deform) -------------------------

// DQS start, candidate fields, every tracked node marching.
struct IsStart {
  SINEW_HD void operator()(const ImplicitBatch& b, const ImplicitItem& it, uint32_t i) const {
    if (it.settings.elastic) return;
    const ImplicitModelView& m = it.model;
    const ImplicitStateView& s = it.state;
    const float* step = StepParams(b, it, 0);
    const V3 p = SkinVertex(m, DualQuats(step), m.vertex_of_node[i]);
    Store3(s.pos, i, p);
    s.state[i] = imp::kFree;
    s.cand_count[i] = 0;
    if (!m.in_field[i]) return;
    s.cand_count[i] = uint8_t(FindCandidates(m, Leaves(it, step), p, s.cand + size_t(i) * imp::kMaxCandidates));
    s.fresh[i] = 1;
    s.state[i] = imp::kMarching;
  }
};

// Newton step `iteration` of (sub)step `step` for the marching nodes of one method's items.
SINEW_HD bool Marches(const ImplicitItem& it, uint32_t step, uint32_t iteration, bool elastic, uint32_t i) {
  return bool(it.settings.elastic) == elastic && step < it.substeps && iteration < it.settings.max_iterations &&
         it.state.state[i] == imp::kMarching;
}
struct Newton {
  uint32_t step, iteration;
  bool elastic;
  SINEW_HD void operator()(const ImplicitBatch& b, const ImplicitItem& it, uint32_t i) const {
    if (Marches(it, step, iteration, elastic, i)) NewtonStep(it, Leaves(it, StepParams(b, it, step)), i);
  }
};

// Tangential relaxation after every second step (Jacobi: targets, then moves).
struct RelaxTargets {
  uint32_t iteration;
  SINEW_HD void operator()(const ImplicitBatch&, const ImplicitItem& it, uint32_t i) const {
    if (it.settings.elastic || iteration >= it.settings.max_iterations) return;
    if (it.state.state[i] == imp::kMarching) RelaxTarget(it, i);
  }
};
struct RelaxMoves {
  uint32_t iteration;
  SINEW_HD void operator()(const ImplicitBatch&, const ImplicitItem& it, uint32_t i) const {
    if (it.settings.elastic || iteration >= it.settings.max_iterations) return;
    if (it.state.state[i] != imp::kMarching) return;
    Store3(it.state.pos, i, Load3(it.state.tmp, i));
    it.state.fresh[i] = 1;  // the tangential move is not a monotonicity break
  }
};

// A node that marched out of its own bone's field keeps its DQS position [S].
struct IsGuard {
  SINEW_HD void operator()(const ImplicitBatch& b, const ImplicitItem& it, uint32_t i) const {
    const ImplicitModelView& m = it.model;
    if (it.settings.elastic || !m.in_field[i]) return;
    const float* step = StepParams(b, it, 0);
    if (!LeftOwnField(m, Leaves(it, step), i, Load3(it.state.pos, i))) return;
    Store3(it.state.pos, i, SkinVertex(m, DualQuats(step), m.vertex_of_node[i]));
    it.state.state[i] = imp::kReseeded;
  }
};

// Contact smoothing (Eq. 4.8): β = 1 at contacts, diffused over the one-rings, then
// β-weighted Laplacian steps.
struct BetaStart {
  SINEW_HD void operator()(const ImplicitBatch&, const ImplicitItem& it, uint32_t i) const {
    if (it.settings.elastic || it.settings.smoothing_iterations == 0) return;
    it.state.beta[i] = it.state.state[i] == imp::kContact ? 1.f : 0.f;
  }
};
static_assert(imp::kBetaDiffusion % 2 == 0, "the diffused weights must end in `beta`");
struct BetaDiffuse {
  int k;  // even: beta -> beta_next; odd: back
  SINEW_HD void operator()(const ImplicitBatch&, const ImplicitItem& it, uint32_t i) const {
    if (it.settings.elastic || it.settings.smoothing_iterations == 0) return;
    const ImplicitModelView& m = it.model;
    const float* src = k % 2 == 0 ? it.state.beta : it.state.beta_next;
    float* dst = k % 2 == 0 ? it.state.beta_next : it.state.beta;
    if (it.state.state[i] == imp::kContact) {
      dst[i] = 1;
      return;
    }
    float sum = src[i];
    const uint32_t r0 = m.ring_offsets[i], r1 = m.ring_offsets[i + 1];
    for (uint32_t r = r0; r < r1; ++r) sum += src[m.ring[r]];
    dst[i] = sum / float(1 + r1 - r0);
  }
};
SINEW_HD bool Smoothed(const ImplicitItem& it, uint32_t i) {
  return it.state.beta[i] > imp::kBetaMin && it.state.state[i] != imp::kFree &&
         it.model.ring_offsets[i + 1] > it.model.ring_offsets[i];
}
struct SmoothTargets {
  uint32_t k;
  SINEW_HD void operator()(const ImplicitBatch&, const ImplicitItem& it, uint32_t i) const {
    if (it.settings.elastic || k >= it.settings.smoothing_iterations || !Smoothed(it, i)) return;
    const ImplicitModelView& m = it.model;
    V3 c{0, 0, 0};
    const uint32_t r0 = m.ring_offsets[i], r1 = m.ring_offsets[i + 1];
    for (uint32_t r = r0; r < r1; ++r) c = c + Load3(it.state.pos, m.ring[r]);
    const float deg = float(r1 - r0);
    c = V3{c.x / deg, c.y / deg, c.z / deg};
    const float beta = it.state.beta[i];
    Store3(it.state.tmp, i, (1 - beta) * Load3(it.state.pos, i) + beta * c);
  }
};
struct SmoothMoves {
  uint32_t k;
  SINEW_HD void operator()(const ImplicitBatch&, const ImplicitItem& it, uint32_t i) const {
    if (it.settings.elastic || k >= it.settings.smoothing_iterations || !Smoothed(it, i)) return;
    Store3(it.state.pos, i, Load3(it.state.tmp, i));
  }
};

// ---- elastic implicit skinning (ElasticImplicitDeformer::SubStep) -----------------------------

SINEW_HD bool StepLive(const ImplicitItem& it, uint32_t step) { return it.settings.elastic && step < it.substeps; }
// The relaxation's scalars are per connected component c of the mesh (ImplicitModel::
// component_nodes): each component is its own minimisation, as on the CPU.
SINEW_HD uint32_t Component(const ImplicitItem& it, uint32_t i) { return it.model.component_of_node[i]; }
SINEW_HD bool RoundLive(const ImplicitItem& it, uint32_t step, uint32_t round, uint32_t c) {
  return StepLive(it, step) && round < it.state.scalars[c].rounds;
}
SINEW_HD bool CgLive(const ImplicitItem& it, uint32_t step, uint32_t round, uint32_t k, uint32_t c) {
  return RoundLive(it, step, round, c) && k < it.state.scalars[c].cg_limit;
}

// How much the two fields' gradients oppose, in [0, 1] (ContactGate in tracking.cc).
SINEW_HD float ContactGate(const ImplicitItem& it, const FieldValue& mine, const FieldValue& other) {
  if (!(other.f > 0)) return 0.f;
  const float gm = Norm(mine.g), go = Norm(other.g);
  if (!(gm > 0 && go > 0)) return 0.f;
  return imp::ContactGateOfCosine(Dot(mine.g, other.g) / (gm * go), it.settings.contact_gate_open);
}
// The ARAP residual of ring entry r of node i at the positions (ArapEdge in tracking.cc).
SINEW_HD V3 ArapEdge(const ImplicitItem& it, uint32_t i, uint32_t r) {
  const ImplicitModelView& m = it.model;
  const ImplicitStateView& s = it.state;
  const uint32_t j = m.ring[r];
  const float* ri = s.rot + 9 * size_t(i);
  const float* rj = s.rot + 9 * size_t(j);
  float half[9];
  for (int k = 0; k < 9; ++k) half[k] = 0.5f * (ri[k] + rj[k]);
  return (Load3(s.pos, i) - Load3(s.pos, j)) - Mul3(half, Load3(m.rest, i) - Load3(m.rest, j));
}
// a_i · b_i as a reduction's value.
SINEW_HD double NodeDot(const float* a, const float* b, uint32_t i) { return double(Dot(Load3(a, i), Load3(b, i))); }

// Each component's scalars, set by the thread of its first node.
struct StepBegin {
  uint32_t step;
  SINEW_HD void operator()(const ImplicitBatch&, const ImplicitItem& it, uint32_t i) const {
    if (!StepLive(it, step)) return;
    const uint32_t c = Component(it, i);
    if (it.model.component_nodes[it.model.component_offsets[c]] != i) return;
    it.state.scalars[c].rounds = it.settings.relaxation_rounds;
    it.state.scalars[c].at_limit = 1;
    it.state.scalars[c].trust = 1;
  }
};

// Rigid predictor (tracked nodes follow their own bone; the others take DQS), candidates,
// marching. Sub-step 0 of a reset frame starts from the rest state.
struct StepStart {
  uint32_t step;
  SINEW_HD void operator()(const ImplicitBatch& b, const ImplicitItem& it, uint32_t i) const {
    if (!StepLive(it, step)) return;
    const ImplicitModelView& m = it.model;
    const ImplicitStateView& s = it.state;
    if (step == 0 && it.reset) {
      Store3(s.pos, i, Load3(m.rest, i));
      s.state[i] = m.in_field[i] ? imp::kConverged : imp::kFree;
    }
    const float* p = StepParams(b, it, step);
    s.cand_count[i] = 0;
    if (!m.in_field[i]) {
      Store3(s.pos, i, SkinVertex(m, DualQuats(p), m.vertex_of_node[i]));
      return;
    }
    const V3 x = Affine3(Deltas(it, p) + imp::kJointFloats * uint32_t(m.bone[i]), Load3(s.pos, i));
    Store3(s.pos, i, x);
    s.cand_count[i] = uint8_t(FindCandidates(m, Leaves(it, p), x, s.cand + size_t(i) * imp::kMaxCandidates));
    s.fresh[i] = 1;
    s.state[i] = imp::kMarching;
  }
};

struct StepRotations {
  uint32_t step;
  SINEW_HD void operator()(const ImplicitBatch& b, const ImplicitItem& it, uint32_t i) const {
    if (!StepLive(it, step)) return;
    BlendRotation(it.model, DualQuats(StepParams(b, it, step)), i, it.settings.harmonic_rotations != 0,
                  it.state.rot + 9 * size_t(i));
  }
};

// The relaxation energy (ElasticImplicitDeformer::Relax): free nodes, stiffness and the own-side
// terms' contact gates.
struct RelaxSetup {
  uint32_t step;
  SINEW_HD void operator()(const ImplicitBatch& b, const ImplicitItem& it, uint32_t i) const {
    if (!StepLive(it, step)) return;
    const ImplicitModelView& m = it.model;
    const ImplicitStateView& s = it.state;
    s.free_nodes[i] = 0;
    s.node_trust[i] = 1;
    float* gate = s.e_gate + size_t(i) * imp::kMaxCandidates;
    for (int c = 0; c < imp::kMaxCandidates; ++c) gate[c] = 0;
    s.e_k[i] = 0;
    if (!m.in_field[i] || m.ring_offsets[i] == m.ring_offsets[i + 1]) return;
    const float* leaves = Leaves(it, StepParams(b, it, step));
    const V3 x = Load3(s.pos, i);
    EvalHeldAt(it, leaves, i, x, true);  // records the held controllers; null gradients are free too (Relax)
    s.free_nodes[i] = 1;
    float d = 0;
    for (uint32_t r = m.ring_offsets[i]; r < m.ring_offsets[i + 1]; ++r) d += m.cot[r];
    s.e_k[i] = imp::kSurfaceStiffness * d / m.typical_gradient2;
    // The pieces either side of the bone's joints and the largest other field (Relax in tracking.cc).
    const int32_t own = m.own_leaf[i];
    const uint16_t* cand = s.cand + size_t(i) * imp::kMaxCandidates;
    const FieldValue mine = LeafValue(m, leaves, uint32_t(own), x);
    FieldValue value[imp::kMaxCandidates];
    int largest = -1;  // the largest other candidate (the first of equals, above 0)
    for (int c = 0; c < s.cand_count[i]; ++c) {
      if (cand[c] == own) continue;
      value[c] = LeafValue(m, leaves, cand[c], x);
      if (value[c].f > (largest < 0 ? 0.f : value[largest].f)) largest = c;
    }
    for (int c = 0; c < s.cand_count[i]; ++c) {
      if (cand[c] != own && (c == largest || imp::AdjacentFields(m.parent_field, cand[c], own))) {
        gate[c] = ContactGate(it, mine, value[c]);
      }
    }
    // Every third piece read at the node's DQS position too (Relax in tracking.cc).
    const V3 y = SkinVertex(m, DualQuats(StepParams(b, it, step)), m.vertex_of_node[i]);
    const V3 rest = Load3(m.rest, i);
    FieldValue mine_y{0, {0, 0, 0}};
    bool have_mine_y = false;
    for (int c = 0; c < s.cand_count[i]; ++c) {
      if (cand[c] == own || imp::AdjacentFields(m.parent_field, cand[c], own)) continue;
      const FieldValue other_y = LeafValue(m, leaves, cand[c], y);
      if (!(other_y.f > 0) || SampleGrid(m, cand[c], rest, nullptr) > imp::kThirdPieceRestField) continue;
      if (!have_mine_y) {
        mine_y = LeafValue(m, leaves, uint32_t(own), y);
        have_mine_y = true;
      }
      const float g = ContactGate(it, mine_y, other_y);
      gate[c] = gate[c] > g ? gate[c] : g;
    }
  }
};

// Each node's energy at the positions and its terms (Energy): the sub-step's start (round =
// kStart), round r's full step, or the fraction of it the round takes (fraction_pending).
inline constexpr uint32_t kStart = ~0u;
SINEW_HD bool FractionLive(const ImplicitItem& it, uint32_t step, uint32_t round, uint32_t c) {
  return RoundLive(it, step, round, c) && it.state.scalars[c].fraction_pending != 0;
}
SINEW_HD bool EnergyLive(const ImplicitItem& it, uint32_t step, uint32_t round, bool fraction, uint32_t c) {
  return round == kStart ? StepLive(it, step)
                         : fraction ? FractionLive(it, step, round, c) : RoundLive(it, step, round, c);
}
struct EnergyTerms {
  uint32_t step, round;
  bool fraction = false;  // the energy at the fraction of the step (RelaxFraction)
  SINEW_HD void operator()(const ImplicitBatch& b, const ImplicitItem& it, uint32_t i) const {
    if (!EnergyLive(it, step, round, fraction, Component(it, i))) return;
    const ImplicitModelView& m = it.model;
    const ImplicitStateView& s = it.state;
    const V3 x = Load3(s.pos, i);
    double e = 0;
    float ring_weight = 0;  // the cotangent row sum (ImplicitModel::cot_sum), in its order
    for (uint32_t r = m.ring_offsets[i]; r < m.ring_offsets[i + 1]; ++r) {
      const V3 d = ArapEdge(it, i, r);
      e += 0.25 * double(m.cot[r]) * double(Dot(d, d));
      ring_weight += m.cot[r];
    }
    if (s.free_nodes[i]) {
      const float* leaves = Leaves(it, StepParams(b, it, step));
      const FieldValue v = EvalHeldAt(it, leaves, i, x, false);
      const float c = v.f - m.iso[i];
      // One own-side term per gated candidate (Energy in tracking.cc), in candidate order.
      V3 gh{0, 0, 0};
      float* cm = s.e_cm + 6 * size_t(i);
      for (int q = 0; q < 6; ++q) cm[q] = 0;
      double hh = 0;
      const int32_t own = m.own_leaf[i];
      const float so = m.depth_scale[own];  // depths on one scale
      const float* gate = s.e_gate + size_t(i) * imp::kMaxCandidates;
      const uint16_t* cand = s.cand + size_t(i) * imp::kMaxCandidates;
      FieldValue mine{0, {0, 0, 0}};
      bool have_mine = false;
      for (int k = 0; k < s.cand_count[i]; ++k) {
        if (!(gate[k] > 0)) continue;
        if (!have_mine) {
          mine = LeafValue(m, leaves, uint32_t(own), x);
          have_mine = true;
        }
        const int32_t leaf = cand[k];
        const FieldValue other = LeafValue(m, leaves, uint32_t(leaf), x);
        const float sx = m.depth_scale[leaf];
        const float h = imp::OwnSideDepth(so, mine.f, sx, other.f) + imp::kOwnSideSlack +
                        imp::RestExcess(m.rest_pair_leaf + imp::kRestPairs * size_t(i),
                                        m.rest_pair_excess + imp::kRestPairs * size_t(i), leaf);
        if (h < 0) {
          const V3 d = so * mine.g - sx * other.g;
          gh = gh + (gate[k] * h) * d;
          cm[0] += gate[k] * d.x * d.x;
          cm[1] += gate[k] * d.x * d.y;
          cm[2] += gate[k] * d.x * d.z;
          cm[3] += gate[k] * d.y * d.y;
          cm[4] += gate[k] * d.y * d.z;
          cm[5] += gate[k] * d.z * d.z;
          hh += double(gate[k]) * h * h;
        }
      }
      Store3(s.e_g, i, v.g);
      Store3(s.e_gh, i, gh);
      s.e_c[i] = c;
      s.e_field[i] = 0.5 * double(s.e_k[i]) * (double(c) * c + hh);
      e += s.e_field[i];
      // The spring towards DQS (imp::kDqsSpring).
      const V3 y = x - SkinVertex(m, DualQuats(StepParams(b, it, step)), m.vertex_of_node[i]);
      e += 0.5 * double(imp::kDqsSpring * ring_weight) * double(Dot(y, y));
      // The preconditioner's block for the next round's CG iterations (RelaxPrecondition).
      const float gv[3] = {v.g.x, v.g.y, v.g.z};
      imp::RelaxBlockInverse(imp::RelaxDiagonal(ring_weight), s.e_k[i], gv, cm, s.e_pre + imp::kRelaxBlockFloats * size_t(i));
    }
    s.e_node[i] = e;
  }
};
// E: the start's value; at round r's full step, the fraction a of it the round takes
// (implicit_device::RelaxStepFraction; below 1 the fraction's energy follows, fraction_pending); at
// that fraction, E. A round ends by updating the caps' trust (NextTrust) and, when no node moved
// by the settings' relax_tolerance, the rounds.
struct EnergySum {
  static constexpr bool kMax = false;
  uint32_t step, round;
  bool fraction = false;
  SINEW_HD bool Active(const ImplicitBatch&, const ImplicitItem& it, uint32_t c) const { return EnergyLive(it, step, round, fraction, c); }
  SINEW_HD double Value(const ImplicitBatch&, const ImplicitItem& it, uint32_t i) const { return it.state.e_node[i]; }
  SINEW_HD void Finish(const ImplicitBatch&, const ImplicitItem& it, uint32_t c, double e) const {
    ImplicitScalars& sc = it.state.scalars[c];
    if (round == kStart) {
      sc.energy = e;
      return;
    }
    if (!fraction) {
      sc.step = imp::RelaxStepFraction(sc.energy, sc.slope, e);
      if (sc.step < 1) {
        sc.fraction_pending = 1;
        return;
      }
    }
    sc.energy = e;
    sc.fraction_pending = 0;
    sc.trust = imp::NextTrust(sc.trust, sc.step);
    if (sc.step * sc.dmax < it.settings.relax_tolerance) {
      sc.rounds = round + 1;
      sc.at_limit = 0;
    }
  }
};

// The gradient of E, and the start of the preconditioned CG on H δ = −∇E.
struct RelaxGradient {
  uint32_t step, round;
  SINEW_HD void operator()(const ImplicitBatch& b, const ImplicitItem& it, uint32_t i) const {
    if (!RoundLive(it, step, round, Component(it, i))) return;
    const ImplicitModelView& m = it.model;
    const ImplicitStateView& s = it.state;
    Store3(s.cg_x, i, {0, 0, 0});
    Store3(s.e_grad, i, {0, 0, 0});
    Store3(s.cg_r, i, {0, 0, 0});
    Store3(s.e_z, i, {0, 0, 0});
    Store3(s.cg_d, i, {0, 0, 0});
    if (!s.free_nodes[i]) return;
    V3 acc{0, 0, 0};
    float ring_weight = 0;  // in the CPU's cot_sum order
    for (uint32_t r = m.ring_offsets[i]; r < m.ring_offsets[i + 1]; ++r) {
      acc = acc + m.cot[r] * ArapEdge(it, i, r);
      ring_weight += m.cot[r];
    }
    const float k = s.e_k[i];
    acc = acc + k * (s.e_c[i] * Load3(s.e_g, i) + Load3(s.e_gh, i));
    const V3 y = Load3(s.pos, i) - SkinVertex(m, DualQuats(StepParams(b, it, step)), m.vertex_of_node[i]);
    acc = acc + (imp::kDqsSpring * ring_weight) * y;
    Store3(s.e_grad, i, acc);
    const V3 res{-acc.x, -acc.y, -acc.z};
    Store3(s.cg_r, i, res);
    const V3 z = RelaxPrecondition(it, i, res);
    Store3(s.e_z, i, z);
    Store3(s.cg_d, i, z);
  }
};

// r·z: starts the round's conjugate gradient.
struct CgStart {
  static constexpr bool kMax = false;
  uint32_t step, round;
  SINEW_HD bool Active(const ImplicitBatch&, const ImplicitItem& it, uint32_t c) const { return RoundLive(it, step, round, c); }
  SINEW_HD double Value(const ImplicitBatch&, const ImplicitItem& it, uint32_t i) const {
    return NodeDot(it.state.cg_r, it.state.e_z, i);
  }
  SINEW_HD void Finish(const ImplicitBatch&, const ImplicitItem& it, uint32_t c, double rz) const {
    ImplicitScalars& sc = it.state.scalars[c];
    sc.rr = rz;
    sc.stop = imp::kCgStop * rz;
    sc.cg_limit = rz > sc.stop && rz > 0 ? it.settings.relaxation_iterations : 0;
  }
};

struct CgProduct {  // q = H d
  uint32_t step, round, k;
  SINEW_HD void operator()(const ImplicitBatch&, const ImplicitItem& it, uint32_t i) const {
    if (CgLive(it, step, round, k, Component(it, i))) Store3(it.state.cg_q, i, RelaxHessian(it, it.state.cg_d, i));
  }
};
struct CgCurvature {  // d·q -> α (a non-positive curvature ends the solve)
  static constexpr bool kMax = false;
  uint32_t step, round, k;
  SINEW_HD bool Active(const ImplicitBatch&, const ImplicitItem& it, uint32_t c) const { return CgLive(it, step, round, k, c); }
  SINEW_HD double Value(const ImplicitBatch&, const ImplicitItem& it, uint32_t i) const {
    return NodeDot(it.state.cg_d, it.state.cg_q, i);
  }
  SINEW_HD void Finish(const ImplicitBatch&, const ImplicitItem& it, uint32_t c, double dq) const {
    ImplicitScalars& sc = it.state.scalars[c];
    if (!(dq > 0)) sc.cg_limit = k;
    else sc.alpha = float(sc.rr / dq);
  }
};
struct CgUpdate {  // x += α d, r −= α q, z = M⁻¹ r
  uint32_t step, round, k;
  SINEW_HD void operator()(const ImplicitBatch&, const ImplicitItem& it, uint32_t i) const {
    const uint32_t c = Component(it, i);
    if (!CgLive(it, step, round, k, c)) return;
    const ImplicitStateView& s = it.state;
    const float alpha = s.scalars[c].alpha;
    Store3(s.cg_x, i, Load3(s.cg_x, i) + alpha * Load3(s.cg_d, i));
    const V3 r = Load3(s.cg_r, i) - alpha * Load3(s.cg_q, i);
    Store3(s.cg_r, i, r);
    Store3(s.e_z, i, s.free_nodes[i] ? RelaxPrecondition(it, i, r) : V3{0, 0, 0});
  }
};
struct CgResidual {  // r·z -> β; converged: this iteration is the last
  static constexpr bool kMax = false;
  uint32_t step, round, k;
  SINEW_HD bool Active(const ImplicitBatch&, const ImplicitItem& it, uint32_t c) const { return CgLive(it, step, round, k, c); }
  SINEW_HD double Value(const ImplicitBatch&, const ImplicitItem& it, uint32_t i) const {
    return NodeDot(it.state.cg_r, it.state.e_z, i);
  }
  SINEW_HD void Finish(const ImplicitBatch&, const ImplicitItem& it, uint32_t c, double rz) const {
    ImplicitScalars& sc = it.state.scalars[c];
    sc.beta = float(rz / sc.rr);
    sc.rr = rz;
    if (!(rz > sc.stop && rz > 0)) sc.cg_limit = k + 1;
  }
};
struct CgDirection {  // d = z + β d
  uint32_t step, round, k;
  SINEW_HD void operator()(const ImplicitBatch&, const ImplicitItem& it, uint32_t i) const {
    const uint32_t c = Component(it, i);
    if (!CgLive(it, step, round, k, c)) return;
    const ImplicitStateView& s = it.state;
    Store3(s.cg_d, i, Load3(s.e_z, i) + s.scalars[c].beta * Load3(s.cg_d, i));
  }
};

// Each node's step capped at its step cap; the positions before it kept.
struct RelaxCap {
  uint32_t step, round;
  SINEW_HD void operator()(const ImplicitBatch&, const ImplicitItem& it, uint32_t i) const {
    const uint32_t c = Component(it, i);
    if (!RoundLive(it, step, round, c)) return;
    const ImplicitStateView& s = it.state;
    Store3(s.x_old, i, Load3(s.pos, i));
    if (!s.free_nodes[i]) return;
    V3 dx = Load3(s.cg_x, i);
    const float len = Norm(dx), cap = it.state.scalars[c].trust * it.model.step_cap[i] * s.node_trust[i];
    if (len > cap) dx = (cap / len) * dx;
    Store3(s.cg_x, i, dx);
    // From round kNodeTrustRound − 1 on, the node's field terms at the start and their model
    // along its step (RelaxNodeTrust).
    if (round + 1 < imp::kNodeTrustRound) return;
    s.e_field0[i] = s.e_field[i];
    const float g[3] = {s.e_g[3 * size_t(i)], s.e_g[3 * size_t(i) + 1], s.e_g[3 * size_t(i) + 2]};
    const float gh[3] = {s.e_gh[3 * size_t(i)], s.e_gh[3 * size_t(i) + 1], s.e_gh[3 * size_t(i) + 2]};
    const float d[3] = {dx.x, dx.y, dx.z};
    imp::NodeStepModel(s.e_k[i], s.e_c[i], g, gh, s.e_cm + 6 * size_t(i), d, s.e_pred + 2 * size_t(i),
                       s.e_pred + 2 * size_t(i) + 1);
  }
};
// Each node's trust after the round's full step, from its round kNodeTrustRound − 1 on
// (implicit_device::NextNodeTrust; RelaxComponent in tracking.cc).
struct RelaxNodeTrust {
  uint32_t step, round;
  SINEW_HD void operator()(const ImplicitBatch&, const ImplicitItem& it, uint32_t i) const {
    if (round + 1 < imp::kNodeTrustRound || !RoundLive(it, step, round, Component(it, i))) return;
    const ImplicitStateView& s = it.state;
    if (!s.free_nodes[i]) return;
    s.node_trust[i] = imp::NextNodeTrust(s.node_trust[i], s.e_field0[i], s.e_field[i], s.e_pred[2 * size_t(i)],
                                         s.e_pred[2 * size_t(i) + 1]);
  }
};
struct RelaxLongest {  // the largest capped step
  static constexpr bool kMax = true;
  uint32_t step, round;
  SINEW_HD bool Active(const ImplicitBatch&, const ImplicitItem& it, uint32_t c) const { return RoundLive(it, step, round, c); }
  SINEW_HD double Value(const ImplicitBatch&, const ImplicitItem& it, uint32_t i) const {
    return it.state.free_nodes[i] ? double(Norm(Load3(it.state.cg_x, i))) : 0.0;
  }
  SINEW_HD void Finish(const ImplicitBatch&, const ImplicitItem& it, uint32_t c, double dmax) const { it.state.scalars[c].dmax = float(dmax); }
};
struct RelaxSlope {  // ∇E · δ; not a descent direction: the rounds end here
  static constexpr bool kMax = false;
  uint32_t step, round;
  SINEW_HD bool Active(const ImplicitBatch&, const ImplicitItem& it, uint32_t c) const { return RoundLive(it, step, round, c); }
  SINEW_HD double Value(const ImplicitBatch&, const ImplicitItem& it, uint32_t i) const {
    return NodeDot(it.state.e_grad, it.state.cg_x, i);
  }
  SINEW_HD void Finish(const ImplicitBatch&, const ImplicitItem& it, uint32_t c, double slope) const {
    ImplicitScalars& sc = it.state.scalars[c];
    sc.slope = slope;
    if (!(slope < 0)) {
      sc.rounds = round;
      sc.at_limit = 0;
    }
  }
};
// The round's full step, x_old + δ, and the fraction it takes, x_old + a δ (EnergySum).
struct RelaxFull {
  uint32_t step, round;
  SINEW_HD void operator()(const ImplicitBatch&, const ImplicitItem& it, uint32_t i) const {
    if (!RoundLive(it, step, round, Component(it, i)) || !it.state.free_nodes[i]) return;
    const ImplicitStateView& s = it.state;
    Store3(s.pos, i, Load3(s.x_old, i) + Load3(s.cg_x, i));
  }
};
// ImplicitConfig::average_stalled_relaxations: a component whose rounds reached the limit ends
// at the mean of its last two iterates (x_old: the last round's start; as in tracking.cc).
struct RelaxAverage {
  uint32_t step;
  SINEW_HD void operator()(const ImplicitBatch&, const ImplicitItem& it, uint32_t i) const {
    if (!StepLive(it, step) || !it.settings.average_stalled || !it.state.free_nodes[i]) return;
    if (!it.state.scalars[Component(it, i)].at_limit) return;
    const ImplicitStateView& s = it.state;
    Store3(s.pos, i, 0.5f * (Load3(s.x_old, i) + Load3(s.pos, i)));
  }
};
struct RelaxFraction {
  uint32_t step, round;
  SINEW_HD void operator()(const ImplicitBatch&, const ImplicitItem& it, uint32_t i) const {
    const uint32_t c = Component(it, i);
    if (!FractionLive(it, step, round, c) || !it.state.free_nodes[i]) return;
    const ImplicitStateView& s = it.state;
    Store3(s.pos, i, Load3(s.x_old, i) + s.scalars[c].step * Load3(s.cg_x, i));
  }
};

// Lost track [S]: out of its own field: restart from DQS.
struct LostTrack {
  uint32_t step;
  SINEW_HD void operator()(const ImplicitBatch& b, const ImplicitItem& it, uint32_t i) const {
    const ImplicitModelView& m = it.model;
    if (!StepLive(it, step) || !m.in_field[i]) return;
    const float* p = StepParams(b, it, step);
    const V3 x = Load3(it.state.pos, i);
    if (LeftOwnField(m, Leaves(it, p), i, x)) {
      Store3(it.state.pos, i, SkinVertex(m, DualQuats(p), m.vertex_of_node[i]));
      it.state.state[i] = imp::kReseeded;
    }
  }
};

struct StepStates {
  uint32_t step;
  SINEW_HD void operator()(const ImplicitBatch& b, const ImplicitItem& it, uint32_t i) const {
    const ImplicitModelView& m = it.model;
    uint8_t& state = it.state.state[i];
    if (!StepLive(it, step) || !m.in_field[i] || state == imp::kReseeded) return;
    if (state != imp::kMarching && state != imp::kConverged) return;
    const FieldValue v = EvalAt(it, Leaves(it, StepParams(b, it, step)), i, Load3(it.state.pos, i));
    state = fabsf(v.f - m.iso[i]) < imp::kStateTolerance ? imp::kConverged : imp::kMarching;
  }
};

// ---- both: nodes to vertices --------------------------------------------------------------------

// Every vertex takes its node's position and state; an untracked vertex of the
// history-independent method keeps its own DQS position.
struct Scatter {
  SINEW_HD void operator()(const ImplicitBatch& b, const ImplicitItem& it, uint32_t v) const {
    const ImplicitModelView& m = it.model;
    const uint32_t node = m.node_of_vertex[v];
    const uint8_t state = it.state.state[node];
    V3 p{0, 0, 0};
    if (m.follow_offsets[node] != m.follow_offsets[node + 1]) {
      // Skin inside the rest skin is carried by the skin around it (FollowPosition in
      // core/implicit/implicit_skinning.h), with the rotations of the last sub-step's blends.
      // (Sub-steps 0: retired before its first, its rows unused; step 0's are within its own.)
      const float* dq = DualQuats(StepParams(b, it, it.settings.elastic && it.substeps > 0 ? it.substeps - 1 : 0));
      const V3 rest_i = Load3(m.rest, node);
      for (uint32_t k = m.follow_offsets[node]; k < m.follow_offsets[node + 1]; ++k) {
        const uint32_t j = m.follow_source[k];
        float r[9];
        BlendRotation(m, dq, j, false, r);
        p = p + m.follow_weight[k] * (Load3(it.state.pos, j) + Mul3(r, rest_i - Load3(m.rest, j)));
      }
    } else if (!it.settings.elastic && state == imp::kFree) {
      p = SkinVertex(m, DualQuats(StepParams(b, it, 0)), v);
    } else {
      p = Load3(it.state.pos, node);
    }
    Store3(b.out, it.vertex_offset + v, p);
    b.states[it.vertex_offset + v] = state;
  }
};

// ---- the elastic loops' early ends (Any, above) ------------------------------------------
inline constexpr uint32_t kNewtonCheck = 8;
inline constexpr uint32_t kCgCheck = 4;
struct AnyMarching {  // the Newton steps
  uint32_t step, iteration;
  bool elastic;
  SINEW_HD bool operator()(const ImplicitBatch&, const ImplicitItem& it, uint32_t i) const {
    return Marches(it, step, iteration, elastic, i);
  }
};
struct AnyRound {
  uint32_t step, round;
  SINEW_HD bool operator()(const ImplicitBatch&, const ImplicitItem& it, uint32_t c) const { return RoundLive(it, step, round, c); }
};
struct AnyCg {
  uint32_t step, round, k;
  SINEW_HD bool operator()(const ImplicitBatch&, const ImplicitItem& it, uint32_t c) const { return CgLive(it, step, round, k, c); }
};
struct AnyFraction {
  uint32_t step, round;
  SINEW_HD bool operator()(const ImplicitBatch&, const ImplicitItem& it, uint32_t c) const { return FractionLive(it, step, round, c); }
};

}  // namespace passes

// The elastic loops' stops (ProgramStops): an item whose caller has given up is retired where
// it is asked, before a relaxation round or a sub-step, and its frame ends there; its positions
// and tracking state are then part way through the frame (the host starts its session's next
// frame from rest). On the device a round's check follows the round's wait for Any; with every
// pass launched (ImplicitConfig::device_every_pass) nothing waits, so the asks run ahead of the
// device and stop little.
//
// Only items still running are asked: one whose own sub-steps are done (a history-independent
// item, or an elastic one with fewer sub-steps than the batch's longest) has its whole frame, and
// is neither stopped nor reported so. `host_items` (the item table as packed; null: not known)
// gives each item's sub-steps. Until 2026-12-07 every item was asked: a finished one given up
// later had its sub-steps raised to the step it was asked in, and Scatter read that step's
// parameters, past the item's (another frame's, or past the batch's input), and reported a
// complete frame stopped.
template <class Exec>
class ImplicitStops {
 public:
  ImplicitStops(const Exec& x, ProgramStops* stops, uint32_t items, const ImplicitItem* host_items)
      : x_(x), stops_(stops), retired_(stops ? items : 0, false) {
    if (stops_ == nullptr) return;
    steps_.assign(items, ~0u);
    for (uint32_t t = 0; host_items != nullptr && t < items; ++t) {
      steps_[t] = host_items[t].settings.elastic ? host_items[t].substeps : 0;
    }
  }
  // Asks the items still running and retires those given up in sub-step `step`. True when no
  // item of the batch is running any more (the loops may end).
  bool AllRetired(uint32_t step) {
    if (stops_ == nullptr) return false;
    bool running = false;
    for (uint32_t t = 0; t < retired_.size(); ++t) {
      if (retired_[t] || step >= steps_[t]) continue;
      if (!stops_->GivenUp(t)) {
        running = true;
        continue;
      }
      x_.Retire(t, step);
      retired_[t] = true;
      stops_->Stopped(t, step);
    }
    return !running;
  }

 private:
  const Exec& x_;
  ProgramStops* stops_;
  std::vector<bool> retired_;
  std::vector<uint32_t> steps_;  // each item's sub-steps (~0: not known)
};

// An Exec that counts what it is asked to run (ImplicitProgramCounts) and gives the passes
// Reduce.
template <class Exec>
class CountingExec {
 public:
  explicit CountingExec(const Exec& x) : x_(x) {}
  template <class Pass>
  void Nodes(const Pass& pass) const {
    ++passes_;
    x_.Nodes(pass);
  }
  template <class Pass>
  void Vertices(const Pass& pass) const {
    ++passes_;
    x_.Vertices(pass);
  }
  template <class Reduction>
  void Reduce(const Reduction& r) const {
    Chain(Sum(r));
  }
  template <class... Stages>
  void Chain(const Stages&... stages) const {
    ++passes_;
    x_.Chain(stages...);
  }
  template <class Pred>
  bool Any(const Pred& pred) const {
    ++passes_;
    ++waits_;
    return x_.Any(pred);
  }
  template <class Pred>
  bool AnyNode(const Pred& pred) const {
    ++passes_;
    ++waits_;
    return x_.AnyNode(pred);
  }
  void Retire(uint32_t t, uint32_t step) const {
    ++passes_;
    x_.Retire(t, step);
  }
  ImplicitProgramCounts counts() const { return {passes_, waits_}; }

 private:
  const Exec& x_;
  mutable uint64_t passes_ = 0, waits_ = 0;
};

// The passes of one frame of every implicit item of a batch (RunImplicitProgram).
template <class Exec>
void RunImplicitPasses(const Exec& x, const ImplicitLimits& l, uint32_t items, ProgramStops* stops,
                       const ImplicitItem* host_items) {
  using namespace passes;
  if (l.history_independent) {
    x.Nodes(IsStart{});
    for (uint32_t k = 0; k < l.max_iterations; ++k) {
      x.Nodes(Newton{0, k, false});
      if (k % 2 == 1) {
        x.Nodes(RelaxTargets{k});
        x.Nodes(RelaxMoves{k});
      }
    }
    x.Nodes(IsGuard{});
    if (l.smoothing_iterations > 0) {
      x.Nodes(BetaStart{});
      for (int k = 0; k < imp::kBetaDiffusion; ++k) x.Nodes(BetaDiffuse{k});
      for (uint32_t k = 0; k < l.smoothing_iterations; ++k) {
        x.Nodes(SmoothTargets{k});
        x.Nodes(SmoothMoves{k});
      }
    }
  }
  if (l.elastic) {
    const bool chain = !l.separate_passes && l.largest_component <= kChainMaxComponent;
    ImplicitStops<Exec> stop(x, stops, items, host_items);
    for (uint32_t s = 0; s < l.substeps; ++s) {
      if (stop.AllRetired(s)) break;
      x.Nodes(StepBegin{s});
      x.Nodes(StepStart{s});
      for (uint32_t k = 0; k < l.max_iterations; ++k) {
        if (!l.every_pass && k > 0 && k % kNewtonCheck == 0 && !x.AnyNode(AnyMarching{s, k, true})) break;
        x.Nodes(Newton{s, k, true});
      }
      x.Nodes(StepRotations{s});
      x.Nodes(RelaxSetup{s});
      x.Nodes(EnergyTerms{s, kStart});
      x.Reduce(EnergySum{s, kStart});
      for (uint32_t r = 0; r < l.relaxation_rounds; ++r) {
        if (!l.every_pass && r > 0 && !x.Any(AnyRound{s, r})) break;
        if (stop.AllRetired(s)) break;
        x.Nodes(RelaxGradient{s, r});
        x.Reduce(CgStart{s, r});
        for (uint32_t k = 0; k < l.relaxation_iterations; ++k) {
          if (!l.every_pass && k % kCgCheck == 0 && !x.Any(AnyCg{s, r, k})) break;
          x.Nodes(CgProduct{s, r, k});  // reads the neighbours' directions: a pass of its own
          if (!chain) {
            x.Reduce(CgCurvature{s, r, k});
            x.Nodes(CgUpdate{s, r, k});
            x.Reduce(CgResidual{s, r, k});
            x.Nodes(CgDirection{s, r, k});
          } else {
            x.Chain(Sum(CgCurvature{s, r, k}), Stage(CgUpdate{s, r, k}, CgResidual{s, r, k}),
                    Stage(CgDirection{s, r, k}));
          }
        }
        if (!chain) {
          x.Nodes(RelaxCap{s, r});
          x.Reduce(RelaxLongest{s, r});
          x.Reduce(RelaxSlope{s, r});
          x.Nodes(RelaxFull{s, r});
        } else {
          x.Chain(Stage(RelaxCap{s, r}, RelaxLongest{s, r}), Sum(RelaxSlope{s, r}), Stage(RelaxFull{s, r}));
        }
        x.Nodes(EnergyTerms{s, r});
        x.Reduce(EnergySum{s, r});
        if (l.every_pass || r + 1 >= imp::kNodeTrustRound) x.Nodes(RelaxNodeTrust{s, r});
        if (l.every_pass || x.Any(AnyFraction{s, r})) {
          x.Nodes(RelaxFraction{s, r});
          x.Nodes(EnergyTerms{s, r, true});
          x.Reduce(EnergySum{s, r, true});
        }
      }
      x.Nodes(RelaxAverage{s});
      x.Nodes(LostTrack{s});
      x.Nodes(StepStates{s});
    }
  }
  x.Vertices(Scatter{});
}

// One frame of every implicit item of a batch; `stops` (null: none) may end elastic items early.
// Adds what it asked of `x` to ImplicitProgramCountsSoFar.
template <class Exec>
void RunImplicitProgram(const Exec& x, const ImplicitLimits& l, uint32_t items, ProgramStops* stops,
                        const ImplicitItem* host_items) {
  const CountingExec<Exec> counted(x);
  RunImplicitPasses(counted, l, items, stops, host_items);
  AddImplicitProgramCounts(counted.counts());
}

// The program's passes on a CUDA stream (implicit/program_cuda.cu; only in CUDA builds).
// `b.items` are ImplicitItems, `b.limits` an ImplicitLimits.
bool RunImplicitCuda(void* cuda_stream, const ProgramBatch& b, std::string* error);

}  // namespace sinew::gpu
