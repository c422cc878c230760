// The sparse symmetric positive definite factorization of the elasticity weights (EMW's global
// step, the harmonic start, the biharmonic blend weights): CHOLMOD's supernodal Cholesky through
// Eigen (measured 3.9x faster than Eigen's SimplicialLDLT on a 28k-vertex bilaplacian, 1.4x on
// the Laplacian). Its dense kernels go through the system BLAS, whichever `libblas.so.3` the
// host provides: scripts/install-deps.sh installs OpenBLAS's single-threaded build
// (libopenblas0-serial; the precompute 1.0x on BCN_Epileptic's small grids to 3.2x on a
// 43k-vertex grid faster than on Debian's reference BLAS, docs/swing-twist.md).
//
// The precompute factors one joint's systems per pool worker, side by side, so the BLAS must be
// safe to call from several threads at once. OpenBLAS's single-threaded build is not, unless
// built with USE_LOCKING (0.3.7 on; Debian's is not): concurrent factorizations then fail as "not
// positive definite" or, silently, solve wrong. Where the loaded BLAS is such a build
// (openblas_get_parallel() == 0), every factorization and solve here takes one process-wide lock
// (BlasLock), so they run one at a time. A multithreaded OpenBLAS is asked for one thread
// (openblas_set_num_threads(1)): the joints already run side by side. (Its pthreads build also
// keeps the metrics server from starting: server/metrics.cc says so.) Weights are reproducible
// on one host; another CPU may pick other OpenBLAS kernels and differ in the last bits.
#pragma once

#include <Eigen/CholmodSupport>
#include <Eigen/SparseCore>

#include "core/swingtwist/blas.h"

namespace sinew {

class SpdSolver {
 public:
  explicit SpdSolver(const Eigen::SparseMatrix<double>& a) {
    const auto lock = BlasLock();
    llt_.compute(a);
  }
  bool ok() const { return llt_.info() == Eigen::Success; }
  template <class Rhs>
  typename Rhs::PlainObject solve(const Rhs& b) const {
    const auto lock = BlasLock();
    return llt_.solve(b);
  }

 private:
  Eigen::CholmodSupernodalLLT<Eigen::SparseMatrix<double>> llt_;
};

}  // namespace sinew
