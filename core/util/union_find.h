// Disjoint sets over 0..n-1, for connected components (a mesh's pieces, a voxel grid's parts).
// Path halving; Unite makes the smaller root the parent, so every set's root is its least
// element and the result does not depend on the order of the unions. O(n) memory, allocated by
// the constructor and by Labels.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

namespace sinew {

class UnionFind {
 public:
  explicit UnionFind(size_t n) : parent_(n) { std::iota(parent_.begin(), parent_.end(), 0u); }

  uint32_t Find(uint32_t x) {
    while (parent_[x] != x) x = parent_[x] = parent_[parent_[x]];
    return x;
  }
  void Unite(uint32_t a, uint32_t b) {
    a = Find(a);
    b = Find(b);
    if (a != b) parent_[std::max(a, b)] = std::min(a, b);
  }
  // Each element's set numbered 0, 1, ... in the order of the sets' least elements; the number
  // of sets is one more than the largest label (0 when n = 0).
  std::vector<uint32_t> Labels() {
    std::vector<uint32_t> label(parent_.size());
    uint32_t sets = 0;
    for (uint32_t i = 0; i < parent_.size(); ++i) {
      const uint32_t root = Find(i);
      label[i] = root == i ? sets++ : label[root];  // a root precedes its set's other elements
    }
    return label;
  }

 private:
  std::vector<uint32_t> parent_;
};

}  // namespace sinew
