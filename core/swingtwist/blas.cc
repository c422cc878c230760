#include "core/swingtwist/blas.h"

#include <dlfcn.h>

namespace sinew {
namespace {

// OpenBLAS's own entry points (cblas.h), looked up in the process rather than linked: the
// project links the generic libblas.so.3, which is OpenBLAS only where the host chose it.
template <class Fn>
Fn Lookup(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
}

}  // namespace

const BlasInfo& SystemBlas() {
  static const BlasInfo info = [] {
    BlasInfo b;
    const auto get_parallel = Lookup<int (*)()>("openblas_get_parallel");
    if (!get_parallel) {
      b.name = "a BLAS without OpenBLAS's entry points (Debian's reference BLAS, or another taken to be thread-safe)";
      return b;
    }
    const int parallel = get_parallel();  // 0 serial build, 1 pthreads, 2 OpenMP
    if (const auto set_threads = Lookup<void (*)(int)>("openblas_set_num_threads"); set_threads && parallel != 0) {
      set_threads(1);
    }
    const auto config = Lookup<char* (*)()>("openblas_get_config");  // "OpenBLAS 0.3.21 DYNAMIC_ARCH ..."
    b.name = config && config() ? std::string(config()) : std::string("OpenBLAS");
    b.name += parallel == 0   ? " (single-threaded build: factorizations one at a time)"
              : parallel == 1 ? " (pthreads, 1 thread)"
                              : " (OpenMP, 1 thread)";
    b.one_at_a_time = parallel == 0;
    b.openblas_parallel = parallel;
    return b;
  }();
  return info;
}

std::unique_lock<std::mutex> BlasLock() {
  static std::mutex mutex;
  if (!SystemBlas().one_at_a_time) return {};
  return std::unique_lock<std::mutex>(mutex);
}

}  // namespace sinew
