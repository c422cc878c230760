// The per-frame part of implicit skinning: the history-independent and the elastic deformers
// (seed 000 §2.7–2.8). The preparation is in implicit_skinning.cc.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <numbers>

#include "absl/strings/str_cat.h"
#include "core/deformer/skeletal.h"
#include "core/dqs/dqs.h"
#include "core/implicit/device_layout.h"
#include "core/implicit/field_eval.h"
#include "core/implicit/implicit_skinning.h"
#include "core/util/state_bytes.h"

namespace sinew {

using namespace implicit_internal;
using namespace implicit_device;

namespace {

// Per-session tracking state and scratch over the model's nodes.
class Tracker {
 public:
  Tracker(std::shared_ptr<const Rig> rig, std::shared_ptr<const ImplicitModel> model, const ImplicitConfig& config)
      : rig_(std::move(rig)), m_(std::move(model)), config_(config) {
    AllocateNodes();
    cos_contact_ = float(std::cos(config.contact_angle_degrees * std::numbers::pi / 180));
    gradient_floor2_ = m_->gradient_floor2;
  }

  // The per-node scratch of the CPU frames. A session whose frames run on a device frees it
  // (Deformer::RunsOnDevice); returns true when it had to be allocated again.
  bool AllocateNodes() {
    const size_t nn = m_->node_count();
    if (pos_.size() == nn) return false;
    pos_.resize(nn);
    tmp_.resize(nn);
    prev_pos_.resize(nn);
    g_prev_.resize(nn);
    r_prev_.resize(nn);
    s_prev_.resize(nn);
    fresh_.resize(nn);
    state_.resize(nn);
    cand_.resize(nn * kMaxCandidates);
    cand_count_.resize(nn);
    return true;
  }
  void FreeNodes() {
    for (auto* v : {&pos_, &tmp_, &prev_pos_, &g_prev_}) std::vector<Eigen::Vector3f>().swap(*v);
    for (auto* v : {&r_prev_, &s_prev_}) std::vector<float>().swap(*v);
    std::vector<uint8_t>().swap(fresh_);
    std::vector<VertexState>().swap(state_);
    std::vector<uint16_t>().swap(cand_);
    std::vector<uint8_t>().swap(cand_count_);
    std::vector<uint32_t>().swap(active_);
  }

  size_t Bytes() const {
    return pos_.size() * (4 * sizeof(Eigen::Vector3f) + 2 * sizeof(float) + 2 + kMaxCandidates * 2 + 1) +
           leaves_.size() * sizeof(LeafFrame);
  }

 protected:
  void SetFields(std::span<const Affine34d> transforms) { MakeLeafFrames(*m_, transforms, leaves_); }

  void FindCandidates(ThreadPool* pool) {
    ParallelFor(pool, pos_.size(), 512, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) {
        // Untracked nodes never evaluate the field.
        cand_count_[i] = m_->in_field[i] ? uint8_t(Candidates(*m_, leaves_, pos_[i], &cand_[i * kMaxCandidates])) : 0;
      }
    });
  }

  FieldValue Eval(size_t i, const Eigen::Vector3f& x) const {
    return Evaluator(*m_, leaves_.data()).Eval(x, &cand_[i * kMaxCandidates], cand_count_[i]);
  }

  // Leaf field `leaf` (moved by its bone) and its gradient at x.
  FieldValue LeafValue(int32_t leaf, const Eigen::Vector3f& x) const {
    return LeafFieldValue(*m_, leaves_[leaf], size_t(leaf), x);
  }

  // Whether node i at x has left its own bone's field (it was carried onto another surface):
  // f_own < 0.01, about 0.75 r outside that bone's surface, where the grid's support ends.
  bool LeftOwnField(size_t i, const Eigen::Vector3f& x) const {
    const int32_t leaf = m_->own_leaf[i];
    return m_->grids[leaf].Sample(leaves_[leaf].ToRest(x)) < kLeftOwnField;
  }

  // Newton projection of the nodes in `active` onto their iso values with the stop rules of
  // §2.7.3; with `relax`, one tangential MVC relaxation after every two steps (IS).
  void March(std::vector<uint32_t>& active, bool relax, ThreadPool* pool) {
    for (uint32_t i : active) {
      fresh_[i] = 1;
      state_[i] = VertexState::kMaxIterations;
    }
    const float sigma = float(config_.sigma);
    for (uint32_t it = 0; it < config_.max_iterations && !active.empty(); ++it) {
      // Few marching nodes (most converge in the first steps): the pool's wake-ups would cost
      // more than the work.
      ThreadPool* p = active.size() >= 512 ? pool : nullptr;
      ParallelFor(p, active.size(), 128, [&](size_t b, size_t e) {
        for (size_t a = b; a < e; ++a) Step(active[a], sigma);
      });
      std::erase_if(active, [&](uint32_t i) { return state_[i] != VertexState::kMaxIterations; });
      if (relax && (it % 2 == 1) && !active.empty()) Relax(active, p);
    }
  }

  void Step(uint32_t i, float sigma) {
    Eigen::Vector3f& x = pos_[i];
    const FieldValue v = Eval(i, x);
    const float res = v.f - m_->iso[i];
    const float g2 = v.g.squaredNorm();
    if (std::abs(res) < kConvergence) {
      state_[i] = VertexState::kConverged;
      return;
    }
    if (g2 < gradient_floor2_) {
      state_[i] = VertexState::kNullGradient;
      return;
    }
    if (!fresh_[i]) {
      const float cos_angle = v.g.dot(g_prev_[i]) / std::sqrt(g2 * g_prev_[i].squaredNorm());
      if (cos_angle < cos_contact_ || std::abs(res) > r_prev_[i]) {
        // The last step crossed the contact (or went uphill): stop before it.
        x = prev_pos_[i];
        state_[i] = VertexState::kContact;
        return;
      }
      if ((res > 0) != (s_prev_[i] > 0)) {
        // Overshoot past the target: bisect between the last two positions (§2.7.3).
        Eigen::Vector3f lo = prev_pos_[i], hi = x;  // lo has the sign of s_prev
        for (int k = 0; k < kBisections; ++k) {
          const Eigen::Vector3f mid = 0.5f * (lo + hi);
          const float r = Eval(i, mid).f - m_->iso[i];
          ((r > 0) == (s_prev_[i] > 0) ? lo : hi) = mid;
        }
        x = 0.5f * (lo + hi);
        state_[i] = VertexState::kConverged;
        return;
      }
    }
    Eigen::Vector3f step = (sigma * -res / g2) * v.g;
    const float len = step.norm(), cap = m_->step_cap[i];
    if (len > cap) step *= cap / len;
    prev_pos_[i] = x;
    x += step;
    g_prev_[i] = v.g;
    r_prev_[i] = std::abs(res);
    s_prev_[i] = res;
    fresh_[i] = 0;
  }

  // Tangential relaxation (Eq. 4.6–4.7) of the marching nodes with closed one-rings: move towards
  // the mean-value combination of the neighbours projected on the tangent plane, by
  // μ = max(0, 1 − (|f − iso| − 1)⁴). Jacobi: reads pos_, writes tmp_.
  void Relax(const std::vector<uint32_t>& active, ThreadPool* pool) {
    ParallelFor(pool, active.size(), 128, [&](size_t b, size_t e) {
      for (size_t a = b; a < e; ++a) {
        const uint32_t i = active[a];
        tmp_[i] = pos_[i];
        if (!m_->ring_closed[i]) continue;
        const float d = r_prev_[i] - 1;
        const float mu = std::max(0.f, 1 - d * d * d * d);
        if (mu <= 0) continue;
        const Eigen::Vector3f n = g_prev_[i].normalized();
        const Eigen::Vector3f& v = pos_[i];
        Eigen::Vector3f acc = Eigen::Vector3f::Zero();
        for (uint32_t r = m_->ring_offsets[i]; r < m_->ring_offsets[i + 1]; ++r) {
          const Eigen::Vector3f q = pos_[m_->ring[r]] - v;
          acc += m_->mvc[r] * (q - q.dot(n) * n);
        }
        tmp_[i] = v + mu * acc;
      }
    });
    for (uint32_t i : active) {
      pos_[i] = tmp_[i];
      fresh_[i] = 1;  // the tangential move is not a monotonicity break
    }
  }

  std::shared_ptr<const Rig> rig_;
  std::shared_ptr<const ImplicitModel> m_;
  ImplicitConfig config_;
  std::vector<LeafFrame> leaves_;
  std::vector<Eigen::Vector3f> pos_, tmp_, prev_pos_, g_prev_;
  std::vector<float> r_prev_, s_prev_;
  std::vector<uint8_t> fresh_;
  std::vector<VertexState> state_;
  std::vector<uint16_t> cand_;
  std::vector<uint8_t> cand_count_;
  std::vector<uint32_t> active_;
  float cos_contact_ = 0, gradient_floor2_ = 0;
};

class ImplicitDeformerBase : public Deformer, protected Tracker {
 public:
  ImplicitDeformerBase(std::shared_ptr<const Rig> rig, std::shared_ptr<const ImplicitModel> model,
                       const DeformerConfig& config, bool elastic)
      : Tracker(std::move(rig), std::move(model), ParamsOf<ImplicitConfig>(config)),
        name_(elastic ? "elastic-implicit" : "implicit"),
        elastic_(elastic),
        device_key_("implicit " + ImplicitKey(config)),
        world_(rig_->joint_count()),
        transforms_(rig_->joint_count()),
        dqs_(rig_->joint_count()) {}

  // The device runs the whole per-vertex part; the CPU poses the skeleton and moves the fields.
  DeviceStage device_stage() const override {
    DeviceStage s;
    s.kernel = elastic_ ? "elastic-implicit" : "implicit";
    s.device_data_key = device_key_;
    s.model = m_;
    s.device_vertex_states = true;
    s.state_on_device = elastic_;  // the tracked nodes
    return s;
  }
  size_t device_param_count() const override {
    return FrameFloats(rig_->joint_count(), m_->fields.size(), elastic_, 1);
  }

  absl::Status Offers(const FrameExtras& wanted) const override {
    if (wanted.posed_cage || wanted.rest_cage || wanted.joints) return Deformer::Offers(wanted);
    if (wanted.vertex_states && state_.empty()) {  // the CPU's node arrays are made with the deformer
      return absl::FailedPreconditionError(
          "outputs.vertex_states: this session's frames run on a device, which returns the states with them");
    }
    return absl::OkStatus();
  }
  absl::Status Extras(const FrameExtras& extras) const override {
    if (auto st = Offers(extras); !st.ok()) return st;
    if (extras.vertex_states) {
      extras.vertex_states->resize(rig_->vertex_count());
      for (size_t v = 0; v < rig_->vertex_count(); ++v) {
        (*extras.vertex_states)[v] = uint8_t(state_[m_->node_of_vertex[v]]);
      }
    }
    return absl::OkStatus();
  }

  size_t StateBytes() const override {
    return sizeof(*this) + Tracker::Bytes() + world_.size() * (sizeof(Similarity) + sizeof(Affine34d)) +
           follow_rot_.capacity() * sizeof(Eigen::Matrix3f) + follow_pos_.capacity() * sizeof(Eigen::Vector3f);
  }

 protected:
  absl::Status PoseFrame(const FrameInput& frame) {
    if (auto st = CheckSkeletalFrame(*rig_, frame, name_); !st.ok()) return st;
    SkinningTransforms(rig_->skeleton, *frame.pose, world_, transforms_);
    return absl::OkStatus();
  }

  // One (sub)frame's block of device parameters (core/implicit/device_layout.h) starts with the
  // dual quaternion data of `transforms`...
  void WriteJointData(std::span<const Affine34d> transforms, float* out) {
    ToDualQuats(transforms, dqs_, rig_->skeleton.inverse_bind);
    for (size_t j = 0; j < dqs_.size(); ++j) {
      float* o = out + kJointFloats * j;
      std::copy_n(dqs_[j].v, 8, o);
      o[8] = dqs_[j].scale;
      std::copy_n(dqs_[j].shift, 3, o + 9);
    }
  }
  // ... and ends with the fields moved by `transforms`.
  void WriteLeaves(std::span<const Affine34d> transforms, float* out) {
    SetFields(transforms);
    for (size_t i = 0; i < leaves_.size(); ++i) WriteLeafFrame(leaves_[i], out + kLeafFloats * i);
  }

  // The rotation of node i's dual quaternion blend in dqs_: its first vertex's skinning weights,
  // or its bone heat weights (`heat`).
  Eigen::Matrix3f RotationOfBlend(uint32_t i, bool heat) const {
    const uint32_t v = m_->vertex_of_node[i];
    const uint32_t e0 = heat ? m_->heat.offsets[i] : rig_->weights.offsets[v];
    const uint32_t e1 = heat ? m_->heat.offsets[i + 1] : rig_->weights.offsets[v + 1];
    const uint16_t* joints = heat ? m_->heat.joints.data() : rig_->weights.joints.data();
    const float* weights = heat ? m_->heat.weights.data() : rig_->weights.weights.data();
    const float* pivot = dqs_[joints[e0]].v;
    Eigen::Vector4f q = Eigen::Vector4f::Zero();
    for (uint32_t e = e0; e < e1; ++e) {
      const float* r = dqs_[joints[e]].v;
      const float dot = r[0] * pivot[0] + r[1] * pivot[1] + r[2] * pivot[2] + r[3] * pivot[3];
      q += std::copysign(weights[e], dot) * Eigen::Vector4f(r[0], r[1], r[2], r[3]);
    }
    return Eigen::Quaternionf(q[3], q[0], q[1], q[2]).normalized().toRotationMatrix();
  }

  // Every vertex of a node inside the rest skin where the nodes outside it carry it
  // (FollowPosition, with the rotations of their dual quaternion blends in dqs_).
  void WriteHidden(std::span<float> out, ThreadPool* pool) {
    if (m_->follow_source.empty()) return;
    follow_rot_.resize(m_->node_count());  // each source's rotation once (a source serves many)
    ParallelFor(pool, m_->follow_sources.size(), 256, [&](size_t b, size_t e) {
      for (size_t k = b; k < e; ++k) follow_rot_[m_->follow_sources[k]] = RotationOfBlend(m_->follow_sources[k], false);
    });
    follow_pos_.resize(m_->node_count());  // each hidden node once (a node has several vertices)
    ParallelFor(pool, m_->node_count(), 1024, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) {
        if (m_->follow_offsets[i] == m_->follow_offsets[i + 1]) continue;
        follow_pos_[i] = FollowPosition(
            *m_, uint32_t(i), [&](uint32_t j) { return pos_[j]; }, [&](uint32_t j) { return follow_rot_[j]; });
      }
    });
    ParallelFor(pool, rig_->vertex_count(), 1024, [&](size_t b, size_t e) {
      for (size_t v = b; v < e; ++v) {
        const uint32_t i = m_->node_of_vertex[v];
        if (m_->follow_offsets[i] != m_->follow_offsets[i + 1]) std::copy_n(follow_pos_[i].data(), 3, &out[3 * v]);
      }
    });
  }

  void WriteNodes(std::span<float> out, ThreadPool* pool) const {
    ParallelFor(pool, rig_->vertex_count(), 1024, [&](size_t b, size_t e) {
      for (size_t v = b; v < e; ++v) {
        const uint32_t i = m_->node_of_vertex[v];
        if (state_[i] == VertexState::kFree) continue;  // keeps the initial skinning
        std::copy_n(pos_[i].data(), 3, &out[3 * v]);
      }
    });
  }

  const char* name_;
  const bool elastic_;
  const std::string device_key_;
  std::vector<Similarity> world_;
  std::vector<Affine34d> transforms_;
  std::vector<DualQuat> dqs_;
  std::vector<Eigen::Matrix3f> follow_rot_;  // WriteHidden: per node, filled at the sources
  std::vector<Eigen::Vector3f> follow_pos_;  // WriteHidden: per node, filled at the hidden nodes
};

// History-independent implicit skinning (§2.7).
class ImplicitDeformer final : public ImplicitDeformerBase {
 public:
  ImplicitDeformer(std::shared_ptr<const Rig> rig, std::shared_ptr<const ImplicitModel> model, const DeformerConfig& config)
      : ImplicitDeformerBase(std::move(rig), std::move(model), config, false) {
    beta_.resize(m_->node_count());
  }

  absl::Status DeviceFrame(const FrameInput& frame, std::vector<float>& params) override {
    if (auto st = PoseFrame(frame); !st.ok()) return st;
    const size_t joints = rig_->joint_count();
    params.resize(FrameFloats(joints, m_->fields.size(), false, 1));
    std::fill_n(params.begin(), kHeaderFloats, 0.f);
    params[0] = 1;  // one step
    float* step = params.data() + kHeaderFloats;
    WriteJointData(transforms_, step);
    WriteLeaves(transforms_, step + kJointFloats * joints);
    return absl::OkStatus();
  }

  void RunsOnDevice() override {
    FreeNodes();
    std::vector<Eigen::Matrix3f>().swap(follow_rot_);
    std::vector<Eigen::Vector3f>().swap(follow_pos_);
    std::vector<float>().swap(beta_);
    std::vector<float>().swap(beta_next_);
    std::vector<uint32_t>().swap(moving_);
  }

  absl::Status Deform(const FrameInput& frame, std::span<float> out, ThreadPool* pool) override {
    return Track(frame, {}, out, pool);
  }
  // In a pipeline the previous stage's positions are the initial guess instead of DQS.
  absl::Status DeformAfter(const FrameInput& frame, std::span<const float> in, std::span<float> out,
                           ThreadPool* pool) override {
    if (in.size() != rig_->positions.size()) return absl::InternalError("pipeline buffer does not hold 3 floats per vertex");
    return Track(frame, in, out, pool);
  }

  absl::Status Track(const FrameInput& frame, std::span<const float> start, std::span<float> out, ThreadPool* pool) {
    if (auto st = PoseFrame(frame); !st.ok()) return st;
    if (AllocateNodes()) beta_.resize(m_->node_count());
    // 1. Dual quaternion skinning (or the stage before) is the initial guess.
    if (start.empty()) {
      ToDualQuats(transforms_, dqs_, rig_->skeleton.inverse_bind);
      DualQuaternionSkinning(rig_->positions, rig_->weights, dqs_, out, pool);
    } else {
      std::copy(start.begin(), start.end(), out.begin());
    }
    SetFields(transforms_);
    const size_t nn = m_->node_count();
    active_.clear();
    for (size_t i = 0; i < nn; ++i) {
      const uint32_t v = m_->vertex_of_node[i];
      pos_[i] = Eigen::Vector3f(out[3 * v], out[3 * v + 1], out[3 * v + 2]);
      state_[i] = VertexState::kFree;
      if (m_->in_field[i]) active_.push_back(uint32_t(i));
    }
    FindCandidates(pool);
    // 2. March to the iso values, relaxing tangentially.
    March(active_, true, pool);
    // A node that marched out of its own bone's field (onto another surface, or outside every
    // field) keeps its initial skinning [S].
    ParallelFor(pool, nn, 1024, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) {
        if (!m_->in_field[i] || !LeftOwnField(i, pos_[i])) continue;
        const uint32_t v = m_->vertex_of_node[i];
        pos_[i] = Eigen::Vector3f(out[3 * v], out[3 * v + 1], out[3 * v + 2]);
        state_[i] = VertexState::kReseeded;
      }
    });
    // 3. Smooth the contact regions (Eq. 4.8).
    Smooth(pool);
    WriteNodes(out, pool);
    // 4. Skin inside the rest skin is carried by the skin around it (ImplicitModel::follow_offsets).
    if (!m_->follow_source.empty()) {
      if (!start.empty()) ToDualQuats(transforms_, dqs_, rig_->skeleton.inverse_bind);
      WriteHidden(out, pool);
    }
    return absl::OkStatus();
  }

  size_t StateBytes() const override {
    return ImplicitDeformerBase::StateBytes() + dqs_.size() * sizeof(DualQuat) + beta_.size() * 8 + moving_.capacity() * 4;
  }

 private:
  void Smooth(ThreadPool* pool) {
    if (config_.smoothing_iterations == 0) return;
    const size_t nn = m_->node_count();
    bool any = false;
    for (size_t i = 0; i < nn; ++i) {
      beta_[i] = state_[i] == VertexState::kContact ? 1.f : 0.f;
      any |= beta_[i] > 0;
    }
    if (!any) return;
    // Diffuse β over the one-rings, keeping contact nodes at 1 ([R]: 6 iterations).
    std::vector<float>& next = beta_next_;  // scratch kept by the session: no allocation per frame
    next.resize(nn);
    for (int it = 0; it < kBetaDiffusion; ++it) {
      ParallelFor(pool, nn, 1024, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) {
          if (state_[i] == VertexState::kContact) {
            next[i] = 1;
            continue;
          }
          float sum = beta_[i];
          const uint32_t r0 = m_->ring_offsets[i], r1 = m_->ring_offsets[i + 1];
          for (uint32_t r = r0; r < r1; ++r) sum += beta_[m_->ring[r]];
          next[i] = sum / float(1 + r1 - r0);
        }
      });
      beta_.swap(next);
    }
    std::vector<uint32_t>& moving = moving_;
    moving.clear();
    for (size_t i = 0; i < nn; ++i) {
      if (beta_[i] > kBetaMin && state_[i] != VertexState::kFree && m_->ring_offsets[i + 1] > m_->ring_offsets[i]) {
        moving.push_back(uint32_t(i));
      }
    }
    for (uint32_t it = 0; it < config_.smoothing_iterations; ++it) {
      ParallelFor(pool, moving.size(), 256, [&](size_t b, size_t e) {
        for (size_t a = b; a < e; ++a) {
          const uint32_t i = moving[a];
          Eigen::Vector3f c = Eigen::Vector3f::Zero();
          const uint32_t r0 = m_->ring_offsets[i], r1 = m_->ring_offsets[i + 1];
          for (uint32_t r = r0; r < r1; ++r) c += pos_[m_->ring[r]];
          c /= float(r1 - r0);
          tmp_[i] = (1 - beta_[i]) * pos_[i] + beta_[i] * c;
        }
      });
      for (uint32_t i : moving) pos_[i] = tmp_[i];
    }
  }

  std::vector<float> beta_, beta_next_;
  std::vector<uint32_t> moving_;
};

// History-dependent elastic implicit skinning (§2.8).
class ElasticImplicitDeformer final : public ImplicitDeformerBase {
 public:
  ElasticImplicitDeformer(std::shared_ptr<const Rig> rig, std::shared_ptr<const ImplicitModel> model,
                          const DeformerConfig& config)
      : ImplicitDeformerBase(std::move(rig), std::move(model), config, true),
        prev_world_(rig_->joint_count()),
        prev_transforms_(rig_->joint_count()),
        step_world_(rig_->joint_count()),
        prev_local_(rig_->joint_count()),
        local_(rig_->joint_count()),
        step_transforms_(rig_->joint_count()),
        delta_(rig_->joint_count()) {
    AllocateRotations();
    const Skeleton& sk = rig_->skeleton;
    bind_world_.resize(sk.size());
    std::vector<Affine34d> identity(sk.size());
    SkinningTransforms(sk, BindPose(sk), bind_world_, identity);
    Reset();
  }

  void Reset() override {
    for (size_t i = 0; i < pos_.size(); ++i) {  // nothing when the scratch was freed
      pos_[i] = P3(m_->rest, i);
      state_[i] = m_->in_field[i] ? VertexState::kConverged : VertexState::kFree;
    }
    prev_world_ = bind_world_;
    std::fill(prev_transforms_.begin(), prev_transforms_.end(), IdentityAffine());
    device_reset_ = true;  // a device session restarts from rest with its next frame
    from_rest_ = true;
  }

  void RunsOnDevice() override {
    FreeNodes();
    std::vector<Eigen::Matrix3f>().swap(follow_rot_);
    std::vector<Eigen::Vector3f>().swap(follow_pos_);
    std::vector<Eigen::Matrix3f>().swap(rot_);
    std::vector<Eigen::Vector3f>().swap(rest_edge_);
    std::vector<float>().swap(skinned_);
    std::vector<uint8_t>().swap(free_);
    for (auto* v : {&e_g_, &e_gh_, &e_grad_, &x_old_}) std::vector<Eigen::Vector3f>().swap(*v);
    for (auto* v : {&cg_x_, &cg_r_, &cg_d_, &cg_q_, &e_z_}) std::vector<Eigen::Vector4f>().swap(*v);
    for (auto* v : {&e_c_, &e_k_, &e_gate_, &controls_, &e_pre_, &node_trust_}) std::vector<float>().swap(*v);
    for (auto* v : {&e_field_, &e_field0_, &e_pred_, &e_size_}) std::vector<double>().swap(*v);
    std::vector<float>().swap(e_cm_);
    std::vector<double>().swap(partial_);
    std::vector<uint32_t>().swap(order_);
    std::vector<Eigen::Vector3f>().swap(undo_pos_);
    std::vector<VertexState>().swap(undo_state_);
    std::vector<Affine34d>().swap(undo_transforms_);
  }

  absl::Status Deform(const FrameInput& frame, std::span<float> out, ThreadPool* pool) override {
    if (auto st = PoseFrame(frame); !st.ok()) return st;
    if (AllocateNodes()) {  // back from a device: the CPU's tracking starts from the rest state
      AllocateRotations();
      Reset();
    }
    const uint32_t steps = PlanSubsteps();
    // A frame the host may stop (FrameInput::stop) keeps a copy of the state it started from, so
    // that a stopped frame leaves the session as it was.
    stop_ = frame.stop;
    stopped_.store(false, std::memory_order_relaxed);
    if (stop_ != nullptr) {
      undo_pos_.assign(pos_.begin(), pos_.end());
      undo_state_.assign(state_.begin(), state_.end());
      undo_transforms_.assign(prev_transforms_.begin(), prev_transforms_.end());
    }
    for (uint32_t s = 1; s <= steps; ++s) {
      StepTransforms(s, steps);
      SubStep(pool);
      prev_transforms_ = step_transforms_;
      if (StopWanted()) {
        pos_.swap(undo_pos_);
        state_.swap(undo_state_);
        prev_transforms_.swap(undo_transforms_);
        stop_ = nullptr;
        return absl::CancelledError(absl::StrCat("frame: stopped by its caller in sub-step ", s, " of ", steps,
                                                 "; the session's state is as this frame found it"));
      }
    }
    stop_ = nullptr;
    prev_world_ = world_;
    prev_transforms_ = transforms_;
    from_rest_ = false;
    // Output: the nodes (those outside every field take the initial skinning in SubStep); skin
    // inside the rest skin is carried by the skin around it (ImplicitModel::follow_offsets), with
    // the last sub-step's rotations.
    ParallelFor(pool, rig_->vertex_count(), 1024, [&](size_t b, size_t e) {
      for (size_t v = b; v < e; ++v) std::copy_n(pos_[m_->node_of_vertex[v]].data(), 3, &out[3 * v]);
    });
    WriteHidden(out, pool);
    return absl::OkStatus();
  }

  // The device tracks; the CPU plans the sub-steps and writes each one's skeleton and fields.
  absl::Status DeviceFrame(const FrameInput& frame, std::vector<float>& params) override {
    if (auto st = PoseFrame(frame); !st.ok()) return st;
    const uint32_t steps = PlanSubsteps();
    const size_t joints = rig_->joint_count();
    const size_t step_floats = StepFloats(joints, m_->fields.size(), true);
    params.resize(FrameFloats(joints, m_->fields.size(), true, steps));
    std::fill_n(params.begin(), kHeaderFloats, 0.f);
    params[0] = float(steps);
    params[1] = device_reset_ ? 1.f : 0.f;
    for (uint32_t s = 1; s <= steps; ++s) {
      StepTransforms(s, steps);
      float* p = params.data() + kHeaderFloats + (s - 1) * step_floats;
      WriteJointData(step_transforms_, p);
      for (size_t j = 0; j < joints; ++j) {
        std::copy_n(delta_[j].data(), kJointFloats, p + kJointFloats * (joints + j));
        const Affine34f t = step_transforms_[j].cast<float>();
        std::copy_n(t.data(), kJointFloats, p + kJointFloats * (2 * joints + j));
      }
      WriteLeaves(step_transforms_, p + 3 * kJointFloats * joints);
      prev_transforms_ = step_transforms_;
    }
    prev_world_ = world_;
    prev_transforms_ = transforms_;
    device_reset_ = false;
    from_rest_ = false;
    return absl::OkStatus();
  }

  // Snapshots (Deformer::SaveState). The history is the nodes' positions and states and the
  // previous frame's skeleton (each joint's world similarity and skinning transform, from which
  // the next frame's sub-steps start); everything else is remade within a frame. Bytes:
  // "eis-state" 1, node and joint counts (u64), from rest (u8); unless from rest, per joint the
  // rotation (w x y z), translation and scale (8 doubles) and the 3x4 transform (12 doubles,
  // column-major), per node its position (3 float32), per node its VertexState (u8); then an
  // FNV-1a 64 of everything before it (core/util/state_bytes.h). A session on a device saves the
  // same bytes, its nodes read from the device (implicit_device::SnapshotFloats).
  // Nodes past float's range (a pose of extreme scales) would make bytes that LoadState refuses:
  // saved as from rest, where such a session is best restarted.
  absl::StatusOr<std::string> SaveState() const override {
    if (from_rest_ || pos_.size() != m_->node_count()) return EncodeState(true, {}, {});
    const std::span<const float> pos(pos_[0].data(), 3 * pos_.size());
    if (!AllFinite(pos)) return EncodeState(true, {}, {});
    return EncodeState(false, pos,
                       std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(state_.data()), state_.size()));
  }

  absl::Status LoadState(std::string_view bytes) override {
    auto decoded = DecodeState(bytes);
    if (!decoded.ok()) return decoded.status();
    if (decoded->from_rest) {
      Reset();
      return absl::OkStatus();
    }
    if (AllocateNodes()) AllocateRotations();  // a session that ran on a device before
    for (size_t i = 0; i < pos_.size(); ++i) {
      pos_[i] = Eigen::Vector3f(decoded->pos[3 * i], decoded->pos[3 * i + 1], decoded->pos[3 * i + 2]);
      state_[i] = VertexState(decoded->state[i]);
    }
    TakeSkeleton(*decoded);
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> SaveDeviceState(std::span<const float> resident) const override {
    const size_t nn = m_->node_count();
    if (resident.size() < SnapshotFloats(nn)) {
      return absl::InternalError("elastic-implicit: the device state is smaller than its snapshot");
    }
    if (device_reset_ || !AllFinite(resident.first(3 * nn))) return EncodeState(true, {}, {});
    return EncodeState(false, resident.first(3 * nn),
                       std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(resident.data() + SnapshotStateOffset(nn)), nn));
  }

  absl::Status LoadDeviceState(std::string_view bytes, std::span<float> resident) override {
    const size_t nn = m_->node_count();
    if (resident.size() < SnapshotFloats(nn)) {
      return absl::InternalError("elastic-implicit: the device state is smaller than its snapshot");
    }
    auto decoded = DecodeState(bytes);
    if (!decoded.ok()) return decoded.status();
    if (decoded->from_rest) {
      Reset();  // the device's next frame starts from rest whatever it holds
      return absl::OkStatus();
    }
    std::copy(decoded->pos.begin(), decoded->pos.end(), resident.begin());
    std::memcpy(resident.data() + SnapshotStateOffset(nn), decoded->state.data(), nn);
    TakeSkeleton(*decoded);
    device_reset_ = false;
    return absl::OkStatus();
  }

  size_t StateBytes() const override {
    return ImplicitDeformerBase::StateBytes() + rot_.size() * sizeof(Eigen::Matrix3f) +
           rest_edge_.capacity() * sizeof(Eigen::Vector3f) + skinned_.size() * 4 +
           cg_x_.size() * 5 * sizeof(Eigen::Vector4f) + e_g_.size() * 4 * sizeof(Eigen::Vector3f) +
           e_c_.size() * 4 * sizeof(float) + free_.size() + controls_.size() * sizeof(float) +
           (e_gate_.size() + e_cm_.size() + e_pre_.size() + node_trust_.size()) * sizeof(float) +
           e_field_.size() * 4 * sizeof(double) +
           partial_.capacity() * sizeof(double) + order_.capacity() * sizeof(uint32_t) +
           undo_pos_.capacity() * sizeof(Eigen::Vector3f) + undo_state_.capacity() * sizeof(VertexState) +
           undo_transforms_.capacity() * sizeof(Affine34d) +
           prev_world_.size() * (3 * sizeof(Similarity) + 2 * sizeof(Affine34d) + sizeof(Affine34f) + sizeof(DualQuat));
  }

 private:
  static constexpr std::string_view kStateMagic{"eis-state\x01", 10};
  static constexpr size_t kJointDoubles = 8 + 12;  // the similarity, then the 3x4 transform

  static bool AllFinite(std::span<const float> values) {
    return std::all_of(values.begin(), values.end(), [](float f) { return std::isfinite(f); });
  }

  struct DecodedState {
    bool from_rest = true;
    std::vector<double> joints;  // kJointDoubles per joint
    std::vector<float> pos;      // 3 per node
    std::vector<uint8_t> state;  // per node
  };

  std::string EncodeState(bool from_rest, std::span<const float> pos, std::span<const uint8_t> state) const {
    StateWriter out(kStateMagic);
    out.Put(uint64_t(m_->node_count()));
    out.Put(uint64_t(rig_->joint_count()));
    out.Put(uint8_t(from_rest));
    if (!from_rest) {
      for (size_t j = 0; j < prev_world_.size(); ++j) {
        const Similarity& w = prev_world_[j];
        const double sim[8] = {w.rotation.w(),    w.rotation.x(),    w.rotation.y(),    w.rotation.z(),
                               w.translation.x(), w.translation.y(), w.translation.z(), w.scale};
        out.PutArray(std::span<const double>(sim));
        out.PutArray(std::span<const double>(prev_transforms_[j].data(), 12));
      }
      out.PutArray(pos);
      out.PutArray(state);
    }
    return std::move(out).Finish();
  }

  // Checks SaveState's bytes against this session (its rig and preparation; every value finite,
  // every node's state one a frame can leave) and unpacks them; changes nothing.
  absl::StatusOr<DecodedState> DecodeState(std::string_view bytes) const {
    StateReader in(bytes, kStateMagic, "an elastic-implicit session state");
    const uint64_t nodes = in.Get<uint64_t>(), joints = in.Get<uint64_t>();
    DecodedState d;
    d.from_rest = in.Get<uint8_t>() != 0;
    if (!in.ok()) return in.status();
    if (nodes != m_->node_count() || joints != rig_->joint_count()) {
      return absl::InvalidArgumentError(absl::StrCat("state: saved with ", nodes, " tracked nodes and ", joints,
                                                     " joints; this session's rig and preparation have ",
                                                     m_->node_count(), " and ", rig_->joint_count()));
    }
    if (d.from_rest) {
      if (auto st = in.Done(); !st.ok()) return st;
      return d;
    }
    const size_t expect = joints * kJointDoubles * sizeof(double) + nodes * (3 * sizeof(float) + 1);
    if (in.remaining() != expect) {
      return absl::DataLossError(absl::StrCat("state: ", in.remaining(), " bytes of history where ", nodes,
                                              " nodes and ", joints, " joints need ", expect));
    }
    d.joints.resize(joints * kJointDoubles);
    d.pos.resize(3 * nodes);
    d.state.resize(nodes);
    in.GetArray(std::span<double>(d.joints));
    in.GetArray(std::span<float>(d.pos));
    in.GetArray(std::span<uint8_t>(d.state));
    if (auto st = in.Done(); !st.ok()) return st;
    // The checksum is the client's to compute: a state it wrote may hold anything.
    for (size_t k = 0; k < d.joints.size(); ++k) {
      if (!std::isfinite(d.joints[k])) {
        return absl::InvalidArgumentError(
            absl::StrCat("state: joint ", k / kJointDoubles, "'s previous pose is not finite"));
      }
    }
    for (size_t j = 0; j < joints; ++j) {
      const double* w = &d.joints[j * kJointDoubles];
      const double norm = std::sqrt(w[0] * w[0] + w[1] * w[1] + w[2] * w[2] + w[3] * w[3]);
      if (std::abs(norm - 1) > 1e-6 || !(w[7] > 0)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "state: joint ", j, "'s previous pose is not a similarity (rotation norm ", norm, ", scale ", w[7], ")"));
      }
    }
    // Each joint's previous skinning matrix is its previous similarity after the inverse bind,
    // as SaveState wrote it (SkinningTransforms): the next frame moves the nodes by the change
    // from it, so one that is not (until 2026-12-07 taken as sent: a rigid 90° turn or a shear
    // put every later frame 2.4 radii off, OK) is refused, naming the joint.
    for (size_t j = 0; j < joints; ++j) {
      const double* w = &d.joints[j * kJointDoubles];
      Similarity sim;
      sim.rotation = Eigen::Quaterniond(w[0], w[1], w[2], w[3]);
      sim.translation = Eigen::Vector3d(w[4], w[5], w[6]);
      sim.scale = w[7];
      const Affine34d expect = Compose(sim.Matrix(), rig_->skeleton.inverse_bind[j]);
      double worst = 0, size = 1;
      for (int k = 0; k < 12; ++k) {
        worst = std::max(worst, std::abs(expect.data()[k] - w[8 + k]));
        size = std::max(size, std::abs(expect.data()[k]));
      }
      if (!(worst <= 1e-9 * size)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "state: joint ", j, "'s previous skinning matrix is not its previous pose after the rig's inverse bind (",
            worst, " off): a state this rig's session wrote holds that"));
      }
    }
    for (size_t k = 0; k < d.pos.size(); ++k) {
      if (!std::isfinite(d.pos[k])) {
        return absl::InvalidArgumentError(absl::StrCat("state: node ", k / 3, "'s position is not finite"));
      }
    }
    // A node tracked by the preparation that saved the state and not by this one (a newer
    // preparation leaves skin hidden inside the rest skin untracked, since 2026-12-06) follows
    // the initial skinning from the next sub-step on; one tracked here and not there starts
    // from its saved position, which is where the initial skinning put it at the saved pose.
    for (size_t i = 0; i < nodes; ++i) {
      uint8_t& v = d.state[i];
      if (v > uint8_t(VertexState::kReseeded)) {
        return absl::InvalidArgumentError(
            absl::StrCat("state: node ", i, "'s state ", int(v), " is not one a frame leaves (0 to 5)"));
      }
      if (!m_->in_field[i]) {
        v = uint8_t(VertexState::kFree);
      } else if (v == uint8_t(VertexState::kFree)) {
        v = uint8_t(VertexState::kConverged);
      }
    }
    return d;
  }

  // The previous frame's skeleton from a decoded state (not from rest).
  void TakeSkeleton(const DecodedState& d) {
    for (size_t j = 0; j < prev_world_.size(); ++j) {
      const double* w = &d.joints[j * kJointDoubles];
      prev_world_[j].rotation = Eigen::Quaterniond(w[0], w[1], w[2], w[3]);
      prev_world_[j].translation = Eigen::Vector3d(w[4], w[5], w[6]);
      prev_world_[j].scale = w[7];
      std::copy_n(w + 8, 12, prev_transforms_[j].data());
    }
    from_rest_ = false;
  }

  // Per-node rotations and the DQS positions of the CPU frames (RunsOnDevice frees them).
  void AllocateRotations() {
    rot_.resize(m_->node_count());
    skinned_.resize(rig_->positions.size());
  }

  // Sub-steps from the previous frame to the posed skeleton in world_: the largest rotation of
  // a joint per step below a third of its bend (with a floor, spec §2.8.4). Fills the local
  // frames StepTransforms interpolates.
  uint32_t PlanSubsteps() {
    const Skeleton& sk = rig_->skeleton;
    uint32_t steps = 1;
    for (size_t j = 0; j < sk.size(); ++j) {
      const double move = prev_world_[j].rotation.angularDistance(world_[j].rotation);
      const int32_t p = sk.parents[j];
      const Eigen::Quaterniond rel = p < 0 ? world_[j].rotation : world_[p].rotation.inverse() * world_[j].rotation;
      const Eigen::Quaterniond rest = p < 0 ? bind_world_[j].rotation : bind_world_[p].rotation.inverse() * bind_world_[j].rotation;
      const double bend = rel.angularDistance(rest);
      const double limit = std::max(std::min(bend / 3, config_.max_substep_radians), config_.min_substep_radians);
      // Clamped in double first: with sub-step radians as small as the parameters allow (1e-12) the
      // count passes uint32's range, and converting it would be undefined.
      const double needed = std::ceil(move / limit - 1e-9);
      steps = std::max(steps, uint32_t(std::clamp(needed, 1.0, double(std::max(config_.max_substeps, 1u)))));
    }
    steps = std::clamp(steps, 1u, std::max(config_.max_substeps, 1u));
    // Intermediate skeletons interpolate each joint relative to its parent (slerp, lerp) and
    // are composed down the hierarchy, so that a motion of the whole rig stays rigid in between.
    for (size_t j = 0; j < sk.size(); ++j) {
      const int32_t p = sk.parents[j];
      prev_local_[j] = p < 0 ? prev_world_[j] : Relative(prev_world_[p], prev_world_[j]);
      local_[j] = p < 0 ? world_[j] : Relative(world_[p], world_[j]);
    }
    return steps;
  }

  // The skinning transforms of sub-step s of `steps` (the last one is the frame's own), and
  // each joint's change since prev_transforms_.
  void StepTransforms(uint32_t s, uint32_t steps) {
    const Skeleton& sk = rig_->skeleton;
    const double t = double(s) / steps;
    for (int32_t j : sk.order) {
      Similarity l;
      l.rotation = prev_local_[j].rotation.slerp(t, local_[j].rotation).normalized();
      l.translation = (1 - t) * prev_local_[j].translation + t * local_[j].translation;
      l.scale = (1 - t) * prev_local_[j].scale + t * local_[j].scale;
      const int32_t p = sk.parents[j];
      step_world_[j] = p < 0 ? l : step_world_[p] * l;
      step_transforms_[j] = s == steps ? transforms_[j] : Compose(step_world_[j].Matrix(), sk.inverse_bind[j]);
      delta_[j] = Compose(step_transforms_[j], Inverse(prev_transforms_[j])).cast<float>();
    }
  }

  // b expressed in a's frame: a⁻¹ ∘ b.
  static Similarity Relative(const Similarity& a, const Similarity& b) {
    Similarity r;
    const Eigen::Quaterniond inv = a.rotation.conjugate();
    r.rotation = (inv * b.rotation).normalized();
    r.translation = inv * (b.translation - a.translation) / a.scale;
    r.scale = b.scale / a.scale;
    return r;
  }

  void SubStep(ThreadPool* pool) {
    const size_t nn = m_->node_count();
    // 1. Rigid predictor: each tracked node follows its own (segmentation) bone; the others
    //    take dual quaternion skinning, as in the history-independent method.
    ToDualQuats(step_transforms_, dqs_, rig_->skeleton.inverse_bind);
    DualQuaternionSkinning(rig_->positions, rig_->weights, dqs_, skinned_, pool);
    ParallelFor(pool, nn, 1024, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) {
        if (m_->in_field[i]) {
          const Affine34f& d = delta_[m_->bone[i]];
          pos_[i] = d.leftCols<3>() * pos_[i] + d.col(3);
        } else {
          const uint32_t v = m_->vertex_of_node[i];
          pos_[i] = Eigen::Vector3f(skinned_[3 * v], skinned_[3 * v + 1], skinned_[3 * v + 2]);
        }
      }
    });
    SetFields(step_transforms_);
    FindCandidates(pool);
    // 2. Newton projection onto the iso values.
    active_.clear();
    for (size_t i = 0; i < nn; ++i) {
      if (m_->in_field[i]) active_.push_back(uint32_t(i));
    }
    March(active_, false, pool);
    // 3. Rotations of the DQS blend (skinning or bone heat weights, ImplicitConfig::rotation_weights).
    ParallelFor(pool, nn, 1024, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) rot_[i] = BlendRotation(i);
    });
    // ... and each ring entry's rotated rest edge, which every ARAP term of the relaxation reads.
    rest_edge_.resize(m_->ring.size());
    ParallelFor(pool, nn, 1024, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) {
        for (uint32_t r = m_->ring_offsets[i]; r < m_->ring_offsets[i + 1]; ++r) {
          const uint32_t j = m_->ring[r];
          rest_edge_[r] = 0.5f * (rot_[i] + rot_[j]) * (P3(m_->rest, i) - P3(m_->rest, j));
        }
      }
    });
    // 4. Tangential relaxation and projection as one energy, minimised to convergence (Relax).
    Relax(pool);
    // Lost track [S]: a node out of its own bone's field's support has been carried onto another
    // surface; it restarts from dual quaternion skinning (the history-independent method's
    // start) instead of drifting on over later frames. (No distance test: in a fold the inner
    // crease legitimately moves far from its bone's rigid motion, §4.6.3.1.)
    ParallelFor(pool, nn, 1024, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) {
        if (!m_->in_field[i]) continue;
        if (LeftOwnField(i, pos_[i])) {
          const uint32_t v = m_->vertex_of_node[i];
          pos_[i] = Eigen::Vector3f(skinned_[3 * v], skinned_[3 * v + 1], skinned_[3 * v + 2]);
          state_[i] = VertexState::kReseeded;
        }
      }
    });
    // States for the output extras.
    ParallelFor(pool, nn, 1024, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) {
        if (!m_->in_field[i] || state_[i] == VertexState::kReseeded) continue;
        const FieldValue v = Eval(i, pos_[i]);
        if (state_[i] == VertexState::kMaxIterations || state_[i] == VertexState::kConverged) {
          state_[i] = std::abs(v.f - m_->iso[i]) < kStateTolerance ? VertexState::kConverged : VertexState::kMaxIterations;
        }
      }
    });
  }

  // The relaxation of one sub-step [S] (issue 15): Gauss-Newton on one energy,
  //   E(x) = ¼ Σ_i Σ_j w_ij |x_i − x_j − ½(R_i + R_j)(p⁰_i − p⁰_j)|²        ARAP, fixed rotations
  //        + Σ_i ½ k_i (f(x_i) − iso_i)²                                  on the iso surface
  //        + Σ_i Σ_o ½ k_i γ_io min(0, h_io)²                               on its own side
  //        + Σ_i ½ c_s d_i |x_i − y_i|²                                     towards DQS
  // over the free nodes (d_i the cotangent row sum, y_i the DQS position, c_s = kDqsSpring: it
  // removes the energy's near-null direction, skin sliding along a limb), k_i =
  // kSurfaceStiffness × d_i / g², g the typical field gradient 15 / (16 r̄). One own-side term per other piece o that may fold onto
  // the node's: the pieces either side of its bone's joints (parent_field) and the largest other
  // field at the start (a hand pressed into a chest). h_io = s_own (f_own − ½) − s_o (f_o − ½) +
  // the node's rest excess against o + slack: how much deeper it is in its own piece than in o
  // (OwnSideDepth); γ_io how much the two fields' gradients oppose at the start (a contact; 0 on
  // the outside of a bend). Each round solves the
  // Gauss-Newton system by preconditioned conjugate gradient, caps each node's move at its step
  // cap (scaled by a trust that grows after full steps, NextTrust) and moves by the fraction of
  // that step where a parabola fit to E along it is least (RelaxStepFraction: no trial accepted
  // or rejected, every choice continuous in the start); the rounds end when no node moves by
  // relax_tolerance, or at relaxation_rounds. f is
  // evaluated with the composition's controllers held from the relaxation's start (EvalHeld),
  // and the own-side terms with the pieces and gates chosen there (e_gate_), so that the
  // gradients are the derivatives of the values the step rule fits. The thesis alternates a tangential
  // relaxation with re-projection and stops vertices at contacts; as separate passes those rules
  // fought (a crease vertex pushed across the contact each round and pulled back), never
  // converged and made the result depend on float rounding. One energy descended to its minimum
  // is continuous in the pose.
  void Relax(ThreadPool* pool) {
    const size_t nn = m_->node_count();
    for (auto* v : {&e_g_, &e_gh_, &e_grad_, &x_old_}) v->resize(nn);
    for (auto* v : {&cg_x_, &cg_r_, &cg_d_, &cg_q_, &e_z_}) v->resize(nn);
    for (auto* v : {&e_c_, &e_k_, &node_trust_}) v->resize(nn);
    for (auto* v : {&e_field_, &e_field0_, &e_pred_, &e_size_}) v->resize(nn);
    e_cm_.resize(6 * nn);
    e_pre_.resize(kRelaxBlockFloats * nn);
    e_gate_.resize(nn * kMaxCandidates);
    free_.resize(nn);
    controls_.resize(nn * (kMaxCandidates - 1));
    const float typical2 = m_->typical_gradient2;
    ParallelFor(pool, nn, 512, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) {
        free_[i] = 0;
        std::fill_n(&e_gate_[i * kMaxCandidates], kMaxCandidates, 0.f);
        e_k_[i] = 0;
        if (!m_->in_field[i] || m_->ring_offsets[i] == m_->ring_offsets[i + 1]) continue;
        // Records the held controllers. A node whose composed gradient is null (a projection
        // that stopped in a contact's plateau) is free too: ARAP and its own-side terms still
        // move it. Held fixed (until 2026-11-28), a forearm node the last sub-step had carried
        // 0.58 deep into the upper arm at the Arm's elbow at 150° stayed there (0.083 R of
        // contact crossing in one jump, 0.048 R free).
        EvalHeld(i, pos_[i], true);
        free_[i] = 1;
        e_k_[i] = kSurfaceStiffness * m_->cot_sum[i] / typical2;
        // The own-side terms' pieces. With one term, against the largest other field only (until
        // 2026-11-28), a node of the Arm's forearm ended 0.62 deep in the upper arm's field at
        // 150°, its term held against the wrist-side forearm bone (larger there, not opposed):
        // the elbow's contact crossing read 0.11 R. A term against every other field instead
        // pushes the web between two fingers (side by side at rest) into the palm.
        // Each other candidate evaluated once; the largest of them (the first of equals, above 0).
        const int32_t own = m_->own_leaf[i];
        const uint16_t* cand = &cand_[i * kMaxCandidates];
        const FieldValue mine = LeafValue(own, pos_[i]);
        FieldValue value[kMaxCandidates];
        int largest = -1;
        for (int c = 0; c < cand_count_[i]; ++c) {
          if (cand[c] == own) continue;
          value[c] = LeafValue(cand[c], pos_[i]);
          if (value[c].f > (largest < 0 ? 0.f : value[largest].f)) largest = c;
        }
        for (int c = 0; c < cand_count_[i]; ++c) {
          if (cand[c] != own && (c == largest || AdjacentFields(m_->parent_field.data(), cand[c], own))) {
            e_gate_[i * kMaxCandidates + c] = ContactGate(mine, value[c]);
          }
        }
        // Every third piece (not either side of the node's bone's joints) is read at the node's
        // DQS position too, and the larger gate kept: a fingertip bent onto its palm, or BCN's chin
        // onto its chest, comes from the side, where the elastic start may already have slid past
        // the contact that DQS's rigid pieces still show. Read only against the largest other field
        // where the node is (until 2026-12-06), the Arm's middle finger crossed its MCP's contact
        // by 0.348 R at 150° and its PIP's by 0.444 R (0.024 and 0.071 R with every third piece);
        // read against pieces that touch at rest too (fingers side by side), the left hand's
        // fingers held each other apart. kThirdPieceRestField.
        const Eigen::Vector3f y = SkinnedNode(i);
        const Eigen::Vector3f rest(m_->rest[3 * i], m_->rest[3 * i + 1], m_->rest[3 * i + 2]);
        FieldValue mine_y;
        bool have_mine_y = false;
        for (int c = 0; c < cand_count_[i]; ++c) {
          if (cand[c] == own || AdjacentFields(m_->parent_field.data(), cand[c], own)) continue;
          const FieldValue other_y = LeafValue(cand[c], y);
          if (!(other_y.f > 0) || m_->grids[cand[c]].Sample(rest) > kThirdPieceRestField) continue;
          if (!have_mine_y) {
            mine_y = LeafValue(own, y);
            have_mine_y = true;
          }
          float& gate = e_gate_[i * kMaxCandidates + c];
          gate = std::max(gate, ContactGate(mine_y, other_y));
        }
      }
    });
    // Each connected component of the welded mesh is its own minimisation (ImplicitModel::
    // component_nodes): E has no term between two, so each runs its own rounds with its own CG
    // scalars, step fraction, trust and end (RelaxComponent). When no component holds more than
    // half the nodes (BCN_Epileptic: body 1 004, head 874, legs 573, two eyes of 81, jaw 20) they
    // relax side by side on the pool, largest first, each on one thread with no hand-off between
    // its passes. Until 2026-12-01 they ran in step, every pass a ParallelFor over the whole mesh
    // and every sum a serial pass over it, so that the character's elastic frame hardly gained
    // from a second thread (309 ms against 326 on 1). Otherwise (a mesh in one piece, or one piece
    // holding most of it) one at a time, a large one's passes split over the pool. Every sum is
    // added in the device program's order (LaneSum), so the result does not depend on which.
    const size_t nc = m_->component_offsets.size() - 1;
    partial_.resize(nn);
    if (order_.size() != nc) {  // once per session: the model's components do not change
      order_.resize(nc);
      for (uint32_t c = 0; c < nc; ++c) order_[c] = c;
      std::sort(order_.begin(), order_.end(), [&](uint32_t a, uint32_t b) {
        const uint32_t sa = m_->ComponentSize(a), sb = m_->ComponentSize(b);
        return sa != sb ? sa > sb : a < b;
      });
    }
    if (pool != nullptr && pool->workers() > 0 && nc > 1 && 2 * size_t{m_->ComponentSize(order_[0])} <= nn) {
      ParallelFor(pool, nc, 1, [&](size_t b, size_t e) {
        for (size_t k = b; k < e; ++k) RelaxComponent(order_[k], nullptr);
      });
    } else {
      for (uint32_t c : order_) RelaxComponent(c, pool);
    }
  }

  // The relaxation of connected component c (Relax): rounds of a Gauss-Newton system solved by
  // preconditioned CG, each node's move capped, and the fraction of the step the step rule
  // takes, until no node moves by the tolerance or the round limit. Its passes run over its nodes
  // on `pool` (the CG's from 2 048 nodes; null: on this thread), each sum in the device
  // program's order (LaneSum). Writes only its own nodes' entries of the per-node arrays, so
  // that components may relax side by side.
  void RelaxComponent(uint32_t c, ThreadPool* pool) {
    const uint32_t* nodes = m_->component_nodes.data() + m_->component_offsets[c];
    const uint32_t size = m_->ComponentSize(c);
    ThreadPool* cg_pool = size >= 2048 ? pool : nullptr;
    // body(i) for every node i of the component, in chunks of at most `grain` on `on`.
    auto each = [&](ThreadPool* on, size_t grain, auto&& body) {
      ParallelFor(on, size, grain, [&](size_t b, size_t e) {
        for (size_t k = b; k < e; ++k) body(nodes[k]);
      });
    };
    // The sum of value(i) over the component's nodes.
    double* const part = partial_.data();
    auto sum = [&](ThreadPool* on, auto&& value) {
      each(on, 2048, [&](uint32_t i) { part[i] = value(i); });
      return LaneSum(nodes, size);
    };
    auto energy_of = [&] { return sum(pool, [&](uint32_t i) { return NodeEnergy(i); }); };
    const float tol = float(config_.relaxation_tolerance * m_->mean_edge);  // ImplicitConfig::relaxation_tolerance
    float trust = 1.f;  // the step caps' scale (NextTrust)
    for (uint32_t k = 0; k < size; ++k) node_trust_[nodes[k]] = 1.f;  // each node's (NextNodeTrust)
    double energy = energy_of();
    bool stalled = config_.relaxation_rounds > 0;  // ends at the round limit
    for (uint32_t round = 0; round < config_.relaxation_rounds; ++round) {
      if (StopWanted()) {  // Deform then puts back the state the frame started from
        stalled = false;
        break;
      }
      // The gradient, and the Gauss-Newton system H δ = −∇E by preconditioned CG.
      each(pool, 512, [&](uint32_t i) {
        cg_x_[i].setZero();
        e_grad_[i].setZero();
        cg_r_[i].setZero();
        e_z_[i].setZero();
        cg_d_[i].setZero();
        if (!free_[i]) return;
        Eigen::Vector3f acc = Eigen::Vector3f::Zero();
        for (uint32_t r = m_->ring_offsets[i]; r < m_->ring_offsets[i + 1]; ++r) acc += m_->cot[r] * ArapEdge(i, r);
        acc += e_k_[i] * (e_c_[i] * e_g_[i] + e_gh_[i]);
        acc += (kDqsSpring * m_->cot_sum[i]) * (pos_[i] - SkinnedNode(i));
        e_grad_[i] = acc;
        cg_r_[i] = Eigen::Vector4f(-acc.x(), -acc.y(), -acc.z(), 0.f);
        e_z_[i] = Precondition(i, cg_r_[i]);
        cg_d_[i] = e_z_[i];
      });
      double rz = sum(cg_pool, [&](uint32_t i) { return double(cg_r_[i].head<3>().dot(e_z_[i].head<3>())); });
      const double stop = kCgStop * rz;
      for (uint32_t it = 0; it < config_.relaxation_iterations && rz > stop && rz > 0; ++it) {
        const double dq = sum(cg_pool, [&](uint32_t i) {
          cg_q_[i] = Hessian(i, cg_d_);
          return double(cg_d_[i].head<3>().dot(cg_q_[i].head<3>()));
        });
        if (!(dq > 0)) break;  // a non-positive curvature ends the solve
        const float alpha = float(rz / dq);
        ParallelFor(cg_pool, size, 2048, [&](size_t b, size_t e) {
          Eigen::Vector4f *x = cg_x_.data(), *res = cg_r_.data(), *z = e_z_.data();
          const Eigen::Vector4f *d = cg_d_.data(), *q = cg_q_.data();
          const uint8_t* free = free_.data();
          for (size_t k = b; k < e; ++k) {
            const uint32_t i = nodes[k];
            x[i] += alpha * d[i];
            res[i] -= alpha * q[i];
            z[i] = free[i] ? Precondition(i, res[i]) : Eigen::Vector4f::Zero();
            part[i] = double(res[i].head<3>().dot(z[i].head<3>()));
          }
        });
        const double rz_next = LaneSum(nodes, size);
        const float beta = float(rz_next / rz);
        rz = rz_next;
        each(cg_pool, 2048, [&](uint32_t i) { cg_d_[i] = e_z_[i] + beta * cg_d_[i]; });
      }
      // A linearised move is only valid near the point: each node moves at most its step cap.
      float dmax = 0.f;
      for (uint32_t k = 0; k < size; ++k) {
        const uint32_t i = nodes[k];
        x_old_[i] = pos_[i];
        if (!free_[i]) continue;
        const float len = cg_x_[i].head<3>().norm(), cap = trust * m_->step_cap[i] * node_trust_[i];
        if (len > cap) cg_x_[i] *= cap / len;
        dmax = std::max(dmax, cg_x_[i].head<3>().norm());
      }
      const double slope = sum(cg_pool, [&](uint32_t i) { return double(e_grad_[i].dot(cg_x_[i].head<3>())); });
      if (!(slope < 0)) {  // not a descent direction: its last round
        stalled = false;
        break;
      }
      // The step: E at the full step, and the fraction of it where the parabola through E, the
      // slope and that value is least (RelaxStepFraction).
      for (uint32_t k = 0; k < size; ++k) {
        const uint32_t i = nodes[k];
        if (free_[i]) pos_[i] = x_old_[i] + cg_x_[i].head<3>();
      }
      // From round kNodeTrustRound − 1 on, each node's field terms along its capped step: at the
      // start and in their model, for its trust after the step (NextNodeTrust).
      const bool node_trust = round + 1 >= kNodeTrustRound;
      if (node_trust) {
        for (uint32_t k = 0; k < size; ++k) {
          const uint32_t i = nodes[k];
          if (!free_[i]) continue;
          e_field0_[i] = e_field_[i];
          NodeStepModel(e_k_[i], e_c_[i], e_g_[i].data(), e_gh_[i].data(), &e_cm_[6 * i], cg_x_[i].data(), &e_pred_[i],
                        &e_size_[i]);
        }
      }
      const double trial = energy_of();
      if (node_trust) {
        for (uint32_t k = 0; k < size; ++k) {
          const uint32_t i = nodes[k];
          if (free_[i]) node_trust_[i] = NextNodeTrust(node_trust_[i], e_field0_[i], e_field_[i], e_pred_[i], e_size_[i]);
        }
      }
      const float step = RelaxStepFraction(energy, slope, trial);
      if (step < 1) {
        for (uint32_t k = 0; k < size; ++k) {
          const uint32_t i = nodes[k];
          if (free_[i]) pos_[i] = x_old_[i] + step * cg_x_[i].head<3>();
        }
        energy = energy_of();
      } else {
        energy = trial;
      }
      trust = NextTrust(trust, step);
      if (step * dmax < tol) {
        stalled = false;
        break;
      }
    }
    // ImplicitConfig::average_stalled_relaxations: x_old_ holds the last round's start.
    if (stalled && config_.average_stalled_relaxations) {
      for (uint32_t k = 0; k < size; ++k) {
        const uint32_t i = nodes[k];
        if (free_[i]) pos_[i] = 0.5f * (x_old_[i] + pos_[i]);
      }
    }
  }

  // The composed field at x for node i with the composition's controllers held through the
  // relaxation: `record` (its start) writes their values, every later evaluation reads them.
  // The controllers follow the gradients' angle, and the field's gradient omits their
  // derivative (∂g/∂d · ∇d, spec pitfall 17); with them held, that gradient is the derivative of
  // the value the energy sees, so the step rule's slope agrees with the Gauss-Newton model.
  FieldValue EvalHeld(size_t i, const Eigen::Vector3f& x, bool record) {
    return Evaluator(*m_, leaves_.data())
        .EvalHeld(x, &cand_[i * kMaxCandidates], cand_count_[i], &controls_[i * (kMaxCandidates - 1)], record);
  }

  // Node i's DQS position in this sub-step (skinned_, made by SubStep).
  Eigen::Vector3f SkinnedNode(size_t i) const {
    const uint32_t v = m_->vertex_of_node[i];
    return Eigen::Vector3f(skinned_[3 * v], skinned_[3 * v + 1], skinned_[3 * v + 2]);
  }

  // The ARAP residual of ring entry r of node i at pos_: x_i − x_j − ½(R_i + R_j)(p⁰_i − p⁰_j)
  // (the last term made once per sub-step, rest_edge_).
  Eigen::Vector3f ArapEdge(size_t i, uint32_t r) const { return (pos_[i] - pos_[m_->ring[r]]) - rest_edge_[r]; }

  // How much the two fields' gradients oppose, in [0, 1] (ContactGateOfCosine).
  float ContactGate(const FieldValue& mine, const FieldValue& other) {
    if (!(other.f > 0)) return 0.f;
    const float gm = mine.g.norm(), go = other.g.norm();
    if (!(gm > 0 && go > 0)) return 0.f;
    return ContactGateOfCosine(mine.g.dot(other.g) / (gm * go), float(config_.contact_gate_open));
  }

  // Node i's terms of E at pos_ (its ARAP ring, and when free its iso, own-side and DQS terms),
  // leaving its field terms for the gradient and the CG (e_g_, e_c_, e_gh_, e_cm_, e_pre_).
  double NodeEnergy(size_t i) {
    double e = 0;
    for (uint32_t r = m_->ring_offsets[i]; r < m_->ring_offsets[i + 1]; ++r) {
      e += 0.25 * double(m_->cot[r]) * double(ArapEdge(i, r).squaredNorm());
    }
    if (free_[i]) {
      const FieldValue v = EvalHeld(i, pos_[i], false);
      e_g_[i] = v.g;
      e_c_[i] = v.f - m_->iso[i];
      e_gh_[i].setZero();
      float* cm = &e_cm_[6 * i];
      std::fill_n(cm, 6, 0.f);
      double hh = 0;
      const int32_t own = m_->own_leaf[i];
      const float so = m_->depth_scale[own];
      FieldValue mine;
      bool have_mine = false;
      for (int c = 0; c < cand_count_[i]; ++c) {
        const float gate = e_gate_[i * kMaxCandidates + c];
        if (!(gate > 0)) continue;
        if (!have_mine) {
          mine = LeafValue(own, pos_[i]);
          have_mine = true;
        }
        const uint16_t leaf = cand_[i * kMaxCandidates + c];
        const FieldValue other = LeafValue(leaf, pos_[i]);
        // How much deeper the node is in its own piece than in the other, on one scale
        // (ImplicitModel::depth_scale), beyond what it was at rest.
        const float sx = m_->depth_scale[leaf];
        const float h = OwnSideDepth(so, mine.f, sx, other.f) + kOwnSideSlack +
                        RestExcess(&m_->rest_pair_leaf[kRestPairs * i], &m_->rest_pair_excess[kRestPairs * i], leaf);
        if (h < 0) {
          const Eigen::Vector3f gh = so * mine.g - sx * other.g;
          e_gh_[i] += (gate * h) * gh;
          cm[0] += gate * gh.x() * gh.x();
          cm[1] += gate * gh.x() * gh.y();
          cm[2] += gate * gh.x() * gh.z();
          cm[3] += gate * gh.y() * gh.y();
          cm[4] += gate * gh.y() * gh.z();
          cm[5] += gate * gh.z() * gh.z();
          hh += double(gate) * h * h;
        }
      }
      e_field_[i] = 0.5 * double(e_k_[i]) * (double(e_c_[i]) * e_c_[i] + hh);
      e += e_field_[i];
      e += 0.5 * double(kDqsSpring * m_->cot_sum[i]) * double((pos_[i] - SkinnedNode(i)).squaredNorm());
      RelaxBlockInverse(RelaxDiagonal(m_->cot_sum[i]), e_k_[i], e_g_[i].data(), cm, &e_pre_[kRelaxBlockFloats * i]);
    }
    return e;
  }

  // The Gauss-Newton matrix times v at free node i: Σ_j w_ij (v_i − v_j) + k g gᵀ v_i + k Σ_o γ_o
  // ∇h_o ∇h_oᵀ v_i + c_s d_i v_i. `v` is the CG's direction, 0 at fixed nodes (the CG never
  // moves them), so a fixed neighbour j contributes w_ij v_i, as it must.
  [[gnu::always_inline]] Eigen::Vector4f Hessian(size_t i, const std::vector<Eigen::Vector4f>& v) const {
    if (!free_[i]) return Eigen::Vector4f::Zero();
    Eigen::Vector4f acc = Eigen::Vector4f::Zero();
    const Eigen::Vector4f vi = v[i];
    const uint32_t* ring = m_->ring.data();
    const float* cot = m_->cot.data();
    const Eigen::Vector4f* vv = v.data();
    for (uint32_t r = m_->ring_offsets[i], r1 = m_->ring_offsets[i + 1]; r < r1; ++r) {
      acc += cot[r] * Eigen::Vector4f(vi - vv[ring[r]]);
    }
    const float* cm = &e_cm_[6 * i];
    const Eigen::Vector3f x = vi.head<3>();
    const Eigen::Vector3f cx(cm[0] * x.x() + cm[1] * x.y() + cm[2] * x.z(),
                             cm[1] * x.x() + cm[3] * x.y() + cm[4] * x.z(),
                             cm[2] * x.x() + cm[4] * x.y() + cm[5] * x.z());
    const Eigen::Vector3f k = e_k_[i] * (e_g_[i].dot(x) * e_g_[i] + cx);
    const Eigen::Vector3f spring = (kDqsSpring * m_->cot_sum[i]) * x;
    // Added per component: a Vector4f built from k or spring went through the stack, and the
    // 16-byte reload of its 8 + 4 stored bytes stalled on store forwarding (about a tenth of an
    // elastic frame, 2026-12-02). The same additions in the same order.
    return Eigen::Vector4f((acc.x() + k.x()) + spring.x(), (acc.y() + k.y()) + spring.y(), (acc.z() + k.z()) + spring.z(),
                           acc.w());
  }

  // The inverse of H's 3x3 diagonal block at node i, d I + k (g gᵀ + Σ_o γ_o ∇h_o ∇h_oᵀ) (d: the
  // row sum and the DQS spring, RelaxDiagonal), applied to y: the block's inverse as Energy left
  // it (e_pre_, implicit_device::RelaxBlockInverse); w = 0.
  Eigen::Vector4f Precondition(size_t i, const Eigen::Vector4f& y) const {
    Eigen::Vector4f z;
    ApplyRelaxBlock(&e_pre_[kRelaxBlockFloats * i], y.data(), z.data());
    z.w() = 0.f;
    return z;
  }

  // The sum of partial_ over a component's `size` nodes, added in the device program's order
  // (kReduceLanes: lane t takes the nodes t, t + lanes, ... in ascending order; then the lanes
  // pairwise, halving), so that the CPU and the device differ only where their per-node
  // arithmetic does: the CG's scalars decide every later iterate. Lanes past the component's size
  // hold 0 on the device and are skipped here (adding 0 changes no sum), so a mesh of many small
  // pieces costs no 256 lanes each.
  double LaneSum(const uint32_t* nodes, uint32_t size) const {
    double lane[kReduceLanes];
    uint32_t width = std::min(size, kReduceLanes);
    std::fill_n(lane, width, 0.0);
    // Row by row: each lane's additions in the same order as lane by lane, but the lanes'
    // independent additions overlap instead of waiting on one lane's chain (2026-12-02: the lane
    // by lane loop was 5 % of an elastic frame, bound by the add's latency).
    for (uint32_t base = 0; base < size; base += kReduceLanes) {
      const uint32_t row = std::min(kReduceLanes, size - base);
      for (uint32_t l = 0; l < row; ++l) lane[l] += partial_[nodes[base + l]];
    }
    for (uint32_t stride = kReduceLanes / 2; stride > 0; stride /= 2) {
      for (uint32_t l = 0; l < stride && l + stride < width; ++l) {
        lane[l] += lane[l + stride];
      }
      width = std::min(width, stride);
    }
    return size > 0 ? lane[0] : 0.0;
  }

  // The rotation of the DQS blend at node i, with the skinning weights of its first vertex or
  // its bone heat weights (ImplicitConfig::rotation_weights).
  Eigen::Matrix3f BlendRotation(size_t i) const {
    return RotationOfBlend(uint32_t(i), config_.rotation_weights == RotationWeights::kHarmonic);
  }

  std::vector<Similarity> bind_world_, prev_world_;
  std::vector<Affine34d> prev_transforms_;
  std::vector<Similarity> step_world_, prev_local_, local_;
  std::vector<Affine34d> step_transforms_;
  std::vector<Affine34f> delta_;
  std::vector<Eigen::Matrix3f> rot_;
  // Per ring entry r (node i, neighbour j): ½(R_i + R_j)(p⁰_i − p⁰_j), the rotated rest edge of
  // the ARAP term, fixed through a sub-step's relaxation.
  std::vector<Eigen::Vector3f> rest_edge_;
  std::vector<float> skinned_;
  std::vector<uint8_t> free_;
  // The composition's controller values per node, held through one relaxation (EvalHeld).
  std::vector<float> controls_;
  // The contact gate γ of each node's own-side term against each of its candidates (0: no term),
  // set at the relaxation's start and held through it like the controllers.
  std::vector<float> e_gate_;
  // Per free node, Σ_o γ_o ∇h_o ∇h_oᵀ (symmetric: xx, xy, xz, yy, yz, zz) where h_o < 0.
  std::vector<float> e_cm_;
  // The CG's vectors, padded to 4 floats (w = 0) so that a node's arithmetic runs in one SSE
  // register; every sum over x, y, z keeps the order it had on 3 floats (head<3>).
  std::vector<Eigen::Vector4f> cg_x_, cg_r_, cg_d_, cg_q_, e_z_;
  // Relax's per-node terms: field gradient, Σ_o γ_o h_o ∇h_o (where h_o < 0), energy gradient,
  // preconditioned residual, the positions before a round's step; field residual, stiffness k.
  std::vector<Eigen::Vector3f> e_g_, e_gh_, e_grad_, x_old_;
  std::vector<float> e_c_, e_k_;
  // Per-node trust (NextNodeTrust): the caps' scale, and per node its field terms' energy at the
  // last evaluation and at the round's start, and their model's change and size along its step.
  std::vector<float> node_trust_;
  std::vector<double> e_field_, e_field0_, e_pred_, e_size_;
  // Per free node: the inverse of its 3x3 block of the Gauss-Newton matrix at the positions
  // Energy last saw (RelaxBlockInverse), which every CG iteration of the next round applies.
  std::vector<float> e_pre_;
  // Per node, the term of a sum being formed (LaneSum); the components, largest first (Relax).
  std::vector<double> partial_;
  std::vector<uint32_t> order_;
  bool device_reset_ = true;
  // Whether the session is at rest (no frame since creation, Reset or a from-rest LoadState):
  // what SaveState saves then.
  bool from_rest_ = true;
  // The frame's FrameInput::stop while Deform runs (null: never stop), whether it has said stop
  // (kept: a relaxation that broke off must not be taken for a finished one should the function
  // say otherwise later; set from the pool's threads), and the state the frame started from, put
  // back when it stops.
  const StopFn* stop_ = nullptr;
  std::atomic<bool> stopped_{false};
  std::vector<Eigen::Vector3f> undo_pos_;
  std::vector<VertexState> undo_state_;
  std::vector<Affine34d> undo_transforms_;

  bool StopWanted() {
    if (stopped_.load(std::memory_order_relaxed)) return true;
    if (stop_ == nullptr || !(*stop_)()) return false;
    stopped_.store(true, std::memory_order_relaxed);
    return true;
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<Deformer>> CreateImplicitDeformer(std::shared_ptr<const Rig> rig,
                                                                 std::shared_ptr<const Prepared> prepared,
                                                                 const DeformerConfig& config) {
  auto model = std::dynamic_pointer_cast<const ImplicitModel>(prepared);
  if (!model) return absl::InternalError("implicit skinning created without its precomputation");
  const ImplicitConfig& c = ParamsOf<ImplicitConfig>(config);
  if (!(c.sigma > 0 && c.sigma <= 1)) return absl::InvalidArgumentError("implicit.sigma: in (0, 1]");
  if (c.max_iterations == 0 || c.max_iterations > 1000) {
    return absl::InvalidArgumentError("implicit.max_iterations: in [1, 1000]");
  }
  if (!(c.contact_angle_degrees > 0 && c.contact_angle_degrees <= 180)) {
    return absl::InvalidArgumentError("implicit.contact_angle_degrees: in (0, 180]");
  }
  if (c.smoothing_iterations > 100) return absl::InvalidArgumentError("implicit.smoothing_iterations: at most 100");
  if (c.relaxation_iterations > 10000) return absl::InvalidArgumentError("implicit.relaxation_iterations: at most 10000");
  if (!(c.min_substep_radians > 0)) return absl::InvalidArgumentError("implicit.min_substep_radians: > 0");
  if (!(c.max_substep_radians > 0)) return absl::InvalidArgumentError("implicit.max_substep_radians: > 0");
  if (c.min_substep_radians > c.max_substep_radians) {
    return absl::InvalidArgumentError("implicit.min_substep_radians: at most implicit.max_substep_radians");
  }
  if (c.max_substeps == 0 || c.max_substeps > 1024) return absl::InvalidArgumentError("implicit.max_substeps: in [1, 1024]");
  if (!(c.min_field_radius >= 0 && c.min_field_radius <= 1)) {
    return absl::InvalidArgumentError("implicit.min_field_radius: in [0, 1]");
  }
  if (!(c.relaxation_tolerance >= 0 && c.relaxation_tolerance <= 0.1)) {
    return absl::InvalidArgumentError("implicit.relaxation_tolerance: in [0, 0.1]");
  }
  if (!(c.contact_gate_open > -0.2 && c.contact_gate_open <= 1)) {
    return absl::InvalidArgumentError("implicit.contact_gate_open: in (-0.2, 1]");
  }
  if (c.min_field_radius != model->min_field_radius) {
    return absl::FailedPreconditionError(absl::StrCat("implicit.min_field_radius = ", c.min_field_radius,
                                                      " needs a preparation made with it (made with ",
                                                      model->min_field_radius, ")"));
  }
  if (c.sample_triangles != model->sample_triangles) {
    return absl::FailedPreconditionError(absl::StrCat("implicit.sample_triangles = ", c.sample_triangles ? "true" : "false",
                                                      " needs a preparation made with it (its preparation key differs)"));
  }
  if ((c.sample_triangles && c.track_sampled_pieces) != model->track_sampled_pieces) {
    return absl::FailedPreconditionError(absl::StrCat("implicit.track_sampled_pieces = ",
                                                      c.track_sampled_pieces ? "true" : "false",
                                                      " needs a preparation made with it (its preparation key differs)"));
  }
  if (c.rotation_weights == RotationWeights::kHarmonic && model->heat.offsets.size() != model->node_count() + 1) {
    return absl::FailedPreconditionError(
        "implicit.rotation_weights = harmonic needs a preparation made with it (its preparation key differs)");
  }
  if (!rig->skeleton.inverse_bind_is_similarity) {
    return absl::FailedPreconditionError(absl::StrCat(
        "implicit skinning starts from dual quaternion skinning, which needs inverse bind matrices that are "
        "similarities; this rig's ", NotSimilarity(rig->skeleton)));
  }
  if (config.method == "elastic-implicit") {
    return std::make_unique<ElasticImplicitDeformer>(std::move(rig), std::move(model), config);
  }
  return std::make_unique<ImplicitDeformer>(std::move(rig), std::move(model), config);
}

}  // namespace sinew

