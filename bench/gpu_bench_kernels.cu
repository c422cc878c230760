#include <cuda_runtime.h>

#include <vector>

#include "bench/gpu_bench_kernels.h"
#include "gpu/dqs/dqs.cuh"
#include "gpu/lbs/lbs.cuh"
#include "gpu/swingtwist/swing_twist.cuh"

namespace sinew::bench {
namespace {

__global__ void Lbs(const float* rest, const uint32_t* off, const uint16_t* j, const float* w,
                    const float* m, uint32_t n, float* out) {
  const uint32_t v = blockIdx.x * blockDim.x + threadIdx.x;
  if (v < n) gpu::LbsVertex(rest, off, j, w, m, v, out + 3 * size_t(v));
}

__global__ void Dqs(const float* rest, const uint32_t* off, const uint16_t* j, const float* w,
                    const float* q, uint32_t n, float* out) {
  const uint32_t v = blockIdx.x * blockDim.x + threadIdx.x;
  if (v < n) gpu::DqsVertex(rest, off, j, w, q, v, out + 3 * size_t(v));
}

__global__ void SwingTwist(const float* rest, const float* rows, uint32_t cols, const float* joints, uint32_t n,
                           float* out) {
  const uint32_t v = blockIdx.x * blockDim.x + threadIdx.x;
  if (v < n) gpu::SwingTwistVertex(rest, rows, cols, joints, v, out + 3 * size_t(v));
}

struct Device {
  std::vector<void*> owned;
  std::string* error;
  bool ok = true;
  bool Check(cudaError_t e, const char* what) {
    if (e != cudaSuccess && ok) {
      *error = std::string(what) + ": " + cudaGetErrorString(e);
      ok = false;
    }
    return ok;
  }
  template <class T>
  T* Put(const T* host, size_t n) {
    void* d = nullptr;
    if (!Check(cudaMalloc(&d, sizeof(T) * (n ? n : 1)), "cudaMalloc")) return nullptr;
    owned.push_back(d);
    if (host && n) Check(cudaMemcpy(d, host, sizeof(T) * n, cudaMemcpyHostToDevice), "cudaMemcpy");
    return static_cast<T*>(d);
  }
  ~Device() {
    for (void* p : owned) cudaFree(p);
  }
};

}  // namespace

std::string GpuName(std::string* error) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    *error = e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device";
    return "";
  }
  cudaDeviceProp p;
  cudaGetDeviceProperties(&p, 0);
  return p.name;
}

bool TimeGpuSkinning(const float* rest, const uint32_t* offsets, const uint16_t* joints,
                     const float* weights, size_t vertices, size_t entries, const float* lbs_joints,
                     const float* dqs_joints, size_t joint_count, const SwingTwistData& swing_twist,
                     size_t copy_bytes, GpuTimes* out, std::string* error) {
  Device d{{}, error};
  const float* r = d.Put(rest, 3 * vertices);
  const uint32_t* o = d.Put(offsets, vertices + 1);
  const uint16_t* j = d.Put(joints, entries);
  const float* w = d.Put(weights, entries);
  const float* ml = d.Put(lbs_joints, 12 * joint_count);
  const float* mq = d.Put(dqs_joints, 12 * joint_count);
  const float* st_rows = d.Put(swing_twist.rows, size_t{swing_twist.cols} * vertices);
  const float* st_joints = d.Put(swing_twist.joints, 48 * joint_count);
  float* result = d.Put<float>(nullptr, 3 * vertices);
  char* src = d.Put<char>(nullptr, copy_bytes);
  char* dst = d.Put<char>(nullptr, copy_bytes);
  if (!d.ok) return false;
  cudaEvent_t a, b;
  d.Check(cudaEventCreate(&a), "cudaEventCreate");
  d.Check(cudaEventCreate(&b), "cudaEventCreate");
  const uint32_t n = static_cast<uint32_t>(vertices), blocks = (n + 255) / 256;
  auto time = [&](auto launch) {
    launch();  // warm-up
    cudaEventRecord(a);
    constexpr int kReps = 20;
    for (int i = 0; i < kReps; ++i) launch();
    cudaEventRecord(b);
    d.Check(cudaEventSynchronize(b), "cudaEventSynchronize");
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    return double(ms) / kReps;
  };
  out->copy_ms = time([&] { cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice); });
  out->lbs_ms = time([&] { Lbs<<<blocks, 256>>>(r, o, j, w, ml, n, result); });
  out->dqs_ms = time([&] { Dqs<<<blocks, 256>>>(r, o, j, w, mq, n, result); });
  out->swing_twist_ms =
      time([&] { SwingTwist<<<blocks, 256>>>(r, st_rows, swing_twist.cols, st_joints, n, result); });
  d.Check(cudaGetLastError(), "kernel");
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return d.ok;
}

}  // namespace sinew::bench
