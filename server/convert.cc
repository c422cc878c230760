#include "server/convert.h"

#include <cmath>
#include <cstring>
#include <vector>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/unknown_field_set.h>
#include <google/protobuf/wire_format_lite.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/deformer/pipeline.h"
#include "server/params_proto.h"
#include "server/version.h"

namespace sinew::server {
namespace {

static_assert(std::endian::native == std::endian::little,
              "packed arrays are little-endian; a big-endian port must byte-swap here");

// Copies a packed array of `arity`-tuples of T from `bytes` into `out`.
template <class T>
absl::Status Unpack(const std::string& bytes, size_t arity, std::vector<T>& out,
                    absl::string_view field) {
  const size_t tuple = arity * sizeof(T);
  if (bytes.size() % tuple != 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", bytes.size(),
                                                   " bytes is not a multiple of ", tuple,
                                                   " (", arity, " x ", sizeof(T), " bytes)"));
  }
  out.resize(bytes.size() / sizeof(T));
  if (!bytes.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return absl::OkStatus();
}

Similarity TransformFromProto(const v1::Transform& t) {
  Similarity s;
  // An absent rotation message is the identity, not a zero quaternion.
  if (t.has_rotation()) {
    s.rotation = Eigen::Quaterniond(t.rotation().w(), t.rotation().x(), t.rotation().y(),
                                    t.rotation().z());
  }
  s.translation = Eigen::Vector3d(t.translation().x(), t.translation().y(), t.translation().z());
  s.scale = t.has_scale() ? t.scale() : 1.0;
  return s;
}

}  // namespace

absl::StatusOr<RigInput> RigFromProto(const v1::Rig& r) {
  RigInput in;
  Rig& rig = in.rig;
  rig.name = r.name();
  absl::Status st;
  if (!(st = Unpack(r.mesh().positions(), 3, rig.positions, "rig.mesh.positions")).ok()) return st;
  if (!(st = Unpack(r.mesh().triangles(), 3, rig.triangles, "rig.mesh.triangles")).ok()) return st;
  if (!(st = Unpack(r.mesh().normals(), 3, rig.normals, "rig.mesh.normals")).ok()) return st;

  Skeleton& sk = rig.skeleton;
  for (const v1::Joint& j : r.skeleton().joints()) {
    sk.names.push_back(j.name());
    sk.parents.push_back(j.parent());
    sk.rest_local.push_back(TransformFromProto(j.rest()));
  }
  std::vector<float> ib;
  if (!(st = Unpack(r.skeleton().inverse_bind_matrices(), 12, ib,
                    "rig.skeleton.inverse_bind_matrices")).ok()) {
    return st;
  }
  for (size_t j = 0; j < ib.size() / 12; ++j) {
    sk.inverse_bind.push_back(
        Eigen::Map<const Eigen::Matrix<float, 3, 4, Eigen::RowMajor>>(&ib[12 * j]).cast<double>());
  }

  if (!(st = Unpack(r.weights().offsets(), 1, in.weights.offsets, "rig.weights.offsets")).ok()) return st;
  if (!(st = Unpack(r.weights().joints(), 1, in.weights.joints, "rig.weights.joints")).ok()) return st;
  if (!(st = Unpack(r.weights().weights(), 1, in.weights.weights, "rig.weights.weights")).ok()) return st;
  in.weights.influences_per_vertex = r.weights().influences_per_vertex();
  in.weights.normalize = r.normalize_weights();

  for (int c = 0; c < r.cages_size(); ++c) {
    Cage cage;
    cage.name = r.cages(c).name();
    const std::string field = absl::StrCat("rig.cages[", c, "]");
    if (!(st = Unpack(r.cages(c).positions(), 3, cage.positions, field + ".positions")).ok()) return st;
    if (!(st = Unpack(r.cages(c).triangles(), 3, cage.triangles, field + ".triangles")).ok()) return st;
    rig.cages.push_back(std::move(cage));
  }
  const v1::SphereMesh& sm = r.sphere_mesh();
  if (!(st = Unpack(sm.centers(), 3, rig.sphere_mesh.centers, "rig.sphere_mesh.centers")).ok()) return st;
  if (!(st = Unpack(sm.radii(), 1, rig.sphere_mesh.radii, "rig.sphere_mesh.radii")).ok()) return st;
  if (!(st = Unpack(sm.bones(), 2, rig.sphere_mesh.bones, "rig.sphere_mesh.bones")).ok()) return st;
  if (!(st = Unpack(sm.triangles(), 3, rig.sphere_mesh.triangles, "rig.sphere_mesh.triangles")).ok()) return st;
  if (!(st = Unpack(sm.bone_joints(), 1, rig.sphere_mesh.bone_joints, "rig.sphere_mesh.bone_joints")).ok()) return st;
  if (!(st = Unpack(sm.bone_frames(), 3, rig.sphere_mesh.bone_frames, "rig.sphere_mesh.bone_frames")).ok()) return st;
  if (!(st = Unpack(sm.point_bones(), 1, rig.sphere_mesh.point_bones, "rig.sphere_mesh.point_bones")).ok()) return st;

  if (!(st = Unpack(r.tet_mesh().positions(), 3, rig.tet_mesh.positions, "rig.tet_mesh.positions")).ok()) return st;
  if (!(st = Unpack(r.tet_mesh().tets(), 4, rig.tet_mesh.tets, "rig.tet_mesh.tets")).ok()) return st;
  for (int a = 0; a < r.attributes_size(); ++a) {
    AttributeMap m;
    m.name = r.attributes(a).name();
    m.components = r.attributes(a).components();
    if (!(st = Unpack(r.attributes(a).values(), 1, m.values,
                      absl::StrCat("rig.attributes[", a, "].values"))).ok()) {
      return st;
    }
    rig.attributes.push_back(std::move(m));
  }
  for (const v1::PrecomputedData& p : r.precomputed()) {
    rig.precomputed.push_back({p.deformer(), p.version(), p.data()});
  }
  return in;
}

absl::Status PoseFromProto(const v1::Pose& p, Pose& out) {
  switch (p.space()) {
    case v1::POSE_SPACE_LOCAL: out.space = PoseSpace::kLocal; break;
    case v1::POSE_SPACE_WORLD: out.space = PoseSpace::kWorld; break;
    default:
      return absl::InvalidArgumentError(
          "pose.space: must be stated (POSE_SPACE_LOCAL or POSE_SPACE_WORLD)");
  }
  absl::Status st;
  if (!(st = Unpack(p.rotations(), 4, out.rotations, "pose.rotations")).ok()) return st;
  if (!(st = Unpack(p.translations(), 3, out.translations, "pose.translations")).ok()) return st;
  return Unpack(p.scales(), 1, out.scales, "pose.scales");
}

namespace {

// The wire-format walk of CheckRigEntryCounts: every message field is entered (by its descriptor),
// the capped repeated fields are counted, and so are the fields the parse would keep as unknown
// (a number the message lacks, or a known number with another wire type): each of those costs the
// parse an entry of 16 bytes or more, for 2 bytes on the wire (until 2026-12-03 they were not
// counted, and a 1 GiB rig of empty unknown fields parsed into tens of GB).
struct RigScan {
  using WireFormatLite = google::protobuf::internal::WireFormatLite;
  struct Cap {
    const google::protobuf::FieldDescriptor* field;
    size_t max;
    const char* name;
    size_t count = 0;
  };
  std::vector<Cap> caps;
  size_t unknown = 0;

  RigScan() {
    const google::protobuf::Descriptor* rig = v1::Rig::descriptor();
    caps = {{rig->FindFieldByName("cages"), kMaxRigCages, "rig.cages"},
            {rig->FindFieldByName("attributes"), kMaxRigAttributes, "rig.attributes"},
            {rig->FindFieldByName("precomputed"), kMaxRigPrecomputed, "rig.precomputed"},
            {v1::Skeleton::descriptor()->FindFieldByName("joints"), kMaxRigJoints, "rig.skeleton.joints"}};
  }

  static bool Known(const google::protobuf::FieldDescriptor* f, WireFormatLite::WireType wire) {
    if (f == nullptr) return false;
    const auto type = static_cast<WireFormatLite::FieldType>(f->type());
    return wire == WireFormatLite::WireTypeForFieldType(type) ||
           (f->is_packable() && wire == WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
  }

  absl::Status Unknown(uint32_t tag, const google::protobuf::Descriptor* d) {
    if (++unknown > kMaxRigUnknownFields) {
      return absl::ResourceExhaustedError(absl::StrCat("rig: more than ", kMaxRigUnknownFields,
                                                       " fields this server does not know (the latest: number ",
                                                       WireFormatLite::GetTagFieldNumber(tag), " in ", d->full_name(), ")"));
    }
    return absl::OkStatus();
  }

  // An unknown group's fields, each kept by the parse (a group is not skipped whole there): counted
  // one by one, nested groups too, up to its end tag. OK for malformed bytes.
  absl::Status Group(google::protobuf::io::CodedInputStream& in, const google::protobuf::Descriptor* d, int depth) {
    while (uint32_t tag = in.ReadTag()) {
      const auto wire = WireFormatLite::GetTagWireType(tag);
      if (wire == WireFormatLite::WIRETYPE_END_GROUP) return absl::OkStatus();
      if (auto st = Unknown(tag, d); !st.ok()) return st;
      if (wire == WireFormatLite::WIRETYPE_START_GROUP) {
        if (depth >= 32) return absl::OkStatus();  // the parse refuses nesting this deep
        if (auto st = Group(in, d, depth + 1); !st.ok()) return st;
      } else if (!WireFormatLite::SkipField(&in, tag)) {
        return absl::OkStatus();
      }
    }
    return absl::OkStatus();
  }

  // OK for malformed bytes (the parse refuses them); RESOURCE_EXHAUSTED past a cap.
  absl::Status Message(google::protobuf::io::CodedInputStream& in, const google::protobuf::Descriptor* d, int depth) {
    while (uint32_t tag = in.ReadTag()) {
      const auto wire = WireFormatLite::GetTagWireType(tag);
      const google::protobuf::FieldDescriptor* f = d->FindFieldByNumber(WireFormatLite::GetTagFieldNumber(tag));
      if (!Known(f, wire)) {
        if (auto st = Unknown(tag, d); !st.ok()) return st;
        if (wire == WireFormatLite::WIRETYPE_START_GROUP) {
          if (depth >= 32) return absl::OkStatus();
          if (auto st = Group(in, d, depth + 1); !st.ok()) return st;
          continue;
        }
      } else {
        for (Cap& cap : caps) {
          if (cap.field == f && ++cap.count > cap.max) {
            return absl::ResourceExhaustedError(
                absl::StrCat(cap.name, ": more than ", cap.max, " entries (the most one rig may hold)"));
          }
        }
        if (f->type() == google::protobuf::FieldDescriptor::TYPE_MESSAGE && depth < 32) {
          uint32_t length = 0;
          if (!in.ReadVarint32(&length)) return absl::OkStatus();
          const auto limit = in.PushLimit(static_cast<int>(std::min<uint32_t>(length, INT32_MAX)));
          if (auto st = Message(in, f->message_type(), depth + 1); !st.ok()) return st;
          if (in.BytesUntilLimit() != 0) return absl::OkStatus();  // malformed inside
          in.PopLimit(limit);
          continue;
        }
      }
      if (!WireFormatLite::SkipField(&in, tag)) return absl::OkStatus();
    }
    return absl::OkStatus();
  }
};

}  // namespace

absl::Status CheckRigEntryCounts(std::string_view serialized) {
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(serialized.data()),
                                            static_cast<int>(std::min<size_t>(serialized.size(), INT32_MAX)));
  in.SetTotalBytesLimit(INT32_MAX);
  RigScan scan;
  return scan.Message(in, v1::Rig::descriptor(), 0);
}

absl::Status CageFramesFromProto(const google::protobuf::RepeatedPtrField<v1::CagePose>& cages,
                                 std::vector<CageFrame>& out) {
  // Counted before the session's scratch is sized to them: a frame of 64 MiB of empty entries
  // (33 million) would otherwise leave the session holding about 1 GB (until 2026-12-01).
  if (static_cast<size_t>(cages.size()) > kMaxRigCages) {
    return absl::InvalidArgumentError(absl::StrCat("cages: ", cages.size(), " entries; a rig has at most ", kMaxRigCages,
                                                   " cages"));
  }
  out.resize(static_cast<size_t>(cages.size()));
  for (int i = 0; i < cages.size(); ++i) {
    if (auto st = CagePoseFromProto(cages[i], out[i], absl::StrCat("cages[", i, "]")); !st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::StatusOr<Clip> ClipFromProto(const v1::Clip& c, size_t joint_count) {
  // Fields named by their path in DeformClipRequest (its clip is ClipSampling.clip).
  Clip clip;
  clip.name = c.name();
  clip.duration = c.duration_seconds();
  if (!std::isfinite(clip.duration) || clip.duration < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("clip.clip.duration_seconds: ", clip.duration, " is not a finite number >= 0"));
  }
  std::vector<bool> seen(joint_count, false);
  std::vector<double> times;
  std::vector<float> values;
  for (int i = 0; i < c.tracks_size(); ++i) {
    const v1::JointTrack& t = c.tracks(i);
    const std::string f = absl::StrCat("clip.clip.tracks[", i, "]");
    if (t.joint() >= joint_count) {
      return absl::InvalidArgumentError(absl::StrCat(f, ".joint: ", t.joint(), " is out of range (",
                                                     joint_count, " joints)"));
    }
    if (seen[t.joint()]) {
      return absl::InvalidArgumentError(absl::StrCat(f, ".joint: joint ", t.joint(), " has two tracks"));
    }
    seen[t.joint()] = true;
    if (clip.tracks.size() <= t.joint()) clip.tracks.resize(t.joint() + 1);
    JointTrack& out = clip.tracks[t.joint()];
    absl::Status st;
    if (!(st = Unpack(t.translation_times(), 1, out.translation_times, f + ".translation_times")).ok()) return st;
    if (!(st = Unpack(t.translations(), 3, values, f + ".translations")).ok()) return st;
    for (size_t k = 0; k + 2 < values.size(); k += 3) out.translations.emplace_back(values[k], values[k + 1], values[k + 2]);
    if (!(st = Unpack(t.rotation_times(), 1, out.rotation_times, f + ".rotation_times")).ok()) return st;
    if (!(st = Unpack(t.rotations(), 4, values, f + ".rotations")).ok()) return st;
    for (size_t k = 0; k + 3 < values.size(); k += 4) out.rotations.emplace_back(values[k + 3], values[k], values[k + 1], values[k + 2]);
    if (!(st = Unpack(t.scale_times(), 1, out.scale_times, f + ".scale_times")).ok()) return st;
    if (!(st = Unpack(t.scales(), 1, values, f + ".scales")).ok()) return st;
    out.scales.assign(values.begin(), values.end());
    // Named by the message's track index, not by the joint the track drives.
    if (!(st = ValidateJointTrack(out, f)).ok()) return st;
  }
  if (auto st = ValidateClip(clip, joint_count); !st.ok()) return absl::Status(st.code(), absl::StrCat("clip.", st.message()));
  return clip;
}

namespace {
// A field this build does not know, set in `m` or a message below it (not `stages`, checked
// stage by stage): a newer client's parameter, which the reflection that reads parameters never
// sees. Until 2026-12-07 it was dropped, the method ran without it, and Session.deformer echoed
// it back as if applied.
absl::Status RefuseUnknownFields(const google::protobuf::Message& m, const std::string& field) {
  const google::protobuf::Reflection& r = *m.GetReflection();
  const google::protobuf::UnknownFieldSet& unknown = r.GetUnknownFields(m);
  if (unknown.field_count() > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": field number ", unknown.field(0).number(),
        " is not one this server knows (a newer client's parameter? this server is version ", kVersion,
        "; `sinew info` lists what it takes)"));
  }
  std::vector<const google::protobuf::FieldDescriptor*> set;
  r.ListFields(m, &set);
  for (const google::protobuf::FieldDescriptor* f : set) {
    if (f->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE || f->name() == "stages") continue;
    if (f->is_repeated()) {
      for (int k = 0; k < r.FieldSize(m, f); ++k) {
        if (auto st = RefuseUnknownFields(r.GetRepeatedMessage(m, f, k), absl::StrCat(field, ".", f->name(), "[", k, "]"));
            !st.ok()) {
          return st;
        }
      }
    } else if (auto st = RefuseUnknownFields(r.GetMessage(m, f), absl::StrCat(field, ".", f->name())); !st.ok()) {
      return st;
    }
  }
  return absl::OkStatus();
}
}  // namespace

absl::StatusOr<DeformerConfig> DeformerConfigFromProto(const v1::DeformerConfig& c, const std::string& field) {
  if (auto st = RefuseUnknownFields(c, field); !st.ok()) return st;
  const google::protobuf::Reflection* reflection = c.GetReflection();
  const google::protobuf::FieldDescriptor* given =
      reflection->GetOneofFieldDescriptor(c, c.GetDescriptor()->FindOneofByName("params"));
  if (c.stages_size() > 0) {
    if (c.method() != v1::METHOD_UNSPECIFIED || given != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".method: leave it and the parameters unset in a pipeline (give ", field, ".stages only)"));
    }
    if (size_t(c.stages_size()) > kMaxStages) {  // before parsing them: a message may hold millions
      return absl::InvalidArgumentError(absl::StrCat(field, ".stages: a pipeline has 1 to ", kMaxStages,
                                                     " stages, not ", c.stages_size()));
    }
    DeformerConfig config;
    for (int k = 0; k < c.stages_size(); ++k) {
      if (c.stages(k).stages_size() > 0) {  // before descending: up to protobuf's 100 levels
        return absl::InvalidArgumentError(absl::StrCat(field, ".stages[", k, "].stages: stages do not nest"));
      }
      auto stage = DeformerConfigFromProto(c.stages(k), absl::StrCat(field, ".stages[", k, "]"));
      if (!stage.ok()) return stage.status();
      config.stages.push_back(std::move(*stage));
    }
    if (auto st = CheckPipeline(config, field); !st.ok()) return st;
    return config;
  }
  if (c.method() == v1::METHOD_UNSPECIFIED) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".method: must be set (e.g. METHOD_LBS)"));
  }
  const MethodInfo* method = FindMethodById(static_cast<uint32_t>(c.method()));
  if (method == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".method: ", static_cast<int>(c.method()), " is not a method this server implements"));
  }
  // The parameters message set in the `params` oneof must be the method's own.
  const std::string params_field(method->params_field);
  ParamSet params;
  if (given != nullptr) {
    if (given->name() != params_field) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".", given->name(), ": parameters of another method; method ", std::string(method->name),
          params_field.empty() ? " takes none" : absl::StrCat(" takes ", field, ".", params_field)));
    }
    params = ParamSetFromMessage(reflection->GetMessage(c, given));
  }
  return ParseDeformerConfig(*method, params, absl::StrCat(field, ".", params_field));
}

absl::Status SphereFrameFromProto(const v1::SphereMeshPose& p, SphereFrame& out) {
  absl::Status st;
  if (!(st = Unpack(p.centers(), 3, out.centers, "spheres.centers")).ok()) return st;
  if (!(st = Unpack(p.radii(), 1, out.radii, "spheres.radii")).ok()) return st;
  return Unpack(p.twists(), 1, out.twists, "spheres.twists");
}

absl::Status CagePoseFromProto(const v1::CagePose& cage, CageFrame& out, absl::string_view field) {
  out.cage = cage.cage();
  switch (cage.input()) {
    case v1::CAGE_INPUT_ABSOLUTE: out.mode = CageInputMode::kAbsolute; break;
    case v1::CAGE_INPUT_OFFSETS: out.mode = CageInputMode::kOffsets; break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(field, ".input: unknown value ", static_cast<int>(cage.input())));
  }
  return Unpack(cage.positions(), 3, out.positions, absl::StrCat(field, ".positions"));
}

void FillRigInfo(const Rig& rig, v1::RigInfo& info) {
  info.set_name(rig.name);
  info.set_vertex_count(static_cast<uint32_t>(rig.vertex_count()));
  info.set_triangle_count(static_cast<uint32_t>(rig.triangle_count()));
  info.set_joint_count(static_cast<uint32_t>(rig.joint_count()));
  info.clear_joints();
  for (size_t j = 0; j < rig.joint_count(); ++j) {
    v1::JointInfo* ji = info.add_joints();
    ji->set_name(rig.skeleton.names[j]);
    ji->set_parent(rig.skeleton.parents[j]);
  }
  info.set_influence_count(rig.weights.joints.size());
  info.set_max_influences(rig.max_influences);
  info.set_cage_count(static_cast<uint32_t>(rig.cages.size()));
  info.set_resident_bytes(rig.ResidentBytes());
  auto set = [](v1::Vec3* v, const Eigen::Vector3f& p) {
    v->set_x(p.x());
    v->set_y(p.y());
    v->set_z(p.z());
  };
  set(info.mutable_bbox_min(), rig.bbox_min);
  set(info.mutable_bbox_max(), rig.bbox_max);
}

absl::StatusOr<Rig> RigFromUpload(const std::string& bytes, const RigLimits& limits) {
  if (auto st = CheckRigEntryCounts(bytes); !st.ok()) return st;
  v1::Rig message;
  if (!message.ParseFromString(bytes)) {
    return absl::InvalidArgumentError("upload: the bytes are not a serialized sinew.v1.Rig");
  }
  auto input = RigFromProto(message);
  if (!input.ok()) return input.status();
  message.Clear();
  return BuildRig(std::move(*input), limits);
}

absl::Status CheckTimeStep(double seconds) {
  if (seconds == 0 || (seconds >= kMinTimeStep && seconds <= kMaxTimeStep)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("time_step: ", seconds, " s is outside [", kMinTimeStep, ", ",
                                                 kMaxTimeStep, "] (0: the method's own)"));
}

absl::Status FrameInputFromProto(const v1::DeformRequest& req, Pose& pose, std::vector<CageFrame>& cages,
                                 CageFrame& posed_cage, SphereFrame& spheres, FrameInput& input) {
  absl::Status st;
  if (req.has_pose()) st = PoseFromProto(req.pose(), pose);
  if (st.ok()) st = CageFramesFromProto(req.cages(), cages);
  if (st.ok() && req.has_posed_cage()) st = CagePoseFromProto(req.posed_cage(), posed_cage, "posed_cage");
  if (st.ok() && req.has_spheres()) st = SphereFrameFromProto(req.spheres(), spheres);
  if (!st.ok()) return st;
  input = {req.has_pose() ? &pose : nullptr, cages, req.has_posed_cage() ? &posed_cage : nullptr};
  input.spheres = req.has_spheres() ? &spheres : nullptr;
  if (auto st = CheckTimeStep(req.time_step()); !st.ok()) return st;
  input.time_step = req.time_step();
  return absl::OkStatus();
}

absl::Status PoseWithinJoints(const v1::Pose& pose, size_t joints, absl::string_view field) {
  const struct {
    const char* name;
    size_t bytes, per;
  } arrays[] = {{"rotations", pose.rotations().size(), 16}, {"translations", pose.translations().size(), 12},
                {"scales", pose.scales().size(), 4}};
  for (const auto& a : arrays) {
    if (a.bytes > a.per * joints) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".", a.name, ": ", a.bytes, " bytes, ", a.bytes / double(a.per),
                                                     " joints; this rig takes at most ", joints, " (", a.per,
                                                     " bytes each)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ClipBatch> ClipBatchFromProto(const v1::DeformClipRequest& req, size_t joint_count,
                                             uint64_t max_frames_sent) {
  ClipBatch b;
  if (req.has_clip()) {
    b.fps = req.clip().frames_per_second();
    // Its step (1 / fps, what methods with dynamics step by) bounded as a pose list's time_step
    // is (until 2026-12-01 a rate of 1e-40 stepped a jiggle session by 1e40 s: NaN positions, a
    // corrupted state, and an error blaming the pose).
    if (!(b.fps >= 1 / kMaxTimeStep) || !std::isfinite(b.fps) || b.fps > 1 / kMinTimeStep) {
      return absl::InvalidArgumentError(absl::StrCat("clip.frames_per_second: ", b.fps, " is outside [", 1 / kMaxTimeStep,
                                                     ", ", 1 / kMinTimeStep, "] (a frame's step, 1 / frames_per_second, is ",
                                                     kMinTimeStep, " to ", kMaxTimeStep, " s)"));
    }
    auto clip = ClipFromProto(req.clip().clip(), joint_count);
    if (!clip.ok()) return clip.status();
    b.clip = std::move(*clip);
    b.total = ClipFrameCount(b.clip, b.fps);
    if (req.time_step() != 0) {
      return absl::InvalidArgumentError(absl::StrCat("time_step: ", req.time_step(), "; a clip steps by 1 / "
                                                     "clip.frames_per_second (time_step is for pose lists: leave it 0)"));
    }
  } else if (req.has_poses()) {
    b.total = static_cast<uint64_t>(req.poses().poses_size());
    // Every pose against the rig before the batch starts (until 2026-12-03 a pose list grew the
    // session's pose buffer to any size, uncounted, and a bad pose at index N was found only
    // after N frames).
    // Then as a frame reads it (space, whole entries, lengths, finite values, unit quaternions):
    // until 2026-12-03 only the sizes' upper bounds were, and an unstated space at index N failed
    // the batch after N frames had been sent.
    Pose pose;
    for (int i = 0; i < req.poses().poses_size(); ++i) {
      const std::string field = absl::StrCat("poses.poses[", i, "]");
      if (auto st = PoseWithinJoints(req.poses().poses(i), joint_count, field); !st.ok()) return st;
      absl::Status st = PoseFromProto(req.poses().poses(i), pose);
      if (st.ok()) st = ValidatePose(pose, joint_count);
      if (!st.ok()) {
        const absl::string_view m = st.message();
        return absl::Status(st.code(), absl::StartsWith(m, "pose.") ? absl::StrCat(field, ".", m.substr(5))
                                                                     : absl::StrCat(field, ": ", m));
      }
    }
  } else {
    return absl::InvalidArgumentError("source: give a clip (with frames_per_second) or poses");
  }
  b.first = req.first_frame();
  if (b.first > b.total) {  // == total: a finished batch resumed, nothing left to send
    return absl::OutOfRangeError(absl::StrCat("first_frame: ", b.first, " but the ", req.has_clip() ? "clip" : "pose list",
                                              " has ", b.total, " frames"));
  }
  b.end = b.total;
  if (req.max_frames() > 0 && req.max_frames() < b.end - std::min(b.end, b.first)) b.end = b.first + req.max_frames();
  // What this batch sends is bounded, not the clip: a long clip is played in parts.
  const uint64_t asked = b.end > b.first ? b.end - b.first : 0;
  if (asked > max_frames_sent) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "max_frames: this batch asks for ", asked, " frames (", b.first, " to ", b.end, " of ", b.total,
        "); one batch sends at most ", max_frames_sent, ": split it with first_frame and max_frames"));
  }
  if (req.has_poses()) {
    b.time_step = req.time_step();
    if (auto st = CheckTimeStep(b.time_step); !st.ok()) return st;
  } else {
    b.time_step = 1 / b.fps;
  }
  return b;
}

}  // namespace sinew::server
