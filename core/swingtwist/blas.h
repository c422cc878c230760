// Which BLAS this process loaded, for the sparse Cholesky of the elasticity weights
// (core/swingtwist/sparse.h explains why it matters): found once, and OpenBLAS set to one thread
// then. No CHOLMOD or Eigen here, so that the server and the benchmarks can name it.
#pragma once

#include <mutex>
#include <string>

namespace sinew {

struct BlasInfo {
  std::string name;            // e.g. "OpenBLAS 0.3.21 ... (pthreads, 1 thread)"
  bool one_at_a_time = false;  // factorizations and solves serialised (a BLAS unsafe across threads)
  int openblas_parallel = -1;  // OpenBLAS's build: 0 single-threaded, 1 pthreads, 2 OpenMP; -1 not OpenBLAS
};
const BlasInfo& SystemBlas();
// Held while a factorization or solve runs: the process-wide lock where SystemBlas() says
// one_at_a_time, else an empty lock.
std::unique_lock<std::mutex> BlasLock();

}  // namespace sinew
