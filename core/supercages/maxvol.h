// MaxVol row selection (Goreinov et al.): from a tall m x c matrix, c rows whose c x c submatrix
// has locally maximal |det|, i.e. no single row swap grows it by more than a factor 1 + delta.
// Used by the SuperCages cage updater: solving the square system on those rows is exact for
// meshes the cage can produce, and the fitted cages are stable.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <Eigen/Core>

namespace sinew {

struct MaxVolResult {
  std::vector<uint32_t> rows;  // c row indices, slot order
  double log_abs_det = 0;      // log |det| of the selected submatrix
  double dominance = 0;        // max |B_ij| of B = A · A_sel^-1 at the end (<= 1 + delta)
  int swaps = 0;
  bool stopped = false;        // `stop` said so: rows are the selection reached, not a maximum
};

// `a` must have full column rank (m >= c). Starts from a column-pivoted QR of aᵀ, then swaps
// rows while some |B_ij| > 1 + delta (rank-1 updates of B, O(m c) per swap). Rank-deficient
// (the start solves to non-finite values, or fewer rows than columns, when `rows` is empty):
// log_abs_det is -inf, returned before any swap.
// `stop`, when given, is asked before each swap (O(m c) apart; the starting QR, O(m c²), is not
// interrupted): true ends the search with `stopped` set (a preparation's cancel; until
// 2026-12-07 a large mesh's swaps ran to their end uncancellable).
MaxVolResult MaxVol(const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>& a,
                    double delta = 1e-2, int max_swaps = 100000, const std::function<bool()>& stop = {});

}  // namespace sinew
