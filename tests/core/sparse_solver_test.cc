// The elasticity weights' sparse Cholesky (core/swingtwist/sparse.h) factored from several threads
// at once, as the swing-twist precompute does (one joint per pool worker), must give what it
// gives one system at a time, whatever BLAS the host loaded. OpenBLAS's single-threaded build is
// not safe to call from several threads (its buffers are shared without USE_LOCKING): without the
// lock SpdSolver takes there, concurrent factorizations of these systems failed as "not positive
// definite" or, worse, solved them wrong by up to 5 % without a word (checked 2026-11-29 with
// the lock taken out; BCN_Epileptic's and the Arm's precompute failed that way). ctest also runs
// this test with LD_LIBRARY_PATH on that build and on Debian's reference BLAS
// (tests/CMakeLists.txt: SpdSolver.OnOpenBlasSerial, SpdSolver.OnReferenceBlas), with
// SINEW_EXPECT_BLAS naming what must have been loaded, so it cannot pass on the wrong library.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/swingtwist/sparse.h"

namespace sinew {
namespace {

// The 7-point Laplacian of an n³ grid with a zero boundary, plus `shift` on the diagonal: SPD,
// with supernodes large enough for CHOLMOD to hand them to the BLAS.
Eigen::SparseMatrix<double> GridLaplacian(int n, double shift) {
  std::vector<Eigen::Triplet<double>> t;
  auto id = [n](int x, int y, int z) { return (z * n + y) * n + x; };
  for (int z = 0; z < n; ++z) {
    for (int y = 0; y < n; ++y) {
      for (int x = 0; x < n; ++x) {
        const int i = id(x, y, z);
        t.emplace_back(i, i, 6 + shift);
        if (x + 1 < n) t.emplace_back(i, id(x + 1, y, z), -1), t.emplace_back(id(x + 1, y, z), i, -1);
        if (y + 1 < n) t.emplace_back(i, id(x, y + 1, z), -1), t.emplace_back(id(x, y + 1, z), i, -1);
        if (z + 1 < n) t.emplace_back(i, id(x, y, z + 1), -1), t.emplace_back(id(x, y, z + 1), i, -1);
      }
    }
  }
  Eigen::SparseMatrix<double> a(n * n * n, n * n * n);
  a.setFromTriplets(t.begin(), t.end());
  return a;
}

TEST(SpdSolver, FactorizationsFromSeveralThreadsAtOnceMatchOneAtATime) {
  const BlasInfo& blas = SystemBlas();
  std::printf("BLAS: %s\n", blas.name.c_str());
  if (const char* expect = std::getenv("SINEW_EXPECT_BLAS")) {
    ASSERT_NE(blas.name.find(expect), std::string::npos) << "expected a BLAS named \"" << expect << "\"";
  }
  constexpr int kSystems = 8, kThreads = 4, kRounds = 2, kN = 20;
  std::vector<Eigen::SparseMatrix<double>> a;
  std::vector<Eigen::VectorXd> b, reference;
  for (int s = 0; s < kSystems; ++s) {
    a.push_back(GridLaplacian(kN, 1e-3 * (s + 1)));
    b.push_back(Eigen::VectorXd::LinSpaced(a.back().rows(), -1.0, 1.0 + s));
    const SpdSolver solver(a.back());
    ASSERT_TRUE(solver.ok()) << s;
    reference.push_back(solver.solve(b.back()));
    // The one-at-a-time solution solves the system (a check of the reference itself).
    EXPECT_LT((a.back() * reference.back() - b.back()).norm(), 1e-9 * b.back().norm()) << s;
  }
  // Every thread factors and solves every system, kRounds times, all threads at once.
  std::vector<std::string> failures(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        for (int k = 0; k < kSystems; ++k) {
          const int s = (k + t) % kSystems;  // the threads start on different systems
          const SpdSolver solver(a[size_t(s)]);
          if (!solver.ok()) {
            failures[size_t(t)] += "system " + std::to_string(s) + " did not factor; ";
            continue;
          }
          const Eigen::VectorXd x = solver.solve(b[size_t(s)]);
          const double err = (x - reference[size_t(s)]).norm() / reference[size_t(s)].norm();
          if (!(err <= 1e-12)) {
            char what[96];
            std::snprintf(what, sizeof what, "system %d differs by %.3g of its norm; ", s, err);
            failures[size_t(t)] += what;
          }
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[size_t(t)], "") << "thread " << t;
}

}  // namespace
}  // namespace sinew
