#include "gpu/pbs/device_program.h"

#include <cstddef>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/pbs/device_layout.h"
#include "core/pbs/pbs.h"
#include "gpu/pbs/pbs.cuh"

namespace sinew::gpu {
namespace {

// Core's records are uploaded as they are.
static_assert(sizeof(StretchConstraint) == sizeof(PbsStretch) && offsetof(StretchConstraint, rest) == offsetof(PbsStretch, rest));
static_assert(sizeof(VolumeConstraint) == sizeof(PbsVolume) && offsetof(VolumeConstraint, rest) == offsetof(PbsVolume, rest));
static_assert(sizeof(BindConstraint) == sizeof(PbsBind) && offsetof(BindConstraint, rest) == offsetof(PbsBind, rest));

// The frame on the host, one thread: For is a loop, Sync nothing.
struct HostTeam {
  template <class F>
  void For(uint32_t n, const F& f) const {
    for (uint32_t i = 0; i < n; ++i) f(i);
  }
  void Sync() const {}
  bool Any(bool mine) const { return mine; }
};

struct Allocations {
  std::vector<void*> pointers;
  uint64_t bytes = 0;
};

// Allocates max(1, n) elements and uploads `data` into them; `dst` gets the device address.
template <class T, class D>
bool Put(ProgramDevice& device, const T* data, size_t n, const D*& dst, Allocations& out, std::string* error) {
  void* p = device.api().Alloc(device.index(), sizeof(T) * std::max<size_t>(n, 1), error);
  if (!p) return false;
  out.pointers.push_back(p);
  out.bytes += sizeof(T) * n;
  dst = static_cast<const D*>(p);
  return n == 0 || device.api().Upload(device.index(), p, data, sizeof(T) * n, error);
}

class ModelOnDevice final : public ProgramModel {
 public:
  explicit ModelOnDevice(ProgramDevice& device) : device_(device) {}
  ~ModelOnDevice() override {
    for (void* p : memory.pointers) device_.api().Free(device_.index(), p);
    device_.Release(reserved);
  }
  uint64_t bytes() const override { return reserved; }

  ProgramDevice& device_;
  Allocations memory;
  PbsModelView view{};
  uint64_t reserved = 0;
};

class StateOnDevice final : public ProgramState {
 public:
  StateOnDevice(ProgramDevice& device, std::shared_ptr<const ModelOnDevice> model)
      : device_(device), model_(std::move(model)) {}
  ~StateOnDevice() override {
    if (memory_) device_.api().Free(device_.index(), memory_);
    device_.Release(bytes_);
  }
  uint64_t bytes() const override { return bytes_; }
  size_t frame_floats() const override { return pbs_device::FrameFloats(model_->view.joint_count); }
  // Positions, then velocities: 3 floats per particle each (the XPBD multipliers after them are
  // scratch, reset every step).
  void* resident() const override { return memory_; }
  uint64_t resident_bytes() const override { return 24 * uint64_t(model_->view.particles); }

  ProgramDevice& device_;
  std::shared_ptr<const ModelOnDevice> model_;
  void* memory_ = nullptr;
  uint64_t bytes_ = 0;
  PbsItem item{};
};

// The device bytes of a model's arrays.
uint64_t ModelBytes(const PbsModel& m, size_t vertices) {
  const size_t n = m.mesh.rest.size();
  return 4 * (3 * n + (n + 1) + m.weights.weights.size() + m.stretch_colours.size() + m.volume_colours.size() +
              3 * m.joints.size() + m.alpha.size() + 4 * m.mesh.tets.size() + vertices + 4 * vertices) +
         2 * m.weights.joints.size() + sizeof(PbsStretch) * m.stretch.size() + sizeof(PbsVolume) * m.volume.size() +
         sizeof(PbsBind) * m.bind.size() + m.stretch_jiggles.size() + m.volume_jiggles.size();
}

class PbsDeviceProgram final : public DeviceProgram {
 public:
  bool RunCuda(void* stream, const ProgramBatch& b, std::string* error) const override {
#ifdef SINEW_HAVE_CUDA
    return RunPbsCuda(stream, b, error);
#else
    (void)stream;
    (void)b;
    if (error) *error = "the pbs program: Sinew was built without CUDA";
    return false;
#endif
  }

  void RunEmulated(const ProgramBatch& b) const override {
    const auto* items = static_cast<const PbsItem*>(b.items);
    for (uint32_t t = 0; t < b.count; ++t) PbsFrame(HostTeam{}, items[t], b.params + items[t].param_offset, b.out);
  }

  absl::StatusOr<std::shared_ptr<ProgramModel>> UploadModel(ProgramDevice& device, const RigOnDevice& rig,
                                                            const Prepared& prepared) const override {
    const auto* m = dynamic_cast<const PbsModel*>(&prepared);
    if (m == nullptr) return absl::InternalError("gpu: a pbs stage without its PbsModel");
    if (m->embedding.tet.size() != rig.vertex_count || m->joints.size() != rig.joint_count) {
      return absl::InternalError("gpu: the pbs model was prepared for another rig");
    }
    const uint64_t bytes = ModelBytes(*m, rig.vertex_count);
    if (auto st = device.Reserve(bytes, "the rig's pbs tetrahedra and constraints"); !st.ok()) return st;
    auto g = std::make_shared<ModelOnDevice>(device);
    g->reserved = bytes;
    // Flattened copies where core's layout is not the device's (doubles, nested arrays).
    std::vector<float> rest, joint_rest, beta;
    for (const auto& p : m->mesh.rest) rest.insert(rest.end(), {float(p.x()), float(p.y()), float(p.z())});
    for (const auto& p : m->joints) joint_rest.insert(joint_rest.end(), {float(p.x()), float(p.y()), float(p.z())});
    for (const auto& b : m->embedding.beta) beta.insert(beta.end(), {float(b[0]), float(b[1]), float(b[2]), float(b[3])});
    std::vector<uint32_t> tets;
    for (const auto& t : m->mesh.tets) tets.insert(tets.end(), t.begin(), t.end());
    PbsModelView& v = g->view;
    std::string error;
    const float* alpha = nullptr;
    const uint8_t *stretch_jiggles = nullptr, *volume_jiggles = nullptr;
    const PbsBind* bind = nullptr;
    const bool ok =
        Put(device, rest.data(), rest.size(), v.rest, g->memory, &error) &&
        Put(device, m->weights.offsets.data(), m->weights.offsets.size(), v.w_offsets, g->memory, &error) &&
        Put(device, m->weights.joints.data(), m->weights.joints.size(), v.w_joints, g->memory, &error) &&
        Put(device, m->weights.weights.data(), m->weights.weights.size(), v.w_weights, g->memory, &error) &&
        Put(device, m->stretch.data(), m->stretch.size(), v.stretch, g->memory, &error) &&
        Put(device, m->stretch_colours.data(), m->stretch_colours.size(), v.stretch_colours, g->memory, &error) &&
        Put(device, m->volume.data(), m->volume.size(), v.volume, g->memory, &error) &&
        Put(device, m->volume_colours.data(), m->volume_colours.size(), v.volume_colours, g->memory, &error) &&
        (m->bind.empty() || Put(device, m->bind.data(), m->bind.size(), bind, g->memory, &error)) &&
        Put(device, joint_rest.data(), joint_rest.size(), v.joint_rest, g->memory, &error) &&
        (m->alpha.empty() || (Put(device, m->alpha.data(), m->alpha.size(), alpha, g->memory, &error) &&
                              Put(device, m->stretch_jiggles.data(), m->stretch_jiggles.size(), stretch_jiggles,
                                  g->memory, &error) &&
                              Put(device, m->volume_jiggles.data(), m->volume_jiggles.size(), volume_jiggles, g->memory,
                                  &error))) &&
        Put(device, tets.data(), tets.size(), v.tets, g->memory, &error) &&
        Put(device, m->embedding.tet.data(), m->embedding.tet.size(), v.embed_tet, g->memory, &error) &&
        Put(device, beta.data(), beta.size(), v.embed_beta, g->memory, &error);
    if (!ok) return absl::ResourceExhaustedError(absl::StrCat("gpu ", device.index(), ": uploading the pbs model: ", error));
    v.bind = bind;
    v.alpha = alpha;
    v.stretch_jiggles = stretch_jiggles;
    v.volume_jiggles = volume_jiggles;
    v.particles = uint32_t(m->mesh.rest.size());
    v.vertices = rig.vertex_count;
    v.joint_count = rig.joint_count;
    v.stretch_count = uint32_t(m->stretch.size());
    v.volume_count = uint32_t(m->volume.size());
    v.stretch_colour_offsets = uint32_t(m->stretch_colours.size());
    v.volume_colour_offsets = uint32_t(m->volume_colours.size());
    return std::shared_ptr<ProgramModel>(std::move(g));
  }

  // Positions and velocities (3 floats per particle each) and the XPBD multipliers, in one
  // zeroed allocation.
  absl::StatusOr<std::unique_ptr<ProgramState>> CreateState(ProgramDevice& device, GpuMethod,
                                                            std::shared_ptr<ProgramModel> model,
                                                            const MethodParams*) const override {
    auto m = std::dynamic_pointer_cast<const ModelOnDevice>(std::shared_ptr<const ProgramModel>(std::move(model)));
    if (!m) return absl::InternalError("gpu: a pbs session needs a pbs model");
    const PbsModelView& v = m->view;
    const uint64_t floats = 6 * uint64_t(v.particles) + v.stretch_count + v.volume_count + (v.bind ? v.particles : 0);
    const uint64_t bytes = 4 * floats;
    if (auto st = device.Reserve(bytes, "a pbs session's particles"); !st.ok()) return st;
    auto s = std::make_unique<StateOnDevice>(device, m);
    s->bytes_ = bytes;
    std::string error;
    s->memory_ = device.api().Alloc(device.index(), bytes, &error);
    if (!s->memory_ || !device.api().Clear(device.index(), s->memory_, bytes, &error)) {
      return absl::ResourceExhaustedError(absl::StrCat("gpu ", device.index(), ": a pbs session's particles: ", error));
    }
    PbsItem& it = s->item;
    it.m = v;
    it.x = static_cast<float*>(s->memory_);
    it.v = it.x + 3 * size_t(v.particles);
    it.lambda = it.v + 3 * size_t(v.particles);
    return std::unique_ptr<ProgramState>(std::move(s));
  }

  absl::Status CheckFrame(const ProgramState& state, std::span<const float> params) const override {
    const auto& s = static_cast<const StateOnDevice&>(state);
    if (params.size() != pbs_device::FrameFloats(s.item.m.joint_count)) {
      return absl::InternalError(absl::StrCat("gpu: a pbs frame of ", params.size(), " parameters does not match its layout"));
    }
    return absl::OkStatus();
  }

  size_t item_bytes() const override { return sizeof(PbsItem); }
  size_t limits_bytes() const override { return 16; }
  void BeginBatch(void*) const override {}
  void Pack(const ProgramState& state, const float*, uint32_t vertex_offset, uint32_t param_offset, void* item,
            void*) const override {
    auto& it = *static_cast<PbsItem*>(item);
    it = static_cast<const StateOnDevice&>(state).item;
    it.vertex_offset = vertex_offset;
    it.param_offset = param_offset;
  }
};

}  // namespace

const DeviceProgram& PbsProgram() {
  static const PbsDeviceProgram program;
  return program;
}

}  // namespace sinew::gpu
