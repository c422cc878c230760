#include "gpu/normals/normals_pass.h"

#include <string>

#include "gpu/normals/normals.cuh"

namespace sinew::gpu {
namespace {

class Pass final : public ProgramRunner {
 public:
  bool RunCuda(void* stream, const ProgramBatch& b, std::string* error) const override {
#ifdef SINEW_HAVE_CUDA
    return RunNormalsCuda(stream, static_cast<const NormalsItem*>(b.items), b.count,
                          *static_cast<const uint32_t*>(b.limits), error);
#else
    (void)stream;
    (void)b;
    if (error) *error = "the normals pass: Sinew was built without CUDA";
    return false;
#endif
  }
  void RunEmulated(const ProgramBatch& b) const override {
    const auto* items = static_cast<const NormalsItem*>(b.items);
    for (uint32_t t = 0; t < b.count; ++t) {
      for (uint32_t v = 0; v < items[t].vertex_count; ++v) VertexNormal(items[t], v);
    }
  }
};

}  // namespace

const ProgramRunner& NormalsPass() {
  static const Pass pass;
  return pass;
}

}  // namespace sinew::gpu
