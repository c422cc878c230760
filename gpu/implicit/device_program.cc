#include "gpu/implicit/device_program.h"

#include <algorithm>
#include <atomic>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/implicit/device_layout.h"
#include "core/implicit/implicit_skinning.h"
#include "gpu/implicit/program.cuh"
#include "gpu/implicit/resident.h"

namespace sinew::gpu {
namespace {

// The passes as loops on the host, one item after another. Reductions follow the CUDA kernel's
// order (lanes, then pairwise halving), so sums equal the device's.
struct HostExec {
  ImplicitBatch b;

  template <class Grid, class Pass>
  void Each(const Pass& pass) const {
    for (uint32_t t = 0; t < b.count; ++t) {
      for (uint32_t i = 0; i < Grid::Count(b.items[t]); ++i) pass(b, b.items[t], i);
    }
  }
  template <class Pass>
  void Nodes(const Pass& pass) const {
    Each<NodeGrid>(pass);
  }
  template <class Pass>
  void Vertices(const Pass& pass) const {
    Each<VertexGrid>(pass);
  }
  // Each stage as ImplicitChainStage (program_cuda.cu): lane by lane, the pass on the lane's
  // nodes with their sum, then the halving and Finish (lanes, then pairwise halving: the order of
  // kReduceLanes).
  template <class Stage>
  void ChainStage(const Stage& st, const ImplicitItem& it, uint32_t c, double* lane) const {
    using Reduction = decltype(st.red);
    const bool sum = st.red.Active(b, it, c);
    const uint32_t first = it.model.component_offsets[c], size = it.model.component_offsets[c + 1] - first;
    for (uint32_t l = 0; l < kReduceLanes; ++l) {
      double acc = 0;
      for (uint32_t k = l; k < size; k += kReduceLanes) {
        const uint32_t i = it.model.component_nodes[first + k];
        st.pass(b, it, i);
        if (sum) acc = ReduceCombine<Reduction::kMax>(acc, st.red.Value(b, it, i));
      }
      lane[l] = acc;
    }
    if (!sum) return;
    for (uint32_t stride = kReduceLanes / 2; stride > 0; stride /= 2) {
      for (uint32_t l = 0; l < stride; ++l) lane[l] = ReduceCombine<Reduction::kMax>(lane[l], lane[l + stride]);
    }
    st.red.Finish(b, it, c, lane[0]);
  }
  template <class... Stages>
  void Chain(const Stages&... stages) const {
    double lane[kReduceLanes];
    for (uint32_t t = 0; t < b.count; ++t) {
      const ImplicitItem& it = b.items[t];
      for (uint32_t c = 0; c < it.model.component_count; ++c) (ChainStage(stages, it, c, lane), ...);
    }
  }
  template <class Pred>
  bool Any(const Pred& pred) const {
    for (uint32_t t = 0; t < b.count; ++t) {
      for (uint32_t c = 0; c < b.items[t].model.component_count; ++c) {
        if (pred(b, b.items[t], c)) return true;
      }
    }
    return false;
  }
  // The item table is the batch's input buffer, host memory here (written only between passes).
  void Retire(uint32_t t, uint32_t step) const {  // only ever lowers (ImplicitRetireKernel)
    uint32_t& substeps = const_cast<ImplicitItem&>(b.items[t]).substeps;
    substeps = std::min(substeps, step);
  }
  template <class Pred>
  bool AnyNode(const Pred& pred) const {
    for (uint32_t t = 0; t < b.count; ++t) {
      for (uint32_t i = 0; i < b.items[t].model.node_count; ++i) {
        if (pred(b, b.items[t], i)) return true;
      }
    }
    return false;
  }
};

void FreeAll(ProgramDevice& device, const DeviceAllocations& memory) {
  for (void* p : memory.pointers) device.api().Free(device.index(), p);
}

// The per-rig model: its arrays, and the device's operators it points into.
class ModelOnDevice final : public ProgramModel {
 public:
  explicit ModelOnDevice(ProgramDevice& device) : device_(device) {}
  ~ModelOnDevice() override {
    FreeAll(device_, resident.memory);
    device_.Release(reserved);
  }
  uint64_t bytes() const override { return reserved; }

  ProgramDevice& device_;
  std::shared_ptr<const ResidentOperators> operators;
  ResidentModel resident;
  uint64_t reserved = 0;
  uint32_t fields = 0;
};

// A session's tracking state (one zeroed allocation) and its batch item, ready but for the
// offsets that Pack fills in.
class StateOnDevice final : public ProgramState {
 public:
  StateOnDevice(ProgramDevice& device, std::shared_ptr<const ModelOnDevice> model)
      : device_(device), model_(std::move(model)) {}
  ~StateOnDevice() override {
    if (memory_) device_.api().Free(device_.index(), memory_);
    device_.Release(bytes_);
  }
  uint64_t bytes() const override { return bytes_; }
  // The elastic method's history: its nodes' positions and states (SnapshotFloats).
  void* resident() const override { return item.settings.elastic ? memory_ : nullptr; }
  uint64_t resident_bytes() const override {
    return item.settings.elastic ? 4 * uint64_t(implicit_device::SnapshotFloats(item.model.node_count)) : 0;
  }
  size_t frame_floats() const override {
    return implicit_device::FrameFloats(item.model.joint_count, model_->fields, item.settings.elastic != 0, 1);
  }

  ProgramDevice& device_;
  std::shared_ptr<const ModelOnDevice> model_;
  void* memory_ = nullptr;
  uint64_t bytes_ = 0;
  ImplicitItem item{};
};

class ImplicitDeviceProgram final : public DeviceProgram {
 public:
  bool RunCuda(void* stream, const ProgramBatch& b, std::string* error) const override {
#ifdef SINEW_HAVE_CUDA
    return RunImplicitCuda(stream, b, error);
#else
    (void)stream;
    (void)b;
    if (error) *error = "the implicit program: Sinew was built without CUDA";
    return false;
#endif
  }

  void RunEmulated(const ProgramBatch& pb) const override {
    if (pb.count == 0) return;
    const HostExec x{{static_cast<const ImplicitItem*>(pb.items), pb.count, pb.params, pb.out, pb.states}};
    RunImplicitProgram(x, *static_cast<const ImplicitLimits*>(pb.limits), pb.count, pb.stops,
                       static_cast<const ImplicitItem*>(pb.host_items));
  }

  absl::StatusOr<std::shared_ptr<ProgramModel>> UploadModel(ProgramDevice& device, const RigOnDevice& rig,
                                                            const Prepared& prepared) const override {
    const auto* model = dynamic_cast<const ImplicitModel*>(&prepared);
    if (model == nullptr) return absl::InternalError("gpu: an implicit stage without its ImplicitModel");
    if (model->node_of_vertex.size() != rig.vertex_count) {
      return absl::InternalError("gpu: the implicit model was prepared for another rig");
    }
    if (auto st = CheckImplicitModel(*model); !st.ok()) return st;
    const CompositionOperators& key = *model->operators;
    auto operators = device.Shared(&key, [&]() -> absl::StatusOr<std::shared_ptr<const void>> {
      const uint64_t bytes = OperatorBytes(key);
      if (auto st = device.Reserve(bytes, "implicit skinning's composition operators"); !st.ok()) return st;
      std::shared_ptr<ResidentOperators> ops(new ResidentOperators(), [&device, bytes](ResidentOperators* o) {
        FreeAll(device, o->memory);
        device.Release(bytes);
        delete o;
      });
      std::string error;
      if (!UploadOperators(device.api(), device.index(), key, ops.get(), &error)) {
        return absl::ResourceExhaustedError(absl::StrCat("gpu ", device.index(), ": uploading the operators: ", error));
      }
      return std::shared_ptr<const void>(std::move(ops));
    });
    if (!operators.ok()) return operators.status();

    const uint64_t bytes = ImplicitModelBytes(*model);
    if (auto st = device.Reserve(bytes, "the rig's implicit skinning model"); !st.ok()) return st;
    auto g = std::make_shared<ModelOnDevice>(device);
    g->reserved = bytes;
    g->operators = std::static_pointer_cast<const ResidentOperators>(*operators);
    g->fields = uint32_t(model->fields.size());
    std::string error;
    if (!UploadImplicitModel(device.api(), device.index(), *model, &g->resident, &error)) {
      return absl::ResourceExhaustedError(absl::StrCat("gpu ", device.index(), ": uploading the implicit model: ", error));
    }
    ImplicitModelView& v = g->resident.view;
    v.rest_vertices = rig.rest;
    v.offsets = rig.offsets;
    v.joints = rig.joints;
    v.weights = rig.weights;
    v.joint_count = rig.joint_count;
    v.contact = g->operators->contact;
    v.bulge = g->operators->bulge;
    v.op_n = g->operators->n;
    v.op_nd = g->operators->nd;
    return std::shared_ptr<ProgramModel>(std::move(g));
  }

  absl::StatusOr<std::unique_ptr<ProgramState>> CreateState(ProgramDevice& device, GpuMethod kernel,
                                                            std::shared_ptr<ProgramModel> model,
                                                            const MethodParams* params) const override {
    auto m = std::dynamic_pointer_cast<const ModelOnDevice>(std::shared_ptr<const ProgramModel>(std::move(model)));
    if (!m) return absl::InternalError("gpu: an implicit session needs an implicit model");
    const bool elastic = kernel == GpuMethod::kElasticImplicit;
    const uint32_t nodes = m->resident.view.node_count, components = m->resident.view.component_count;
    const uint64_t bytes = ImplicitStateBytes(nodes, components, elastic);
    if (auto st = device.Reserve(bytes, "a session's tracking state"); !st.ok()) return st;
    auto s = std::make_unique<StateOnDevice>(device, m);
    s->bytes_ = bytes;
    std::string error;
    s->memory_ = device.api().Alloc(device.index(), bytes, &error);
    if (!s->memory_ || !device.api().Clear(device.index(), s->memory_, bytes, &error)) {
      return absl::ResourceExhaustedError(absl::StrCat("gpu ", device.index(), ": the session's tracking state: ", error));
    }
    ImplicitItem& it = s->item;
    it.model = m->resident.view;
    it.state = CarveImplicitState(s->memory_, nodes, components, elastic);
    if (static_cast<void*>(it.state.pos) != s->memory_ ||
        reinterpret_cast<char*>(it.state.state) !=
            static_cast<char*>(s->memory_) + 4 * implicit_device::SnapshotStateOffset(nodes)) {
      return absl::InternalError("gpu: the implicit state's layout does not start with the snapshot's");
    }
    static const ImplicitConfig kDefaults;
    const auto* config = dynamic_cast<const ImplicitConfig*>(params);
    it.settings = MakeImplicitSettings(config ? *config : kDefaults, elastic, m->resident.mean_edge);
    return std::unique_ptr<ProgramState>(std::move(s));
  }

  // The header says how many sub-steps follow (core/implicit/device_layout.h).
  absl::Status CheckFrame(const ProgramState& state, std::span<const float> params) const override {
    const auto& s = static_cast<const StateOnDevice&>(state);
    const bool elastic = s.item.settings.elastic != 0;
    const uint32_t steps = params.size() >= implicit_device::kHeaderFloats ? uint32_t(params[0]) : 0;
    if (steps == 0 || (!elastic && steps != 1) ||
        params.size() != implicit_device::FrameFloats(s.item.model.joint_count, s.model_->fields, elastic, steps)) {
      return absl::InternalError(
          absl::StrCat("gpu: an implicit frame of ", params.size(), " parameters does not match its layout"));
    }
    return absl::OkStatus();
  }

  size_t item_bytes() const override { return sizeof(ImplicitItem); }
  size_t limits_bytes() const override { return sizeof(ImplicitLimits); }
  void BeginBatch(void* limits) const override { *static_cast<ImplicitLimits*>(limits) = ImplicitLimits{}; }

  void Pack(const ProgramState& state, const float* params, uint32_t vertex_offset, uint32_t param_offset, void* item,
            void* limits) const override {
    const auto& s = static_cast<const StateOnDevice&>(state);
    auto& l = *static_cast<ImplicitLimits*>(limits);
    auto& it = *static_cast<ImplicitItem*>(item);
    it = s.item;
    it.node_offset = l.nodes;
    it.implicit_vertex_offset = l.vertices;
    it.vertex_offset = vertex_offset;
    it.param_offset = param_offset;
    it.substeps = uint32_t(params[0]);
    it.reset = params[1] != 0 ? 1 : 0;
    l.nodes += it.model.node_count;
    l.components = std::max(l.components, it.model.component_count);
    l.largest_component = std::max(l.largest_component, it.model.largest_component);
    l.vertices += it.model.vertex_count;
    l.max_iterations = std::max(l.max_iterations, it.settings.max_iterations);
    l.every_pass = l.every_pass || it.settings.every_pass != 0;
    l.separate_passes = l.separate_passes || it.settings.separate_passes != 0;
    if (it.settings.elastic) {
      l.elastic = true;
      l.substeps = std::max(l.substeps, it.substeps);
      l.relaxation_iterations = std::max(l.relaxation_iterations, it.settings.relaxation_iterations);
      l.relaxation_rounds = std::max(l.relaxation_rounds, it.settings.relaxation_rounds);
    } else {
      l.history_independent = true;
      l.smoothing_iterations = std::max(l.smoothing_iterations, it.settings.smoothing_iterations);
    }
  }
};

std::atomic<uint64_t> counted_passes{0}, counted_waits{0};

}  // namespace

ImplicitProgramCounts ImplicitProgramCountsSoFar() {
  return {counted_passes.load(std::memory_order_relaxed), counted_waits.load(std::memory_order_relaxed)};
}

void AddImplicitProgramCounts(const ImplicitProgramCounts& run) {
  counted_passes.fetch_add(run.passes, std::memory_order_relaxed);
  counted_waits.fetch_add(run.waits, std::memory_order_relaxed);
}

const DeviceProgram& ImplicitProgram() {
  static const ImplicitDeviceProgram program;
  return program;
}

}  // namespace sinew::gpu
