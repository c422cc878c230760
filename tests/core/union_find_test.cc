// UnionFind (core/util/union_find.h): sets are the connected components of the unions made, and
// their labels count from 0 in the order of each set's least element, whatever the order of
// the unions.
#include <algorithm>
#include <random>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "core/util/union_find.h"

namespace sinew {
namespace {

TEST(UnionFind, LabelsAreComponentsInOrderOfTheirLeastElement) {
  // Two chains and a singleton: {0, 3, 6, 9}, {1, 4, 7}, {2}, {5, 8}.
  UnionFind sets(10);
  for (auto [a, b] : std::vector<std::pair<uint32_t, uint32_t>>{{9, 6}, {3, 6}, {0, 3}, {7, 4}, {1, 7}, {8, 5}}) {
    sets.Unite(a, b);
  }
  EXPECT_EQ(sets.Labels(), (std::vector<uint32_t>{0, 1, 2, 0, 1, 3, 0, 1, 3, 0}));
  EXPECT_EQ(sets.Find(9), 0u);  // the least element is the root
  EXPECT_TRUE(UnionFind(0).Labels().empty());
}

TEST(UnionFind, LabelsDoNotDependOnTheOrderOfTheUnions) {
  // A ring of 40 cut into 5 arcs, its edges united in shuffled orders.
  std::vector<std::pair<uint32_t, uint32_t>> edges;
  for (uint32_t i = 0; i < 40; ++i) {
    if (i % 8 != 7) edges.push_back({i, (i + 1) % 40});
  }
  std::vector<uint32_t> first;
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    std::shuffle(edges.begin(), edges.end(), rng);
    UnionFind sets(40);
    for (auto [a, b] : edges) trial % 2 ? sets.Unite(a, b) : sets.Unite(b, a);
    const auto labels = sets.Labels();
    if (first.empty()) first = labels;
    EXPECT_EQ(labels, first);
  }
  for (uint32_t i = 0; i < 40; ++i) EXPECT_EQ(first[i], i / 8);
}

}  // namespace
}  // namespace sinew
