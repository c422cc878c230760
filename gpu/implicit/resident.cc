#include "gpu/implicit/resident.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

#include "absl/strings/str_cat.h"

namespace sinew::gpu {
namespace {

// Height of the composition tree (a leaf alone: 1).
int TreeHeight(const CompositionTree& tree) {
  if (tree.root < 0) return 0;
  int height = 0;
  std::vector<std::pair<int32_t, int>> stack{{tree.root, 1}};
  while (!stack.empty()) {
    const auto [n, depth] = stack.back();
    stack.pop_back();
    height = std::max(height, depth);
    const CompositionTree::Node& node = tree.nodes[n];
    if (node.left >= 0) stack.push_back({node.left, depth + 1});
    if (node.right >= 0) stack.push_back({node.right, depth + 1});
  }
  return height;
}

template <class T>
uint64_t ArrayBytes(const std::vector<T>& v) {
  return sizeof(T) * v.size();
}

// Allocates max(1, n) elements and uploads `data` into them.
template <class T, class D>
bool Put(DeviceApi& api, int device, const T* data, size_t n, const D*& dst, DeviceAllocations& out,
         std::string* error) {
  void* p = api.Alloc(device, sizeof(T) * std::max<size_t>(n, 1), error);
  if (!p) return false;
  out.pointers.push_back(p);
  out.bytes += sizeof(T) * n;
  dst = static_cast<const D*>(p);
  return n == 0 || api.Upload(device, p, data, sizeof(T) * n, error);
}
template <class T>
bool Put(DeviceApi& api, int device, const std::vector<T>& v, const T*& dst, DeviceAllocations& out, std::string* error) {
  return Put(api, device, v.data(), v.size(), dst, out, error);
}

}  // namespace

absl::Status CheckImplicitModel(const ImplicitModel& m) {
  const int height = TreeHeight(m.tree);
  if (height + 1 > kMaxTreeDepth) {
    return absl::FailedPreconditionError(absl::StrCat(
        "gpu: the rig's composition tree of implicit fields is ", height, " levels deep; the device program evaluates at most ",
        kMaxTreeDepth - 1, " (use BACKEND_CPU)"));
  }
  if (m.operators == nullptr || m.operators->contact.resolution() != m.operators->bulge.resolution() ||
      m.operators->contact.slices() != m.operators->bulge.slices()) {
    return absl::InternalError("gpu: the implicit model's operators are missing or of different sizes");
  }
  if (m.follow_offsets.size() != m.node_count() + 1 || m.follow_offsets.back() != m.follow_source.size() ||
      m.follow_weight.size() != m.follow_source.size()) {
    return absl::InternalError("gpu: the implicit model's hidden skin sources do not match its nodes");
  }
  return absl::OkStatus();
}

uint64_t ImplicitModelBytes(const ImplicitModel& m) {
  uint64_t cells = 0;
  for (const FieldGrid& g : m.grids) cells += g.cells().size();
  return sizeof(GridHeader) * m.grids.size() + sizeof(Float4) * cells + sizeof(TreeNodeDev) * m.tree.nodes.size() +
         ArrayBytes(m.node_of_vertex) + ArrayBytes(m.vertex_of_node) + ArrayBytes(m.rest) + ArrayBytes(m.iso) +
         ArrayBytes(m.in_field) + ArrayBytes(m.own_leaf) + ArrayBytes(m.bone) + ArrayBytes(m.step_cap) +
         ArrayBytes(m.rest_pair_leaf) + ArrayBytes(m.rest_pair_excess) + ArrayBytes(m.depth_scale) + ArrayBytes(m.parent_field) +
         ArrayBytes(m.ring_offsets) + ArrayBytes(m.ring) + ArrayBytes(m.ring_closed) + ArrayBytes(m.mvc) +
         ArrayBytes(m.cot) + ArrayBytes(m.heat.offsets) + ArrayBytes(m.heat.joints) + ArrayBytes(m.heat.weights) +
         ArrayBytes(m.component_offsets) + ArrayBytes(m.component_nodes) + ArrayBytes(m.component_of_node) +
         ArrayBytes(m.follow_offsets) + ArrayBytes(m.follow_source) + ArrayBytes(m.follow_weight);
}

bool UploadImplicitModel(DeviceApi& api, int device, const ImplicitModel& m, ResidentModel* out, std::string* error) {
  static_assert(sizeof(Float4) == sizeof(Eigen::Vector4f));
  ImplicitModelView& v = out->view;
  // Bone grids: one header per field, the cells of all fields in one array.
  std::vector<GridHeader> grids(m.grids.size());
  std::vector<Float4> cells;
  for (size_t i = 0; i < m.grids.size(); ++i) {
    const FieldGrid& g = m.grids[i];
    GridHeader& h = grids[i];
    for (int a = 0; a < 3; ++a) {
      h.lo[a] = g.lo()[a];
      h.hi[a] = g.hi()[a];
      h.inv_step[a] = g.inv_step()[a];
    }
    h.n = g.resolution();
    h.first_cell = uint32_t(cells.size());
    h.unused = 0;
    const size_t at = cells.size();
    cells.resize(at + g.cells().size());
    std::memcpy(&cells[at], g.cells().data(), sizeof(Float4) * g.cells().size());
  }
  std::vector<TreeNodeDev> tree(m.tree.nodes.size());
  for (size_t i = 0; i < tree.size(); ++i) {
    const CompositionTree::Node& n = m.tree.nodes[i];
    tree[i] = {n.left, n.right, n.left < 0 ? n.leaf : -1, n.lo, n.hi, uint32_t(n.op)};
  }
  DeviceAllocations& mem = out->memory;
  if (!Put(api, device, grids, v.grids, mem, error) || !Put(api, device, cells, v.cells, mem, error) ||
      !Put(api, device, tree, v.tree, mem, error) || !Put(api, device, m.node_of_vertex, v.node_of_vertex, mem, error) ||
      !Put(api, device, m.vertex_of_node, v.vertex_of_node, mem, error) || !Put(api, device, m.rest, v.rest, mem, error) ||
      !Put(api, device, m.iso, v.iso, mem, error) || !Put(api, device, m.in_field, v.in_field, mem, error) ||
      !Put(api, device, m.own_leaf, v.own_leaf, mem, error) || !Put(api, device, m.bone, v.bone, mem, error) ||
      !Put(api, device, m.step_cap, v.step_cap, mem, error) ||
      !Put(api, device, m.rest_pair_leaf, v.rest_pair_leaf, mem, error) ||
      !Put(api, device, m.rest_pair_excess, v.rest_pair_excess, mem, error) ||
      !Put(api, device, m.depth_scale, v.depth_scale, mem, error) ||
      !Put(api, device, m.parent_field, v.parent_field, mem, error) ||
      !Put(api, device, m.ring_offsets, v.ring_offsets, mem, error) || !Put(api, device, m.ring, v.ring, mem, error) ||
      !Put(api, device, m.ring_closed, v.ring_closed, mem, error) || !Put(api, device, m.mvc, v.mvc, mem, error) ||
      !Put(api, device, m.cot, v.cot, mem, error) || !Put(api, device, m.heat.offsets, v.heat_offsets, mem, error) ||
      !Put(api, device, m.heat.joints, v.heat_joints, mem, error) ||
      !Put(api, device, m.heat.weights, v.heat_weights, mem, error) ||
      !Put(api, device, m.component_offsets, v.component_offsets, mem, error) ||
      !Put(api, device, m.component_nodes, v.component_nodes, mem, error) ||
      !Put(api, device, m.component_of_node, v.component_of_node, mem, error) ||
      !Put(api, device, m.follow_offsets, v.follow_offsets, mem, error) ||
      !Put(api, device, m.follow_source, v.follow_source, mem, error) ||
      !Put(api, device, m.follow_weight, v.follow_weight, mem, error)) {
    return false;
  }
  if (mem.bytes != ImplicitModelBytes(m)) {
    *error = "internal: the implicit model's device bytes do not match their count";
    return false;
  }
  v.field_count = uint32_t(m.fields.size());
  v.node_count = uint32_t(m.node_count());
  v.component_count = uint32_t(m.component_offsets.size() - 1);
  v.largest_component = 0;
  for (uint32_t c = 0; c < v.component_count; ++c) {
    v.largest_component = std::max(v.largest_component, m.ComponentSize(c));
  }
  v.vertex_count = uint32_t(m.node_of_vertex.size());
  v.root = m.tree.root;
  v.gradient_floor2 = m.gradient_floor2;
  v.typical_gradient2 = m.typical_gradient2;
  out->mean_edge = m.mean_edge;
  return true;
}

uint64_t OperatorBytes(const CompositionOperators& ops) {
  return sizeof(Float4) * (ops.contact.cells().size() + ops.bulge.cells().size());
}

bool UploadOperators(DeviceApi& api, int device, const CompositionOperators& ops, ResidentOperators* out,
                     std::string* error) {
  const auto* contact = reinterpret_cast<const Float4*>(ops.contact.cells().data());
  const auto* bulge = reinterpret_cast<const Float4*>(ops.bulge.cells().data());
  const bool ok = Put(api, device, contact, ops.contact.cells().size(), out->contact, out->memory, error) &&
                  Put(api, device, bulge, ops.bulge.cells().size(), out->bulge, out->memory, error);
  out->n = ops.contact.resolution();
  out->nd = ops.contact.slices();
  return ok;
}

namespace {

// Lays the state arrays out from `base` (null: only counts); returns the bytes.
uint64_t LayOut(char* base, uint32_t nodes, uint32_t components, bool elastic, ImplicitStateView* v) {
  uint64_t at = 0;
  auto take = [&](uint64_t bytes) {
    void* p = base ? base + at : nullptr;
    at = (at + bytes + 15) / 16 * 16;
    return p;
  };
  const uint64_t n = nodes;
  // What a snapshot saves first (core/implicit/device_layout.h, SnapshotFloats): the positions,
  // then the states from float SnapshotStateOffset.
  v->pos = static_cast<float*>(take(12 * n));
  v->state = static_cast<uint8_t*>(take(n));
  v->scalars = static_cast<ImplicitScalars*>(take(sizeof(ImplicitScalars) * uint64_t(components)));
  v->prev_pos = static_cast<float*>(take(12 * n));
  v->g_prev = static_cast<float*>(take(12 * n));
  v->r_prev = static_cast<float*>(take(4 * n));
  v->s_prev = static_cast<float*>(take(4 * n));
  v->fresh = static_cast<uint8_t*>(take(n));
  v->cand = static_cast<uint16_t*>(take(2 * imp::kMaxCandidates * n));
  v->cand_count = static_cast<uint8_t*>(take(n));
  if (!elastic) {
    v->tmp = static_cast<float*>(take(12 * n));
    v->beta = static_cast<float*>(take(4 * n));
    v->beta_next = static_cast<float*>(take(4 * n));
  } else {
    v->rot = static_cast<float*>(take(36 * n));
    v->free_nodes = static_cast<uint8_t*>(take(n));
    v->e_g = static_cast<float*>(take(12 * n));
    v->e_gh = static_cast<float*>(take(12 * n));
    v->e_grad = static_cast<float*>(take(12 * n));
    v->e_z = static_cast<float*>(take(12 * n));
    v->x_old = static_cast<float*>(take(12 * n));
    v->e_cm = static_cast<float*>(take(24 * n));
    v->e_pre = static_cast<float*>(take(4 * imp::kRelaxBlockFloats * n));
    v->e_c = static_cast<float*>(take(4 * n));
    v->e_k = static_cast<float*>(take(4 * n));
    v->e_gate = static_cast<float*>(take(4 * imp::kMaxCandidates * n));
    v->controls = static_cast<float*>(take(4 * (imp::kMaxCandidates - 1) * n));
    v->e_node = static_cast<double*>(take(8 * n));
    v->node_trust = static_cast<float*>(take(4 * n));
    v->e_field = static_cast<double*>(take(8 * n));
    v->e_field0 = static_cast<double*>(take(8 * n));
    v->e_pred = static_cast<double*>(take(16 * n));
    v->cg_x = static_cast<float*>(take(12 * n));
    v->cg_r = static_cast<float*>(take(12 * n));
    v->cg_d = static_cast<float*>(take(12 * n));
    v->cg_q = static_cast<float*>(take(12 * n));
  }
  return at;
}

}  // namespace

uint64_t ImplicitStateBytes(uint32_t nodes, uint32_t components, bool elastic) {
  ImplicitStateView unused{};
  return LayOut(nullptr, nodes, components, elastic, &unused);
}

ImplicitStateView CarveImplicitState(void* base, uint32_t nodes, uint32_t components, bool elastic) {
  ImplicitStateView v{};
  LayOut(static_cast<char*>(base), nodes, components, elastic, &v);
  return v;
}

ImplicitSettings MakeImplicitSettings(const ImplicitConfig& c, bool elastic, double mean_edge) {
  ImplicitSettings s{};
  s.sigma = float(c.sigma);
  s.cos_contact = float(std::cos(c.contact_angle_degrees * std::numbers::pi / 180));
  s.max_iterations = c.max_iterations;
  s.smoothing_iterations = c.smoothing_iterations;
  s.relaxation_iterations = c.relaxation_iterations;
  s.relaxation_rounds = c.relaxation_rounds;
  s.elastic = elastic ? 1 : 0;
  s.every_pass = c.device_every_pass ? 1 : 0;
  s.separate_passes = c.device_separate_passes ? 1 : 0;
  s.harmonic_rotations = c.rotation_weights == RotationWeights::kHarmonic ? 1 : 0;
  s.contact_gate_open = float(c.contact_gate_open);
  s.average_stalled = c.average_stalled_relaxations ? 1 : 0;
  s.relax_tolerance = float(c.relaxation_tolerance * mean_edge);  // as tracking.cc
  return s;
}

}  // namespace sinew::gpu
