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
  // Row by row, as the CUDA kernel maps its threads (NormalRow: the item of each row by its
  // row_offset), so that the emulation runs that mapping too (until 2026-12-07 it looped over the
  // items directly, and the mapping ran only on a GPU).
  void RunEmulated(const ProgramBatch& b) const override {
    const auto* items = static_cast<const NormalsItem*>(b.items);
    const uint32_t rows = b.count == 0 ? 0 : *static_cast<const uint32_t*>(b.limits);
    for (uint32_t g = 0; g < rows; ++g) NormalRow(items, b.count, g);
  }
};

}  // namespace

const ProgramRunner& NormalsPass() {
  static const Pass pass;
  return pass;
}

}  // namespace sinew::gpu
