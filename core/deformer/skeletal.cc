#include "core/deformer/skeletal.h"

#include "absl/strings/str_cat.h"
#include "core/dqs/dqs.h"

namespace sinew {

SkeletalDeformer::SkeletalDeformer(std::shared_ptr<const Rig> rig, JointData data, const char* method_name,
                                   std::string_view kernel)
    : rig_(std::move(rig)),
      data_(data),
      method_name_(method_name),
      kernel_(kernel),
      world_(rig_->joint_count()),
      transforms_(rig_->joint_count()),
      rotations_(rig_->joint_count()) {}

absl::Status SkeletalDeformer::CheckRig(const Rig& rig, const char* method_name) {
  if (rig.joint_count() == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("method ", method_name, " needs a skeleton; the rig has none"));
  }
  if (rig.weights.offsets.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("method ", method_name, " needs skinning weights; the rig has none"));
  }
  return absl::OkStatus();
}

absl::Status CheckSkeletalFrame(const Rig& rig, const FrameInput& frame, const char* method) {
  if (frame.pose == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("pose: required by method ", method));
  }
  if (auto st = ValidatePose(*frame.pose, rig.joint_count()); !st.ok()) return st;
  if (auto st = ValidateCageFrames(rig, frame.cages); !st.ok()) return st;
  if (!frame.cages.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("cages: method ", method, " takes no cage input"));
  }
  if (frame.posed_cage != nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("posed_cage: method ", method, " takes no cage input"));
  }
  // Ignored until 2026-12-03: a client sending the wrong input thought it drove something.
  if (frame.spheres != nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("spheres: method ", method, " takes no sphere-mesh input"));
  }
  return absl::OkStatus();
}

void WriteJointData(JointData data, std::span<const Affine34d> transforms, std::span<float> out,
                    std::span<const Affine34d> inverse_bind) {
  const size_t joints = transforms.size();
  for (size_t j = 0; j < joints; ++j) {
    float* o = &out[12 * j];
    if (data != JointData::kDualQuat) {
      const Affine34f m = transforms[j].cast<float>();
      std::copy(m.data(), m.data() + 12, o);
      if (data == JointData::kMatrix) continue;
      o += 12 * joints;  // kBoth: the dual quaternions follow every joint's matrix
    }
    DualQuat dq;
    ToDualQuats(transforms.subspan(j, 1), std::span<DualQuat>(&dq, 1),
                j < inverse_bind.size() ? inverse_bind.subspan(j, 1) : std::span<const Affine34d>());
    std::copy(dq.v, dq.v + 8, o);
    o[8] = dq.scale;
    std::copy(dq.shift, dq.shift + 3, o + 9);
  }
}

absl::Status SkeletalJointData(const Rig& rig, JointData data, const FrameInput& frame,
                               std::span<Similarity> world, std::span<Affine34d> transforms,
                               std::span<float> out) {
  const char* name = data == JointData::kMatrix ? "lbs" : data == JointData::kDualQuat ? "dqs" : "skinning";
  if (auto st = CheckSkeletalFrame(rig, frame, name); !st.ok()) return st;
  SkinningTransforms(rig.skeleton, *frame.pose, world, transforms);
  WriteJointData(data, transforms, out, rig.skeleton.inverse_bind);
  return absl::OkStatus();
}

absl::Status SkeletalDeformer::Deform(const FrameInput& frame, std::span<float> out,
                                      ThreadPool* pool) {
  if (auto st = CheckSkeletalFrame(*rig_, frame, method_name_); !st.ok()) return st;
  if (out.size() != rig_->positions.size()) {
    return absl::InternalError("output buffer does not hold 3 floats per vertex");
  }
  SkinningTransforms(rig_->skeleton, *frame.pose, world_, transforms_);
  Skin(rig_->positions, out, pool);
  return absl::OkStatus();
}

absl::Status SkeletalDeformer::DeformAfter(const FrameInput& frame, std::span<const float> in, std::span<float> out,
                                           ThreadPool* pool) {
  if (auto st = CheckSkeletalFrame(*rig_, frame, method_name_); !st.ok()) return st;
  if (out.size() != rig_->positions.size() || in.size() != out.size()) {
    return absl::InternalError("pipeline buffers do not hold 3 floats per vertex");
  }
  SkinningTransforms(rig_->skeleton, *frame.pose, world_, transforms_);
  Skin(in, out, pool);
  return absl::OkStatus();
}

DeviceStage SkeletalDeformer::device_stage() const {
  DeviceStage s;
  s.kernel = kernel_;
  return s;
}

absl::Status SkeletalDeformer::DeviceFrame(const FrameInput& frame, std::vector<float>& params) {
  params.resize(device_param_count());
  if (auto st = CheckSkeletalFrame(*rig_, frame, method_name_); !st.ok()) return st;
  SkinningTransforms(rig_->skeleton, *frame.pose, world_, transforms_);
  WriteJointData(data_, transforms_, params, rig().skeleton.inverse_bind);
  return absl::OkStatus();
}

absl::Status SkeletalDeformer::Offers(const FrameExtras& wanted) const {
  FrameExtras rest = wanted;
  rest.normals = nullptr;
  if (auto st = Deformer::Offers(rest); !st.ok()) return st;
  if (wanted.normals == nullptr) return absl::OkStatus();
  const Rig& rig = *rig_;
  if (rig.triangle_count() > 0 || rig.normals.size() != rig.positions.size()) {
    return absl::FailedPreconditionError(
        "outputs.normals: skinning moves uploaded normals of point sets (rigs without triangles); this rig has "
        "triangles, or no normals");
  }
  return absl::OkStatus();
}

absl::Status SkeletalDeformer::Extras(const FrameExtras& extras) const {
  if (auto st = SkeletalDeformer::Offers(extras); !st.ok()) return st;
  if (extras.normals == nullptr) return absl::OkStatus();
  const Rig& rig = *rig_;
  const size_t n = rig.vertex_count();
  std::vector<float>& out = *extras.normals;
  out.resize(3 * n);
  const SkinWeights& w = rig.weights;
  // Each joint's rotation, as DQS takes it (ToDualQuats: the real part; nearest rotation of a
  // non-similarity), into scratch sized at construction.
  ToDualQuats(transforms_, rotations_);  // the real parts only: no centres needed
  for (size_t v = 0; v < n; ++v) {
    const Eigen::Vector3d nr(rig.normals[3 * v], rig.normals[3 * v + 1], rig.normals[3 * v + 2]);
    Eigen::Matrix3d a = Eigen::Matrix3d::Zero();
    // The rotations blended in the hemisphere of the dominant influence's, as DQS blends them.
    uint32_t dominant = w.offsets[v];
    for (uint32_t e = w.offsets[v]; e < w.offsets[v + 1]; ++e) {
      if (w.weights[e] > w.weights[dominant]) dominant = e;
    }
    const Eigen::Vector4d q0(Eigen::Map<const Eigen::Vector4f>(rotations_[w.joints[dominant]].v).cast<double>());
    Eigen::Vector4d q = Eigen::Vector4d::Zero();
    for (uint32_t e = w.offsets[v]; e < w.offsets[v + 1]; ++e) {
      a += double(w.weights[e]) * transforms_[w.joints[e]].leftCols<3>();
      Eigen::Vector4d c(Eigen::Map<const Eigen::Vector4f>(rotations_[w.joints[e]].v).cast<double>());
      if (c.dot(q0) < 0) c = -c;
      q += double(w.weights[e]) * c;
    }
    // Cofactor matrix = det(A) A^-T: moves normals like A^-T without dividing by det(A).
    Eigen::Matrix3d cof;
    cof.col(0) = a.col(1).cross(a.col(2));
    cof.col(1) = a.col(2).cross(a.col(0));
    cof.col(2) = a.col(0).cross(a.col(1));
    Eigen::Vector3d lbs = cof * nr;
    Eigen::Vector3d dqs = q.norm() > 0 ? Eigen::Quaterniond(q.normalized()) * nr : nr;
    if (lbs.norm() > 0) lbs.normalize();
    const double s = DualQuaternionShare(v);
    Eigen::Vector3d m = (1 - s) * lbs + s * dqs;
    if (m.norm() > 0) m.normalize();
    for (int k = 0; k < 3; ++k) out[3 * v + k] = float(m[k]);
  }
  return absl::OkStatus();
}

size_t SkeletalDeformer::StateBytes() const {
  return sizeof(*this) + world_.size() * sizeof(Similarity) + transforms_.size() * sizeof(Affine34d) +
         rotations_.size() * sizeof(DualQuat);
}

}  // namespace sinew
