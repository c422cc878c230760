// sinew-bench-implicit: implicit skinning frames/s against DQS on the same rig, in the same run,
// at about 4k, 30k and 170k vertices (the thesis' Dana, Hand/Juna and Armadillo sizes), with 1
// and 2 threads; plus the real character BCN_Epileptic when assimp-testmodels is installed.
// Where a CUDA device exists, the same clips through the GPU backend: one session (the frame
// latency, with the CPU's part) and 16 sessions batched (throughput), against DQS on the same
// device.
// Every frame of the clip animates all joints (the limb bends 120° at its elbow and twists
// 180° at its wrist). The thesis' figures are from a GTX 680 (Table 4.1, IS, full animation):
// 95 fps at 4 164 vertices, 15 fps at 31 750 / 32 056, 3 fps at 172 974.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "clients/import/asset_import.h"
#include "core/clip/clip.h"
#include "core/deformer/deformer.h"
#include "core/implicit/implicit_skinning.h"
#include "core/procedural/limb.h"
#include "gpu/backend.h"
#include "gpu/implicit/program.cuh"
#include "gpu/implicit/program_counts.h"
#include "bench/load_average.h"

namespace {

using namespace sinew;
using Clock = std::chrono::steady_clock;

double Millis(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

struct Case {
  std::string label;
  std::shared_ptr<const Rig> rig;
  std::vector<Pose> clip;  // one cycle, played in order
  double thesis_fps;       // 0: none
};

// Mean frame time (ms) over `cycles` passes of the clip, in order, after one warm-up pass.
double Time(Deformer& d, const Case& c, ThreadPool* pool, int cycles) {
  std::vector<float> out(c.rig->positions.size());
  auto pass = [&] {
    for (const Pose& p : c.clip) {
      if (!d.Deform({&p, {}}, out, pool).ok()) std::abort();
    }
  };
  pass();
  const auto t0 = Clock::now();
  for (int k = 0; k < cycles; ++k) pass();
  return Millis(Clock::now() - t0) / (cycles * c.clip.size());
}

// A GPU table's measure: the mean time per step and, for the implicit methods, what the device
// program launched per step (gpu/implicit/program_counts.h).
struct GpuTiming {
  double ms = -1;  // < 0: the method could not run
  double passes = 0, waits = 0;
};

// GPU: `sessions` sessions of `method` (with `params`; null: its defaults) play the clip in step
// (each frame of every session submitted, then all waited for).
GpuTiming TimeGpu(gpu::GpuBackend& backend, const Case& c, std::shared_ptr<const ImplicitModel> model,
                  const std::string& method, std::shared_ptr<const MethodParams> params, int sessions, int cycles) {
  DeformerConfig config;
  config.method = method;
  config.params = params;
  auto on_gpu = backend.Upload(*c.rig);
  if (!on_gpu.ok()) return {};
  std::shared_ptr<gpu::GpuModel> dev_model;
  if (method != "dqs") {
    const auto kernel = method == "implicit" ? gpu::GpuMethod::kImplicit : gpu::GpuMethod::kElasticImplicit;
    auto m = backend.UploadModel(*on_gpu, kernel, *model);
    if (!m.ok()) {
      std::printf("  %s\n", std::string(m.status().message()).c_str());
      return {};
    }
    dev_model = *m;
  }
  struct One {
    std::unique_ptr<Deformer> stage;
    std::unique_ptr<gpu::GpuSession> session;
    std::vector<float> params, out;
  };
  std::vector<One> all(sessions);
  for (One& o : all) {
    auto d = method == "dqs" ? CreateDeformer(c.rig, config) : CreateImplicitDeformer(c.rig, model, config);
    if (!d.ok()) std::abort();
    o.stage = std::move(*d);
    gpu::SessionSpec spec;
    spec.method = method == "dqs"        ? gpu::GpuMethod::kDqs
                  : method == "implicit" ? gpu::GpuMethod::kImplicit
                                         : gpu::GpuMethod::kElasticImplicit;
    spec.model = dev_model;
    spec.params = params;
    auto s = backend.CreateSession(*on_gpu, spec);
    if (!s.ok()) {
      std::printf("  %s\n", std::string(s.status().message()).c_str());
      return {};
    }
    o.session = std::move(*s);
    o.out.resize(c.rig->positions.size());
  }
  struct Latch {
    std::mutex mu;
    std::condition_variable cv;
    int remaining = 0;
  } latch;
  auto done = [](void* l, const absl::Status& st) {
    if (!st.ok()) std::abort();
    auto& latch = *static_cast<Latch*>(l);
    std::lock_guard lock(latch.mu);
    if (--latch.remaining == 0) latch.cv.notify_all();
  };
  auto pass = [&] {
    for (const Pose& p : c.clip) {
      latch.remaining = sessions;
      for (One& o : all) {
        if (!o.stage->DeviceFrame({&p, {}}, o.params).ok()) std::abort();
        backend.Submit(*o.session, o.params, o.out.data(), gpu::OutputFormat::kFloat32, done, &latch);
      }
      std::unique_lock lock(latch.mu);
      latch.cv.wait(lock, [&] { return latch.remaining == 0; });
    }
  };
  pass();
  const gpu::ImplicitProgramCounts before = gpu::ImplicitProgramCountsSoFar();
  const auto t0 = Clock::now();
  for (int k = 0; k < cycles; ++k) pass();
  const double steps = double(cycles) * c.clip.size();
  const gpu::ImplicitProgramCounts after = gpu::ImplicitProgramCountsSoFar();
  return {Millis(Clock::now() - t0) / steps, (after.passes - before.passes) / steps,
          (after.waits - before.waits) / steps};
}

void RunGpu(gpu::GpuBackend& backend, const Case& c, std::shared_ptr<const ImplicitModel> model, int cycles) {
  const std::string device = backend.Devices()[0].name;
  std::printf("  GPU (%s): ms per frame of 1 session (latency, CPU part included) and per step of 16 batched sessions\n",
              device.c_str());
  std::printf("  (passes: the device program's passes per step of 1 session, a kernel each; waits: its checks,\n"
              "  after each of which the host waits for the device; µs/pass: the step's time over its passes)\n");
  std::printf("  %-18s %12s %10s %14s %12s %10s %14s %10s %8s %8s\n", "method", "1 session ms", "fps",
              "16 sessions ms", "frames/s", "÷ DQS", "thesis fps×20", "passes", "waits", "µs/pass");
  // The last row: the elastic method with the steps after its reductions as kernels of their own
  // (ImplicitConfig::device_separate_passes), the reference for the chained kernels above it;
  // left out where the rig has a component too large for chains (the row above runs the same).
  uint32_t largest = 0;
  for (uint32_t k = 0; k + 1 < model->component_offsets.size(); ++k) largest = std::max(largest, model->ComponentSize(k));
  const bool chained = largest <= gpu::kChainMaxComponent;
  auto separate = std::make_shared<ImplicitConfig>();
  separate->device_separate_passes = true;
  struct Row {
    const char* name;
    std::string method;
    std::shared_ptr<const MethodParams> params;
  };
  const Row rows[] = {{"dqs", "dqs", nullptr},
                      {"implicit", "implicit", nullptr},
                      {"elastic-implicit", "elastic-implicit", nullptr},
                      {"  separate passes", "elastic-implicit", separate}};
  double dqs16 = 0;
  for (const Row& row : rows) {
    if (row.params && !chained) {
      std::printf("  (no separate-passes row: the largest mesh component has %u nodes, above the chains' %u,\n"
                  "  so the elastic row above already runs separate passes)\n", largest, gpu::kChainMaxComponent);
      continue;
    }
    const std::string& m = row.method;
    const GpuTiming one = TimeGpu(backend, c, model, m, row.params, 1, cycles);
    const GpuTiming many = TimeGpu(backend, c, model, m, row.params, 16, cycles);
    if (one.ms < 0 || many.ms < 0) continue;
    if (m == "dqs") dqs16 = many.ms;
    const char* name = row.name;
    char goal[32] = "";
    if (m == "implicit" && c.thesis_fps > 0) std::snprintf(goal, sizeof goal, "%.0f", 20 * c.thesis_fps);
    char passes[16] = "", waits[16] = "", per_pass[16] = "";  // blank for DQS, which has no program
    if (one.passes > 0) {
      std::snprintf(passes, sizeof passes, "%.0f", one.passes);
      std::snprintf(waits, sizeof waits, "%.0f", one.waits);
      std::snprintf(per_pass, sizeof per_pass, "%.1f", 1000 * one.ms / one.passes);
    }
    std::printf("  %-18s %12.3f %10.1f %14.3f %12.0f %10.1f %14s %10s %8s %8s\n", name, one.ms, 1000 / one.ms,
                many.ms, 16000 / many.ms, many.ms / dqs16, goal, passes, waits, per_pass);
  }
}

void Run(const Case& c, int cycles, gpu::GpuBackend* gpu, bool cpu_tables = true) {
  std::printf("\n%s: %zu vertices, %zu joints, %zu frames per cycle\n", c.label.c_str(), c.rig->vertex_count(),
              c.rig->joint_count(), c.clip.size());
  ThreadPool two(1);  // one worker and the calling thread: the "2 threads" printed below
  DeformerConfig config;
  config.method = "implicit";
  const auto t0 = Clock::now();
  auto prepared = PrepareImplicit(*c.rig, config, &two, {});
  if (!prepared.ok()) {
    std::printf("  prepare failed: %s\n", std::string(prepared.status().message()).c_str());
    return;
  }
  const double prepare_ms = Millis(Clock::now() - t0);
  auto model = std::dynamic_pointer_cast<const ImplicitModel>(*prepared);
  std::printf("  preparation %.0f ms on 2 threads (%zu bone fields, %.1f MiB per rig)\n", prepare_ms,
              model->fields.size(), model->Bytes() / 1048576.0);
  if (!cpu_tables) {
    if (gpu) RunGpu(*gpu, c, model, cycles);
    return;
  }
  std::printf("  %-18s %12s %12s %10s %10s %12s\n", "method", "1 thread ms", "2 threads ms", "fps (2 thr)",
              "÷ DQS", "thesis fps");
  double dqs2 = 0;
  for (const std::string& m : {std::string("dqs"), std::string("implicit"), std::string("elastic-implicit")}) {
    config.method = m;
    auto make = [&]() -> std::unique_ptr<Deformer> {
      auto d = m == "dqs" ? CreateDeformer(c.rig, config) : CreateImplicitDeformer(c.rig, model, config);
      if (!d.ok()) std::abort();
      return std::move(*d);
    };
    auto d1 = make();
    const double one = Time(*d1, c, nullptr, cycles);
    auto d2 = make();
    const double two_ms = Time(*d2, c, &two, cycles);
    if (m == "dqs") dqs2 = two_ms;
    const char* name = m.c_str();
    char thesis[32] = "";
    if (m == "implicit" && c.thesis_fps > 0) std::snprintf(thesis, sizeof thesis, "%.0f", c.thesis_fps);
    std::printf("  %-18s %12.2f %12.2f %10.1f %10.1f %12s\n", name, one, two_ms, 1000 / two_ms, two_ms / dqs2, thesis);
  }
  if (gpu) RunGpu(*gpu, c, model, cycles);
}

Case Limb(size_t vertices, double thesis_fps, int frames) {
  LimbOptions o;
  o.segments = 100;
  o.rings = uint32_t(std::max<size_t>(vertices / o.segments, 4));
  o.bones = 4;
  o.max_influences = 2;
  o.blend = 0.15f;
  auto rig = BuildRig(MakeLimb(o));
  if (!rig.ok()) std::abort();
  Case c;
  c.label = "procedural limb";
  c.rig = std::make_shared<const Rig>(std::move(*rig));
  for (int k = 0; k < frames; ++k) c.clip.push_back(LimbPose(c.rig->skeleton, double(k) / frames));
  c.thesis_fps = thesis_fps;
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  const sinew::bench::LoadAverageReport load_average;  // printed before and after the run
  // --quick: fewer cycles and no 170k case (CI smoke run). --emulate: the GPU tables on the CPU
  // emulation of a device (checks the device path; its times are not a GPU's), 4k limb only.
  // --gpu-only: the GPU tables alone (the CPU's elastic frames take minutes on the large rigs).
  // --only RIGS: a comma-separated subset of limb4k, limb32k, limb172k, bcn (the whole --quick
  // run took 22 minutes on 2 cores on 2026-11-29, most of it the elastic method on limb32k).
  bool quick = false, emulate = false, gpu_only = false;
  std::vector<std::string> only;
  const std::vector<std::string> rigs = {"limb4k", "limb32k", "limb172k", "bcn"};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") quick = true;
    else if (a == "--emulate") emulate = true;
    else if (a == "--gpu-only") gpu_only = true;
    else if (a == "--only" && i + 1 < argc) {
      for (const auto piece : absl::StrSplit(argv[++i], ',')) {
        if (std::find(rigs.begin(), rigs.end(), piece) == rigs.end()) {
          std::fprintf(stderr, "sinew-bench-implicit: --only: unknown rig '%s' (limb4k, limb32k, limb172k, bcn)\n",
                       std::string(piece).c_str());
          return 2;
        }
        only.emplace_back(piece);
      }
    } else {
      std::fprintf(stderr, "usage: sinew-bench-implicit [--quick] [--emulate] [--gpu-only] [--only RIGS]\n");
      return 2;
    }
  }
  const auto wanted = [&](const std::string& rig) {
    return only.empty() || std::find(only.begin(), only.end(), rig) != only.end();
  };
  const int cycles = quick ? 1 : 3;
  std::printf("sinew-bench-implicit: mean frame time over whole clips (every joint moving), DQS on the same rig "
              "as the reference\n");
  gpu::GpuOptions options;
  options.emulate_devices = emulate ? 1 : 0;
  auto backend = gpu::GpuBackend::Create(options);
  if (!backend.ok()) std::printf("GPU tables: none (%s)\n", std::string(backend.status().message()).c_str());
  gpu::GpuBackend* gpu = backend.ok() ? backend->get() : nullptr;
  if (gpu_only && !gpu) return 0;
  if (emulate) {
    std::printf("GPU tables on the emulated device: CPU times of the device program, not a GPU measurement\n");
    Run(Limb(4200, 95, 8), 1, gpu);
    return 0;
  }
  const bool cpu = !gpu_only;
  if (wanted("limb4k")) Run(Limb(4200, 95, 48), cycles, gpu, cpu);
  if (wanted("limb32k")) Run(Limb(32000, 15, 48), cycles, gpu, cpu);
  if (!quick && wanted("limb172k")) Run(Limb(172000, 3, 24), 1, gpu, cpu);
  const std::string bcn = std::string(SINEW_ASSIMP_MODELS) + "/X/BCN_Epileptic.X";
  if (wanted("bcn") && std::filesystem::exists(bcn)) {
    auto asset = ImportAsset(bcn);
    auto rig = asset.ok() ? BuildRig(asset->rig) : absl::StatusOr<Rig>(asset.status());
    if (rig.ok() && !asset->clips.empty()) {
      Case c;
      c.label = "BCN_Epileptic.X (assimp-testmodels)";
      c.rig = std::make_shared<const Rig>(std::move(*rig));
      const Clip& clip = asset->clips[0];
      const int frames = 48;
      for (int k = 0; k < frames; ++k) {
        Pose p;
        SampleClip(clip, c.rig->skeleton, clip.duration * k / frames, p);
        c.clip.push_back(std::move(p));
      }
      c.thesis_fps = 0;
      Run(c, cycles, gpu, cpu);
    }
  }
  std::printf("\nThesis (GTX 680, Table 4.1, IS with every joint animated): Dana 4 164 vertices 95 fps, Hand 31 750 and "
              "Juna 32 056 15 fps, Armadillo 172 974 3 fps.\n");
  return 0;
}
