// sinew-bench-core: CPU cost of one skinning frame, compared with the cost of copying the bytes
// that frame touches.
//
// LBS and DQS deform the procedural limb (8 bones, 4 influences per vertex) at 10k, 100k and 1M
// vertices on 1 thread (no pool) and 2 threads (a one-worker pool plus the calling thread). Each
// iteration is one whole deform call with the joint transforms already computed, i.e. the
// per-vertex work only.
//
// The reference, "memcpy", copies a buffer as large as everything a frame reads or writes: rest
// positions and output (12 B per vertex each) plus the skinning weights (4 B of offset per vertex,
// 2 B of joint index and 4 B of weight per influence), split over threads like the deformers.
// After the run a summary prints the frame's bytes per vertex at each size (the rig drops its
// negligible weights, so fewer than 4 influences are counted on average) and time(memcpy) /
// time(deformer) for each size and thread count: 1.0 means the deformer is as fast as copying its
// frame's bytes. A copy reads and writes every byte, twice the traffic of a deformer that reads
// its inputs and writes its output once, so a deformer bound by memory bandwidth scores about
// 1.5-2 at 1M vertices, not 1 (bench/README.md).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "core/blend/blend.h"
#include "core/dqs/dqs.h"
#include "core/lbs/lbs.h"
#include "core/parallel/thread_pool.h"
#include "core/procedural/limb.h"
#include "core/rig/pose.h"
#include "core/rig/rig.h"
#include "bench/load_average.h"

namespace {

using namespace sinew;

constexpr int64_t kSizes[] = {10'000, 100'000, 1'000'000};
constexpr int64_t kThreads[] = {1, 2};
// Vertices per parallel chunk, as in the deformers, so that memcpy is split the same way.
constexpr size_t kGrain = 8192;

// A posed rig with both deformers' joint data ready, built once per size and shared by all
// benchmarks of that size.
struct Frame {
  Rig rig;
  std::vector<Affine34f> lbs;
  std::vector<DualQuat> dqs;
  std::vector<float> out;

  size_t vertices() const { return rig.vertex_count(); }
  // Bytes one deform call reads or writes (see the file comment).
  size_t bytes() const {
    const SkinWeights& w = rig.weights;
    return 2 * rig.positions.size() * sizeof(float) + w.offsets.size() * sizeof(uint32_t) +
           w.joints.size() * sizeof(uint16_t) + w.weights.size() * sizeof(float);
  }
};

Frame& GetFrame(size_t vertices) {
  static std::map<size_t, std::unique_ptr<Frame>> cache;
  auto& slot = cache[vertices];
  if (slot) return *slot;

  LimbOptions limb;
  limb.segments = 100;
  limb.rings = static_cast<uint32_t>(vertices / limb.segments);
  limb.bones = 8;
  limb.max_influences = 4;
  auto rig = BuildRig(MakeLimb(limb));
  if (!rig.ok()) {
    std::fprintf(stderr, "sinew-bench-core: BuildRig: %s\n", rig.status().ToString().c_str());
    std::exit(1);
  }
  slot = std::make_unique<Frame>();
  Frame& f = *slot;
  f.rig = *std::move(rig);
  const Skeleton& skeleton = f.rig.skeleton;
  const Pose pose = LimbPose(skeleton, 0.5);
  std::vector<Similarity> world(skeleton.size());
  std::vector<Affine34d> transforms(skeleton.size());
  SkinningTransforms(skeleton, pose, world, transforms);
  for (const Affine34d& m : transforms) f.lbs.push_back(m.cast<float>());
  f.dqs.resize(transforms.size());
  ToDualQuats(transforms, f.dqs);
  f.out.resize(f.rig.positions.size());
  return f;
}

// Thread count 1: no pool; 2: one worker plus the calling thread.
std::unique_ptr<ThreadPool> MakePool(int64_t threads) {
  return threads > 1 ? std::make_unique<ThreadPool>(threads - 1) : nullptr;
}

void SetCounters(benchmark::State& state, size_t vertices, size_t bytes) {
  state.counters["vertices/s"] =
      benchmark::Counter(double(vertices) * double(state.iterations()), benchmark::Counter::kIsRate);
  state.SetBytesProcessed(int64_t(bytes) * state.iterations());
}

void BM_LBS(benchmark::State& state) {
  Frame& f = GetFrame(size_t(state.range(0)));
  const auto pool = MakePool(state.range(1));
  for (auto _ : state) {
    LinearBlendSkinning(f.rig.positions, f.rig.weights, f.lbs, f.out, pool.get());
    benchmark::ClobberMemory();
  }
  SetCounters(state, f.vertices(), f.bytes());
}

void BM_DQS(benchmark::State& state) {
  Frame& f = GetFrame(size_t(state.range(0)));
  const auto pool = MakePool(state.range(1));
  for (auto _ : state) {
    DualQuaternionSkinning(f.rig.positions, f.rig.weights, f.dqs, f.out, pool.get());
    benchmark::ClobberMemory();
  }
  SetCounters(state, f.vertices(), f.bytes());
}

// The portable LBS loop (what every CPU runs without AVX2): the plain reference the kernel is
// compared with in the same binary.
void BM_LBSPortable(benchmark::State& state) {
  Frame& f = GetFrame(size_t(state.range(0)));
  const auto pool = MakePool(state.range(1));
  for (auto _ : state) {
    ParallelFor(pool.get(), f.vertices(), kGrain, [&](size_t b, size_t e) {
      LinearBlendSkinningPortableRange(f.rig.positions, f.rig.weights, f.lbs, f.out, b, e);
    });
    benchmark::ClobberMemory();
  }
  SetCounters(state, f.vertices(), f.bytes());
}

// The portable DQS loop, likewise.
void BM_DQSPortable(benchmark::State& state) {
  Frame& f = GetFrame(size_t(state.range(0)));
  const auto pool = MakePool(state.range(1));
  for (auto _ : state) {
    ParallelFor(pool.get(), f.vertices(), kGrain, [&](size_t b, size_t e) {
      DualQuaternionSkinningPortableRange(f.rig.positions, f.rig.weights, f.dqs, f.out, b, e);
    });
    benchmark::ClobberMemory();
  }
  SetCounters(state, f.vertices(), f.bytes());
}

// The LBS/DQS blend, every vertex at 0.5 (one fused pass over blocks of 256 vertices).
void BM_Blend(benchmark::State& state) {
  Frame& f = GetFrame(size_t(state.range(0)));
  const auto pool = MakePool(state.range(1));
  const std::vector<float> blend(f.vertices(), 0.5f);
  for (auto _ : state) {
    ParallelFor(pool.get(), f.vertices(), 8192, [&](size_t b, size_t e) {  // as the deformer splits it
      BlendSkinningRange(f.rig.positions, f.rig.weights, blend, f.lbs, f.dqs, f.out, b, e);
    });
    benchmark::ClobberMemory();
  }
  SetCounters(state, f.vertices(), f.bytes() + sizeof(float) * f.vertices());
}

void BM_memcpy(benchmark::State& state) {
  const Frame& f = GetFrame(size_t(state.range(0)));
  const size_t bytes = f.bytes();
  const size_t n = f.vertices();
  const std::vector<char> src(bytes, 1);
  std::vector<char> dst(bytes);
  const auto pool = MakePool(state.range(1));
  for (auto _ : state) {
    // Vertex chunks [b, e) map to the byte range of their share of the frame.
    ParallelFor(pool.get(), n, kGrain, [&](size_t b, size_t e) {
      const size_t lo = b * bytes / n, hi = e * bytes / n;
      std::memcpy(dst.data() + lo, src.data() + lo, hi - lo);
    });
    benchmark::ClobberMemory();
  }
  SetCounters(state, n, bytes);
}

void Configure(benchmark::internal::Benchmark* b) {
  b->ArgNames({"vertices", "threads"})->UseRealTime()->Unit(benchmark::kMicrosecond);
  for (int64_t size : kSizes) {
    for (int64_t threads : kThreads) b->Args({size, threads});
  }
}

BENCHMARK(BM_LBS)->Name("LBS")->Apply(Configure);
BENCHMARK(BM_LBSPortable)->Name("LBSPortable")->Apply(Configure);
BENCHMARK(BM_DQS)->Name("DQS")->Apply(Configure);
BENCHMARK(BM_DQSPortable)->Name("DQSPortable")->Apply(Configure);
BENCHMARK(BM_Blend)->Name("Blend")->Apply(Configure);
BENCHMARK(BM_memcpy)->Name("memcpy")->Apply(Configure);

std::string BenchName(const char* family, int64_t vertices, int64_t threads) {
  return std::string(family) + "/vertices:" + std::to_string(vertices) +
         "/threads:" + std::to_string(threads);
}

std::string SizeLabel(int64_t vertices) {
  return vertices >= 1'000'000 ? std::to_string(vertices / 1'000'000) + "M"
                               : std::to_string(vertices / 1'000) + "k";
}

// Console output as usual, plus each benchmark's real time per iteration in seconds (the
// fastest repetition when --benchmark_repetitions is given).
class RecordingReporter : public benchmark::ConsoleReporter {
 public:
  RecordingReporter() : ConsoleReporter(OO_Tabular) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.run_type != Run::RT_Iteration || run.error_occurred) continue;
      const double seconds =
          run.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(run.time_unit);
      // Family and arguments only: "LBS/vertices:10000/threads:1", without "/real_time".
      const std::string name = run.run_name.function_name + "/" + run.run_name.args;
      auto [it, inserted] = seconds_.emplace(name, seconds);
      if (!inserted) it->second = std::min(it->second, seconds);
    }
  }

  const double* Seconds(const std::string& name) const {
    auto it = seconds_.find(name);
    return it == seconds_.end() ? nullptr : &it->second;
  }

 private:
  std::map<std::string, double> seconds_;
};

}  // namespace

int main(int argc, char** argv) {
  const sinew::bench::LoadAverageReport load_average;  // printed before and after the run
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RecordingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();

  // The frame's bytes per vertex (memcpy's buffer), for the sizes that ran: the rig dropped its
  // negligible weights when built, so this is under the 52 B of four influences. (The table's
  // bytes_per_second is in binary units, G/s = 2^30 B/s: divided by vertices/s as printed it
  // reads 7 % low, 44 for 47 B.)
  std::printf("\nframe bytes per vertex (memcpy's buffer; 52 B with four influences):");
  const char* sep = " ";
  for (int64_t size : kSizes) {
    if (!reporter.Seconds(BenchName("memcpy", size, 1)) && !reporter.Seconds(BenchName("memcpy", size, 2)) &&
        !reporter.Seconds(BenchName("LBS", size, 1)) && !reporter.Seconds(BenchName("LBS", size, 2))) {
      continue;
    }
    const Frame& f = GetFrame(size_t(size));
    std::printf("%s%s %.1f B (%.2f influences a vertex)", sep, SizeLabel(size).c_str(),
                double(f.bytes()) / double(f.vertices()), double(f.rig.weights.joints.size()) / double(f.vertices()));
    sep = ", ";
  }
  std::printf("\n\ntime(memcpy of the frame's bytes) / time(deformer); 1.0 = as fast as memcpy, which moves twice the\n"
              "traffic (reads and writes every byte): bound by memory bandwidth is about 1.5-2 at 1M vertices\n");
  for (const char* family : {"LBS", "DQS", "Blend"}) {
    for (int64_t size : kSizes) {
      for (int64_t threads : kThreads) {
        const double* deform = reporter.Seconds(BenchName(family, size, threads));
        const double* copy = reporter.Seconds(BenchName("memcpy", size, threads));
        if (deform == nullptr || copy == nullptr) continue;  // filtered out
        // The blend reads 4 bytes a vertex more (its factor): the memcpy of the frame's bytes,
        // scaled to the blend's (a copy's time follows its bytes).
        const Frame& f = GetFrame(size_t(size));
        const double scale = std::string(family) == "Blend"
                                 ? double(f.bytes() + sizeof(float) * f.vertices()) / double(f.bytes())
                                 : 1.0;
        std::printf("ratio %s/memcpy %s vertices %lld thread%s: %.2f\n", family,
                    SizeLabel(size).c_str(), static_cast<long long>(threads),
                    threads == 1 ? "" : "s", scale * *copy / *deform);
      }
    }
  }
  std::printf("\ntime(portable loop) / time(kernel): each kernel against the plain loop in this binary\n");
  for (const char* family : {"LBS", "DQS"}) {
    const std::string portable = std::string(family) + "Portable";
    for (int64_t size : kSizes) {
      for (int64_t threads : kThreads) {
        const double* l = reporter.Seconds(BenchName(family, size, threads));
        const double* p = reporter.Seconds(BenchName(portable.c_str(), size, threads));
        if (!l || !p) continue;
        std::printf("ratio %s/%s %s vertices %lld thread%s: %.2f (%s %.0f M vertices/s)\n", portable.c_str(), family,
                    SizeLabel(size).c_str(), static_cast<long long>(threads), threads == 1 ? "" : "s", *p / *l,
                    family, double(size) / *l / 1e6);
      }
    }
  }
  std::printf("\ntime(LBS) + time(DQS) / time(Blend): above 1 = the fused blend beats running both\n");
  for (int64_t size : kSizes) {
    for (int64_t threads : kThreads) {
      const double* l = reporter.Seconds(BenchName("LBS", size, threads));
      const double* d = reporter.Seconds(BenchName("DQS", size, threads));
      const double* b = reporter.Seconds(BenchName("Blend", size, threads));
      if (!l || !d || !b) continue;
      std::printf("ratio (LBS+DQS)/Blend %s vertices %lld thread%s: %.2f\n", SizeLabel(size).c_str(),
                  static_cast<long long>(threads), threads == 1 ? "" : "s", (*l + *d) / *b);
    }
  }
  return 0;
}
