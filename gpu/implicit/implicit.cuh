// GPU twin of core/implicit's per-frame tracking (tracking.cc, field_eval.h): the per-node and
// per-vertex functions of both implicit skinning methods, compiled for CUDA kernels and,
// unchanged, for the CPU emulation of a device. Each function mirrors its CPU original line by
// line (the same operations and stop rules, software trilinear reads, double where the CPU uses
// double); only float rounding differs (Eigen adds three terms in another order), which the
// history-independent method's Newton steps absorb and the elastic method's CG amplifies no more
// than any rounding does (docs/implicit-skinning.md). CUDA compiles it without contracted
// multiply-adds (gpu/CMakeLists.txt), so a device gives the CPU emulation's results bit for bit
// (tests/gpu/implicit_gpu_test.cc). The pass sequence that calls them is in program.cuh.
//
// Data on the device:
//   ImplicitModelView  per rig and operator choice, shared by sessions (core's ImplicitModel
//                      flattened: bone grids, composition tree, operator grids, welded nodes,
//                      one-rings, MVC and cotangent weights)
//   ImplicitStateView  per session: positions and marching state per node (the elastic
//                      method's positions persist between frames), CG vectors, scalars
//   ImplicitItem       one session's frame inside a batch: both views, its settings and where
//                      its nodes, vertices and parameters sit in the batch
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "core/implicit/device_layout.h"
#include "gpu/dqs/dqs.cuh"
#include "gpu/runtime/hd.h"

namespace sinew::gpu {

namespace imp = ::sinew::implicit_device;

// A composition tree deeper than this does not run on the device (evaluation keeps an explicit
// stack per thread); the upload refuses it with FAILED_PRECONDITION.
inline constexpr int kMaxTreeDepth = 48;

struct alignas(16) Float4 {
  float x, y, z, w;
};

// A bone field's 32³ grid: cells (∂x f, ∂y f, ∂z f, f), x fastest, from `first_cell`.
struct GridHeader {
  float lo[3], hi[3], inv_step[3];
  int32_t n;
  uint32_t first_cell;
  uint32_t unused;
};

struct TreeNodeDev {
  int32_t left, right, leaf;  // leaf: field index (leaves), -1 inner
  uint16_t lo, hi;            // leaves [lo, hi) below
  uint32_t op;                // JointOperator (1 union, 2 clean union, 3 contact, 4 bulge)
};

struct ImplicitModelView {
  // The rig's skinning data (dual quaternion skinning of the start and of untracked nodes).
  const float* rest_vertices;
  const uint32_t* offsets;
  const uint16_t* joints;
  const float* weights;
  // Bone fields, tree and the shared operator grids (129 × 129 × 33 cells of (g, ∂1g, ∂2g, 0)).
  const GridHeader* grids;
  const Float4* cells;
  const TreeNodeDev* tree;
  const Float4* contact;
  const Float4* bulge;
  // Welded nodes.
  const uint32_t* node_of_vertex;
  const uint32_t* vertex_of_node;
  const float* rest;  // 3 per node
  const float* iso;
  const uint8_t* in_field;
  const int32_t* own_leaf;
  const int32_t* bone;
  const float* step_cap;
  const int32_t* rest_pair_leaf;   // kRestPairs per node (ImplicitModel::rest_pair_leaf)
  const float* rest_pair_excess;
  const float* depth_scale;        // per field (ImplicitModel::depth_scale)
  const int32_t* parent_field;     // per field (ImplicitModel::parent_field)
  const uint32_t* ring_offsets;
  const uint32_t* ring;
  const uint8_t* ring_closed;
  const float* mvc;
  const float* cot;
  // Bone heat weights per node (ImplicitModel::heat), for the elastic rotations.
  const uint32_t* heat_offsets;
  const uint16_t* heat_joints;
  const float* heat_weights;
  // Connected components of the welded mesh (ImplicitModel::component_nodes): the elastic
  // relaxation's reductions and scalars are per component.
  const uint32_t* component_offsets;  // component_count + 1
  const uint32_t* component_nodes;    // each component's nodes, ascending
  const uint32_t* component_of_node;
  // Skin inside the rest skin (ImplicitModel::follow_offsets): per node (CSR) the nodes that
  // carry it and their weights (FollowPosition in core/implicit/implicit_skinning.h).
  const uint32_t* follow_offsets;  // node_count + 1
  const uint32_t* follow_source;
  const float* follow_weight;
  uint32_t component_count;
  uint32_t largest_component;  // the most nodes of one component
  uint32_t field_count, joint_count, node_count, vertex_count;
  int32_t root, op_n, op_nd;
  float gradient_floor2;
  float typical_gradient2;
};

// Scalars of one session's elastic relaxation in one connected component of its mesh, written
// by one thread between passes.
struct ImplicitScalars {
  double rr, stop;
  double energy, slope;  // the relaxation energy at the positions; the round's step · gradient
  float alpha, beta;
  float dmax;            // the round's largest (capped) step
  uint32_t rounds;       // relaxation rounds of this sub-step (cut short at convergence)
  uint32_t cg_limit;     // CG iterations of this round (cut short at convergence)
  float trust;           // the step caps' scale (implicit_device::NextTrust), 1 at a sub-step's start
  float step;            // the fraction of the round's step it takes (RelaxStepFraction)
  uint32_t fraction_pending;  // 1: the round takes a fraction of its step, whose energy is still
                              // to come (EnergySum)
  uint32_t at_limit;          // 1 until the rounds end by the tolerance or a non-descent step
                              // (RelaxAverage)
};

struct ImplicitStateView {
  float* pos;       // 3 per node
  float* tmp;       // 3 per node (Jacobi targets)
  float* prev_pos;  // 3 per node
  float* g_prev;    // 3 per node
  float* r_prev;
  float* s_prev;
  uint8_t* fresh;
  uint8_t* state;   // VertexState; kMaxIterations while marching
  uint16_t* cand;   // kMaxCandidates per node
  uint8_t* cand_count;
  float* beta;      // history-independent: contact smoothing weights (two buffers)
  float* beta_next;
  float* rot;       // elastic: 9 per node (row-major)
  uint8_t* free_nodes;
  // elastic relaxation (ElasticImplicitDeformer::Relax): per node the field gradient, Σ_o γ_o
  // h_o ∇h_o, the energy's gradient, the preconditioned residual, the positions before the
  // round's step (3 each); Σ_o γ_o ∇h_o ∇h_oᵀ (6: xx, xy, xz, yy, yz, zz); the field residual
  // and the stiffness k; the node's energy.
  float* e_g;
  float* e_gh;
  float* e_grad;
  float* e_z;
  float* x_old;
  float* e_cm;
  float* e_pre;     // kRelaxBlockFloats per node: the inverse of its 3x3 block of the relaxation's
                    // matrix at the positions EnergyTerms last saw (RelaxBlockInverse)
  float* e_c;
  float* e_k;
  float* e_gate;    // kMaxCandidates per node: each candidate's own-side contact gate γ (0: no term), held
  float* controls;  // kMaxCandidates − 1 per node: the composition's controllers, held (EvalHeldAt)
  double* e_node;
  // Per-node trust (implicit_device::NextNodeTrust): the caps' scale; the node's field terms'
  // energy at the last evaluation and at the round's start; their model's change and size along
  // its step (2 per node).
  float* node_trust;
  double* e_field;
  double* e_field0;
  double* e_pred;
  float* cg_x;      // the CG vectors, 3 per node
  float* cg_r;
  float* cg_d;
  float* cg_q;
  ImplicitScalars* scalars;
};

struct ImplicitSettings {
  float sigma, cos_contact;
  uint32_t max_iterations, smoothing_iterations, relaxation_iterations, relaxation_rounds;
  uint32_t elastic;
  uint32_t every_pass;  // ImplicitConfig::device_every_pass
  uint32_t separate_passes;  // ImplicitConfig::device_separate_passes
  uint32_t harmonic_rotations;  // ImplicitConfig::rotation_weights is kHarmonic
  float contact_gate_open;      // ImplicitConfig::contact_gate_open
  uint32_t average_stalled;     // ImplicitConfig::average_stalled_relaxations
  float relax_tolerance;        // a round that moves no node farther than this is the last
                                // (ImplicitConfig::relaxation_tolerance × the mean edge)
};

struct ImplicitItem {
  ImplicitModelView model;
  ImplicitStateView state;
  ImplicitSettings settings;
  uint32_t node_offset;             // first node of this item in the batch's node grid
  uint32_t implicit_vertex_offset;  // first vertex in the batch's grid of implicit vertices
  uint32_t vertex_offset;           // first vertex in the batch's output
  uint32_t param_offset;            // first float of its parameters in the batch's parameter data
  uint32_t substeps;                // parameter header: sub-steps, reset
  uint32_t reset;
};

// What every pass gets: the batch's implicit items and buffers.
struct ImplicitBatch {
  const ImplicitItem* items;
  uint32_t count;
  const float* params;
  float* out;       // 3 floats per batch vertex
  uint8_t* states;  // 1 byte per batch vertex
};

// ---------------------------------------------------------------------------------------------
// Small vector helpers (float, like the CPU's Eigen::Vector3f).

struct V3 {
  float x, y, z;
};
SINEW_HD V3 operator+(V3 a, V3 b) { return {a.x + b.x, a.y + b.y, a.z + b.z}; }
SINEW_HD V3 operator-(V3 a, V3 b) { return {a.x - b.x, a.y - b.y, a.z - b.z}; }
SINEW_HD V3 operator*(float s, V3 a) { return {s * a.x, s * a.y, s * a.z}; }
SINEW_HD float Dot(V3 a, V3 b) { return a.x * b.x + a.y * b.y + a.z * b.z; }
SINEW_HD float Norm(V3 a) { return sqrtf(Dot(a, a)); }
// Indices widened before the multiply (a rig of 2^32 / 3 vertices or more wrapped, 2026-12-07).
SINEW_HD V3 Load3(const float* p, uint32_t i) { return {p[size_t{3} * i], p[size_t{3} * i + 1], p[size_t{3} * i + 2]}; }
SINEW_HD void Store3(float* p, uint32_t i, V3 v) {
  p[size_t{3} * i] = v.x;
  p[size_t{3} * i + 1] = v.y;
  p[size_t{3} * i + 2] = v.z;
}
// m: 3x3 row-major.
SINEW_HD V3 Mul3(const float* m, V3 v) {
  return {m[0] * v.x + m[1] * v.y + m[2] * v.z, m[3] * v.x + m[4] * v.y + m[5] * v.z,
          m[6] * v.x + m[7] * v.y + m[8] * v.z};
}
// m: 3x4 row-major affine.
SINEW_HD V3 Affine3(const float* m, V3 v) {
  return {m[0] * v.x + m[1] * v.y + m[2] * v.z + m[3], m[4] * v.x + m[5] * v.y + m[6] * v.z + m[7],
          m[8] * v.x + m[9] * v.y + m[10] * v.z + m[11]};
}
SINEW_HD float MinF(float a, float b) { return b < a ? b : a; }
SINEW_HD float MaxF(float a, float b) { return a < b ? b : a; }
SINEW_HD int MinI(int a, int b) { return b < a ? b : a; }

// ---------------------------------------------------------------------------------------------
// Parameters of a (sub)frame (core/implicit/device_layout.h).

SINEW_HD const float* StepParams(const ImplicitBatch& b, const ImplicitItem& it, uint32_t step) {
  const bool elastic = it.settings.elastic != 0;
  return b.params + it.param_offset + imp::kHeaderFloats +
         size_t(step) * imp::StepFloats(it.model.joint_count, it.model.field_count, elastic);
}
SINEW_HD const float* DualQuats(const float* step) { return step; }
SINEW_HD const float* Deltas(const ImplicitItem& it, const float* step) {
  return step + imp::kJointFloats * it.model.joint_count;
}
SINEW_HD const float* StepTransforms(const ImplicitItem& it, const float* step) {
  return step + 2 * imp::kJointFloats * it.model.joint_count;
}
SINEW_HD const float* Leaves(const ImplicitItem& it, const float* step) {
  return step + (it.settings.elastic ? 3 : 1) * imp::kJointFloats * it.model.joint_count;
}

// Dual quaternion skinning of rig vertex v (gpu/dqs).
SINEW_HD V3 SkinVertex(const ImplicitModelView& m, const float* dq, uint32_t v) {
  float o[3];
  DqsVertex(m.rest_vertices, m.offsets, m.joints, m.weights, dq, v, o);
  return {o[0], o[1], o[2]};
}

// ---------------------------------------------------------------------------------------------
// Fields (FieldGrid::Sample, OperatorGrid::Sample, the controllers, Evaluator).

SINEW_HD float SampleGrid(const ImplicitModelView& m, uint32_t leaf, V3 x, V3* gradient) {
  const GridHeader& g = m.grids[leaf];
  if (gradient) *gradient = {0, 0, 0};
  // Written so that a NaN coordinate also counts as outside.
  if (!(x.x >= g.lo[0] && x.y >= g.lo[1] && x.z >= g.lo[2] && x.x <= g.hi[0] && x.y <= g.hi[1] && x.z <= g.hi[2])) {
    return 0;
  }
  const float u[3] = {(x.x - g.lo[0]) * g.inv_step[0], (x.y - g.lo[1]) * g.inv_step[1], (x.z - g.lo[2]) * g.inv_step[2]};
  const int n = g.n;
  int i0[3];
  float t[3];
  for (int a = 0; a < 3; ++a) {
    i0[a] = MinI(static_cast<int>(u[a]), n - 2);
    t[a] = MinF(u[a] - float(i0[a]), 1.0f);
  }
  float acc[4] = {0, 0, 0, 0};
  for (int dz = 0; dz < 2; ++dz) {
    for (int dy = 0; dy < 2; ++dy) {
      for (int dx = 0; dx < 2; ++dx) {
        const float w = (dx ? t[0] : 1 - t[0]) * (dy ? t[1] : 1 - t[1]) * (dz ? t[2] : 1 - t[2]);
        const Float4 c = m.cells[g.first_cell + (size_t(i0[2] + dz) * n + size_t(i0[1] + dy)) * n + size_t(i0[0] + dx)];
        acc[0] += w * c.x;
        acc[1] += w * c.y;
        acc[2] += w * c.z;
        acc[3] += w * c.w;
      }
    }
  }
  if (gradient) *gradient = {acc[0], acc[1], acc[2]};
  return acc[3];
}

SINEW_HD Float4 Lerp4(Float4 a, Float4 b, float t) {
  return {a.x + t * (b.x - a.x), a.y + t * (b.y - a.y), a.z + t * (b.z - a.z), a.w + t * (b.w - a.w)};
}

// x in [0, 1], a NaN read as 0 (OperatorGrid::Sample: a NaN cast to int is undefined).
SINEW_HD float Unit(float x) { return x > 0 ? (x < 1 ? x : 1.f) : 0.f; }

SINEW_HD float SampleOperator(const Float4* cells, int n, int nd, float f1, float f2, float d, float* g1, float* g2) {
  const float s = float(n - 1), sd = float(nd - 1);
  const float u = Unit(f1) * s, v = Unit(f2) * s, w = Unit(d) * sd;
  const int i = MinI(int(u), n - 2), j = MinI(int(v), n - 2), k = MinI(int(w), nd - 2);
  const float tu = u - float(i), tv = v - float(j), tw = w - float(k);
  const size_t plane = size_t(n) * n, row = size_t(n);
  const Float4* c = cells + (size_t(k) * n + size_t(j)) * n + size_t(i);
  const Float4 a0 = Lerp4(Lerp4(c[0], c[1], tu), Lerp4(c[row], c[row + 1], tu), tv);
  const Float4 a1 = Lerp4(Lerp4(c[plane], c[plane + 1], tu), Lerp4(c[plane + row], c[plane + row + 1], tu), tv);
  const Float4 r = Lerp4(a0, a1, tw);
  *g1 = r.y;
  *g2 = r.z;
  return r.x;
}

SINEW_HD double Smoothstep01(double x) {
  x = x < 0 ? 0 : x > 1 ? 1 : x;
  return x * x * (3 - 2 * x);
}
// ContactController / BulgeController (core/implicit/operators.cc).
SINEW_HD double ContactAmount(double alpha) {
  const double half = 1.57079632679489661923;
  return alpha <= half ? 0.0 : Smoothstep01((alpha - half) / half);
}
SINEW_HD double BulgeAmount(double alpha) { return Smoothstep01(alpha / 1.57079632679489661923); }

struct FieldValue {
  float f;
  V3 g;
};

// A bone field moved by its joint: sampled at T⁻¹x, gradient mapped by A⁻ᵀ.
SINEW_HD FieldValue LeafValue(const ImplicitModelView& m, const float* leaves, uint32_t leaf, V3 x) {
  const float* lf = leaves + imp::kLeafFloats * leaf;
  const V3 xr = Mul3(lf + imp::kLeafInvLinear, x) + V3{lf[imp::kLeafInvTranslation], lf[imp::kLeafInvTranslation + 1],
                                                       lf[imp::kLeafInvTranslation + 2]};
  V3 gr;
  const float f = SampleGrid(m, leaf, xr, &gr);
  return {f, Mul3(lf + imp::kLeafGradient, gr)};
}

// The controller of an inner node: the opening its operator takes from the gradients' angle.
SINEW_HD float Controller(uint32_t op, const FieldValue& a, const FieldValue& b) {
  float d = 0;
  if (op != 2) {  // contact, bulge: the controller of the gradients' angle
    const float na = Dot(a.g, a.g), nb = Dot(b.g, b.g), dot = Dot(a.g, b.g);
    if (na > 0 && nb > 0 && (op == 4 || dot < 0)) {
      double c = double(dot) / sqrt(double(na) * nb);
      c = c < -1.0 ? -1.0 : c > 1.0 ? 1.0 : c;
      const double alpha = acos(c);
      d = float(op == 4 ? BulgeAmount(alpha) : ContactAmount(alpha));
    }
  }
  return d;
}

// One inner node of the composition tree applied to its children's values. `control`, when
// not null, is the inner node's held controller slot (Evaluator::EvalHeld in
// core/implicit/field_eval.h): `record` writes the live value there (NaN where a child is 0),
// otherwise a held value that is not NaN replaces the live one.
SINEW_HD FieldValue Compose(const ImplicitModelView& m, uint32_t op, const FieldValue& a, const FieldValue& b,
                            float* control = nullptr, bool record = false) {
  if (a.f == 0 || b.f == 0) {
    if (control && record) *control = NAN;
    return a.f == 0 ? b : a;  // exact: g(0, f) = f
  }
  if (op == 1) return a.f >= b.f ? a : b;  // union
  const float d = control && !record && *control == *control ? *control : Controller(op, a, b);  // not NaN
  if (control && record) *control = d;
  float g1, g2;
  FieldValue r;
  r.f = SampleOperator(op == 4 ? m.bulge : m.contact, m.op_n, m.op_nd, a.f, b.f, d, &g1, &g2);
  r.g = g1 * a.g + g2 * b.g;
  return r;
}

// The composed field at x, evaluating only the subtrees that hold one of the candidate fields
// (the CPU's recursion, left before right, with an explicit stack). A subtree that holds one
// candidate is that leaf's value, 0 where it is 0 unless the leaf is the subtree's last (as
// Evaluator::Node in core/implicit/field_eval.h), without walking its chain. With `controls`
// (kMaxCandidates − 1 slots), the inner nodes whose two children both hold a candidate take
// slots in the CPU's order (pre-order) and hold their controllers as Compose describes.
SINEW_HD FieldValue EvalField(const ImplicitModelView& m, const float* leaves, V3 x, const uint16_t* cand, int count,
                              float* controls = nullptr, bool record = false) {
  FieldValue zero{0, {0, 0, 0}};
  if (m.root < 0 || count == 0) return zero;
  int32_t nodes[kMaxTreeDepth];
  uint8_t stage[kMaxTreeDepth];
  int8_t slots[kMaxTreeDepth];
  FieldValue values[kMaxTreeDepth];
  int sp = 0, vp = 0, next_slot = 0;
  auto holds = [&](int32_t node) {
    const TreeNodeDev& t = m.tree[node];
    bool active = false;
    for (int k = 0; k < count; ++k) active |= (cand[k] >= t.lo && cand[k] < t.hi);
    return active;
  };
  nodes[0] = m.root;
  stage[0] = 0;
  sp = 1;
  while (sp > 0) {
    const TreeNodeDev& t = m.tree[nodes[sp - 1]];
    if (stage[sp - 1] == 0) {
      int held = 0, first = -1;
      for (int k = 0; k < count; ++k) {
        if (cand[k] >= t.lo && cand[k] < t.hi) {
          if (held++ == 0) first = cand[k];
        }
      }
      if (held == 0) {
        --sp;
        values[vp++] = zero;
        continue;
      }
      if (held == 1) {
        --sp;
        const FieldValue v = LeafValue(m, leaves, uint32_t(first), x);
        values[vp++] = v.f != 0 || first + 1 == int(t.hi) ? v : zero;
        continue;
      }
      if (t.left < 0) {
        --sp;
        values[vp++] = LeafValue(m, leaves, uint32_t(t.leaf), x);
        continue;
      }
      slots[sp - 1] = int8_t(controls && holds(t.left) && holds(t.right) ? next_slot++ : -1);
      stage[sp - 1] = 1;
      nodes[sp] = t.left;
      stage[sp++] = 0;
      continue;
    }
    if (stage[sp - 1] == 1) {
      stage[sp - 1] = 2;
      nodes[sp] = t.right;
      stage[sp++] = 0;
      continue;
    }
    --sp;
    const FieldValue b = values[--vp];
    const FieldValue a = values[--vp];
    values[vp++] = Compose(m, t.op, a, b, slots[sp] >= 0 ? controls + slots[sp] : nullptr, record);
  }
  return values[0];
}

// The fields whose posed bounding sphere contains x, in leaf order; where more than
// kMaxCandidates spheres contain x, those whose fields are largest at x, then the deepest in
// their spheres, then the lowest index (Candidates in core/implicit/field_eval.h).
SINEW_HD int FindCandidates(const ImplicitModelView& m, const float* leaves, V3 x, uint16_t* out) {
  const uint32_t fields = m.field_count;
  auto excess_of = [&](uint32_t i) {
    const float* lf = leaves + imp::kLeafFloats * i;
    const V3 dx = x - V3{lf[imp::kLeafCenter], lf[imp::kLeafCenter + 1], lf[imp::kLeafCenter + 2]};
    return Dot(dx, dx) - lf[imp::kLeafRadius2];
  };
  int count = 0, inside = 0;
  for (uint32_t i = 0; i < fields; ++i) {
    if (excess_of(i) <= 0) {
      if (count < imp::kMaxCandidates) out[count++] = uint16_t(i);
      ++inside;
    }
  }
  if (inside <= imp::kMaxCandidates) return count;
  float value[imp::kMaxCandidates], excess[imp::kMaxCandidates];
  count = 0;
  for (uint32_t i = 0; i < fields; ++i) {
    const float e = excess_of(i);
    if (e > 0) continue;
    const float f = LeafValue(m, leaves, i, x).f;
    if (count < imp::kMaxCandidates) {
      out[count] = uint16_t(i);
      value[count] = f;
      excess[count++] = e;
      continue;
    }
    int worst = 0;
    for (int k = 1; k < imp::kMaxCandidates; ++k) {
      if (value[k] < value[worst] || (value[k] == value[worst] && excess[k] >= excess[worst])) worst = k;
    }
    if (f > value[worst] || (f == value[worst] && e < excess[worst])) {
      out[worst] = uint16_t(i);
      value[worst] = f;
      excess[worst] = e;
    }
  }
  for (int a = 1; a < count; ++a) {
    for (int b = a; b > 0 && out[b - 1] > out[b]; --b) {
      const uint16_t t = out[b - 1];
      out[b - 1] = out[b];
      out[b] = t;
    }
  }
  return count;
}

// The composed field at x with node i's candidate fields.
SINEW_HD FieldValue EvalAt(const ImplicitItem& it, const float* leaves, uint32_t i, V3 x) {
  return EvalField(it.model, leaves, x, it.state.cand + size_t(i) * imp::kMaxCandidates, it.state.cand_count[i]);
}
// The same with node i's controllers held for the relaxation (EvalHeld in
// core/implicit/tracking.cc): recorded at its start (record), read back by every later
// evaluation of the sub-step.
SINEW_HD FieldValue EvalHeldAt(const ImplicitItem& it, const float* leaves, uint32_t i, V3 x, bool record) {
  return EvalField(it.model, leaves, x, it.state.cand + size_t(i) * imp::kMaxCandidates, it.state.cand_count[i],
                   it.state.controls + size_t(i) * (imp::kMaxCandidates - 1), record);
}

// Whether node i at x has left its own bone's field (Tracker::LeftOwnField).
SINEW_HD bool LeftOwnField(const ImplicitModelView& m, const float* leaves, uint32_t i, V3 x) {
  const uint32_t leaf = uint32_t(m.own_leaf[i]);
  const float* lf = leaves + imp::kLeafFloats * leaf;
  const V3 xr = Mul3(lf + imp::kLeafInvLinear, x) + V3{lf[imp::kLeafInvTranslation], lf[imp::kLeafInvTranslation + 1],
                                                       lf[imp::kLeafInvTranslation + 2]};
  return SampleGrid(m, leaf, xr, nullptr) < imp::kLeftOwnField;
}

// ---------------------------------------------------------------------------------------------
// Tracking (Tracker::Step, Tracker::Relax, the elastic relaxation).

// One damped Newton step of node i towards its iso value with the stop rules of §2.7.3.
SINEW_HD void NewtonStep(const ImplicitItem& it, const float* leaves, uint32_t i) {
  const ImplicitModelView& m = it.model;
  const ImplicitStateView& s = it.state;
  const V3 x = Load3(s.pos, i);
  const FieldValue v = EvalAt(it, leaves, i, x);
  const float res = v.f - m.iso[i];
  const float g2 = Dot(v.g, v.g);
  if (fabsf(res) < imp::kConvergence) {
    s.state[i] = imp::kConverged;
    return;
  }
  if (g2 < m.gradient_floor2) {
    s.state[i] = imp::kNullGradient;
    return;
  }
  if (!s.fresh[i]) {
    const V3 gp = Load3(s.g_prev, i);
    const float cos_angle = Dot(v.g, gp) / sqrtf(g2 * Dot(gp, gp));
    if (cos_angle < it.settings.cos_contact || fabsf(res) > s.r_prev[i]) {
      Store3(s.pos, i, Load3(s.prev_pos, i));  // stop before the step that crossed
      s.state[i] = imp::kContact;
      return;
    }
    if ((res > 0) != (s.s_prev[i] > 0)) {  // overshoot: bisect between the last two positions
      V3 lo = Load3(s.prev_pos, i), hi = x;
      for (int k = 0; k < imp::kBisections; ++k) {
        const V3 mid = 0.5f * (lo + hi);
        const float r = EvalAt(it, leaves, i, mid).f - m.iso[i];
        if ((r > 0) == (s.s_prev[i] > 0)) lo = mid;
        else hi = mid;
      }
      Store3(s.pos, i, 0.5f * (lo + hi));
      s.state[i] = imp::kConverged;
      return;
    }
  }
  V3 step = (it.settings.sigma * -res / g2) * v.g;
  const float len = Norm(step), cap = m.step_cap[i];
  if (len > cap) step = V3{step.x * (cap / len), step.y * (cap / len), step.z * (cap / len)};
  Store3(s.prev_pos, i, x);
  Store3(s.pos, i, x + step);
  Store3(s.g_prev, i, v.g);
  s.r_prev[i] = fabsf(res);
  s.s_prev[i] = res;
  s.fresh[i] = 0;
}

// Tangential mean-value relaxation target of a marching node (Eq. 4.6–4.7), into tmp.
SINEW_HD void RelaxTarget(const ImplicitItem& it, uint32_t i) {
  const ImplicitModelView& m = it.model;
  const ImplicitStateView& s = it.state;
  const V3 v = Load3(s.pos, i);
  Store3(s.tmp, i, v);
  if (!m.ring_closed[i]) return;
  const float d = s.r_prev[i] - 1;
  const float mu = MaxF(0.f, 1 - d * d * d * d);
  if (mu <= 0) return;
  const V3 gp = Load3(s.g_prev, i);
  const float gn = sqrtf(Dot(gp, gp));
  const V3 n = gn > 0 ? V3{gp.x / gn, gp.y / gn, gp.z / gn} : gp;
  V3 acc{0, 0, 0};
  for (uint32_t r = m.ring_offsets[i]; r < m.ring_offsets[i + 1]; ++r) {
    const V3 q = Load3(s.pos, m.ring[r]) - v;
    acc = acc + m.mvc[r] * (q - Dot(q, n) * n);
  }
  Store3(s.tmp, i, v + mu * acc);
}

// Elastic: the rotation of the DQS blend at node i (row-major 3x3), with the skinning weights of
// its first vertex or its bone heat weights (`heat`).
SINEW_HD void BlendRotation(const ImplicitModelView& m, const float* dq, uint32_t i, bool heat, float* r) {
  const uint32_t v = m.vertex_of_node[i];
  const uint32_t e0 = heat ? m.heat_offsets[i] : m.offsets[v];
  const uint32_t e1 = heat ? m.heat_offsets[i + 1] : m.offsets[v + 1];
  const uint16_t* joints = heat ? m.heat_joints : m.joints;
  const float* weights = heat ? m.heat_weights : m.weights;
  const float* pivot = dq + imp::kJointFloats * joints[e0];
  float q[4] = {0, 0, 0, 0};
  for (uint32_t e = e0; e < e1; ++e) {
    const float* a = dq + imp::kJointFloats * joints[e];
    const float dot = a[0] * pivot[0] + a[1] * pivot[1] + a[2] * pivot[2] + a[3] * pivot[3];
    const float w = copysignf(weights[e], dot);
    for (int k = 0; k < 4; ++k) q[k] += w * a[k];
  }
  const float n2 = q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3];
  if (n2 > 0) {
    const float n = sqrtf(n2);
    for (int k = 0; k < 4; ++k) q[k] /= n;
  }
  // Quaternion (x, y, z, w) to matrix, as Eigen's toRotationMatrix.
  const float x = q[0], y = q[1], z = q[2], w = q[3];
  const float tx = 2 * x, ty = 2 * y, tz = 2 * z;
  const float twx = tx * w, twy = ty * w, twz = tz * w;
  const float txx = tx * x, txy = ty * x, txz = tz * x;
  const float tyy = ty * y, tyz = tz * y, tzz = tz * z;
  r[0] = 1 - (tyy + tzz);
  r[1] = txy - twz;
  r[2] = txz + twy;
  r[3] = txy + twz;
  r[4] = 1 - (txx + tzz);
  r[5] = tyz - twx;
  r[6] = txz - twy;
  r[7] = tyz + twx;
  r[8] = 1 - (txx + tyy);
}

// Elastic: the Gauss-Newton matrix of the relaxation energy times x at node i (Hessian in
// tracking.cc): Σ_j w_ij (x_i − x_j) + k g gᵀ x_i + k γ ∇h ∇hᵀ x_i + c_s d_i x_i (the DQS
// spring, d_i the row sum, added in the CPU's cot_sum order). x is the CG's direction, 0 at fixed
// nodes, so a fixed neighbour contributes w_ij x_i without a test.
SINEW_HD V3 RelaxHessian(const ImplicitItem& it, const float* x, uint32_t i) {
  const ImplicitModelView& m = it.model;
  const ImplicitStateView& s = it.state;
  if (!s.free_nodes[i]) return {0, 0, 0};
  const V3 xi = Load3(x, i);
  V3 acc{0, 0, 0};
  float ring_weight = 0;
  for (uint32_t r = m.ring_offsets[i]; r < m.ring_offsets[i + 1]; ++r) {
    acc = acc + m.cot[r] * (xi - Load3(x, m.ring[r]));
    ring_weight += m.cot[r];
  }
  const V3 g = Load3(s.e_g, i);
  const float* c = s.e_cm + 6 * size_t(i);
  const V3 cx{c[0] * xi.x + c[1] * xi.y + c[2] * xi.z, c[1] * xi.x + c[3] * xi.y + c[4] * xi.z,
              c[2] * xi.x + c[4] * xi.y + c[5] * xi.z};
  const float k = s.e_k[i];
  acc = acc + k * (Dot(g, xi) * g + cx);
  acc = acc + (imp::kDqsSpring * ring_weight) * xi;
  return acc;
}

// Elastic: the inverse of the relaxation matrix's 3x3 block at node i, d I + k (g gᵀ + Σ_o γ_o
// ∇h_o ∇h_oᵀ) (d: imp::RelaxDiagonal), applied to y (Precondition in tracking.cc): the inverse
// EnergyTerms left (implicit_device::RelaxBlockInverse), applied (ApplyRelaxBlock).
SINEW_HD V3 RelaxPrecondition(const ImplicitItem& it, uint32_t i, V3 y) {
  const float yv[3] = {y.x, y.y, y.z};
  float z[3];
  imp::ApplyRelaxBlock(it.state.e_pre + imp::kRelaxBlockFloats * size_t(i), yv, z);
  return {z[0], z[1], z[2]};
}

// The batch's two grids: every node, or every vertex, of its items one after another.
struct NodeGrid {
  static SINEW_HD uint32_t Offset(const ImplicitItem& it) { return it.node_offset; }
  static SINEW_HD uint32_t Count(const ImplicitItem& it) { return it.model.node_count; }
};
struct VertexGrid {
  static SINEW_HD uint32_t Offset(const ImplicitItem& it) { return it.implicit_vertex_offset; }
  static SINEW_HD uint32_t Count(const ImplicitItem& it) { return it.model.vertex_count; }
};
// The item holding index g of a grid (items are sorted by both offsets).
template <class Grid>
SINEW_HD uint32_t FindItem(const ImplicitBatch& b, uint32_t g) {
  uint32_t lo = 0, hi = b.count - 1;
  while (lo < hi) {
    const uint32_t mid = (lo + hi + 1) / 2;
    if (Grid::Offset(b.items[mid]) <= g) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

}  // namespace sinew::gpu
