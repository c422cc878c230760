#include "core/supercages/maxvol.h"

#include <cmath>
#include <limits>

#include <Eigen/LU>
#include <Eigen/QR>

namespace sinew {

MaxVolResult MaxVol(const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>& a,
                    double delta, int max_swaps, const std::function<bool()>& stop) {
  const Eigen::Index m = a.rows(), c = a.cols();
  MaxVolResult r;
  if (c == 0) return r;  // the empty submatrix: determinant 1
  if (m < c) {  // no c x c submatrix at all: rank-deficient, as the header says (until 2026-12-07 log 0)
    r.log_abs_det = -std::numeric_limits<double>::infinity();
    r.dominance = std::numeric_limits<double>::infinity();
    return r;
  }
  // Initial rows: the pivots of a column-pivoted QR of aᵀ are well-conditioned rows of a.
  const Eigen::ColPivHouseholderQR<Eigen::MatrixXd> qr(a.transpose());
  r.rows.resize(static_cast<size_t>(c));
  for (Eigen::Index k = 0; k < c; ++k) r.rows[k] = static_cast<uint32_t>(qr.colsPermutation().indices()[k]);

  Eigen::MatrixXd sel(c, c);
  for (Eigen::Index k = 0; k < c; ++k) sel.row(k) = a.row(r.rows[k]);
  // B = a · sel⁻¹ (m x c): Bᵀ = sel⁻ᵀ aᵀ.
  Eigen::MatrixXd b = Eigen::PartialPivLU<Eigen::MatrixXd>(sel.transpose()).solve(a.transpose()).transpose();
  // A singular start (a rank-deficient a: a zero column, rows repeated) solves to non-finite
  // values, and no swap mends them: said at once (until 2026-12-03 every swap ran, on NaN).
  if (!b.allFinite()) {
    r.log_abs_det = -std::numeric_limits<double>::infinity();
    r.dominance = std::numeric_limits<double>::infinity();
    return r;
  }
  for (; r.swaps < max_swaps; ++r.swaps) {
    if (stop && stop()) {
      r.stopped = true;
      break;
    }
    Eigen::Index i, j;
    const double best = b.cwiseAbs().maxCoeff(&i, &j);
    r.dominance = best;
    if (!std::isfinite(best)) {  // the updates lost B
      r.log_abs_det = -std::numeric_limits<double>::infinity();
      return r;
    }
    if (best <= 1 + delta) break;
    // Row i replaces slot j: B ← B − B[:,j] (B[i,:] − e_jᵀ) / B[i,j].
    const Eigen::VectorXd col = b.col(j);
    Eigen::RowVectorXd row = b.row(i);
    row(j) -= 1;
    b.noalias() -= col * row / col(i);
    r.rows[j] = static_cast<uint32_t>(i);
  }
  for (Eigen::Index k = 0; k < c; ++k) sel.row(k) = a.row(r.rows[k]);
  const Eigen::PartialPivLU<Eigen::MatrixXd> lu(sel);
  r.log_abs_det = 0;
  for (Eigen::Index k = 0; k < c; ++k) r.log_abs_det += std::log(std::abs(lu.matrixLU()(k, k)));
  return r;
}

}  // namespace sinew
