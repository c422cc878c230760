// The rig store's holds (server/rig_store.h), on its own: what a tenant sees of a rig an upload is
// still keeping in --state-dir.

#include "server/rig_store.h"

#include <gtest/gtest.h>

#include "tests/core/test_util.h"

namespace sinew::server {
namespace {

// An upload's hold is the tenant's only once kept (RigStore::Saved): until then GetRig, CreateSession,
// ListRigs and DeleteRig (Find, Acquire, List, Delete) do not see it, it counts in the tenant's
// quota (List with unsaved), and no other upload's room evicts it; an upload that cannot keep it
// lets go of its own unsaved hold only. Until 2026-12-07 the rig was seen from its insertion, so a
// crash while its files were written lost a rig GetRig had answered for (the Python client takes
// that answer as "uploaded").
TEST(RigStore, AnUploadsHoldIsUnseenUntilKept) {
  const Rig limb = testing::SmallLimb();
  const size_t bytes = limb.ResidentBytes();
  RigStore store(bytes + bytes / 2);  // room for one
  std::vector<std::string> evicted;
  auto stored = store.Insert("a", limb, 1, "t", &evicted);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(store.Find("a", 2, "t"), nullptr);
  EXPECT_FALSE(store.Acquire("a", 2, "t"));
  EXPECT_TRUE(store.List("t").empty());
  EXPECT_EQ(store.List("t", /*unsaved=*/true).size(), 1u);
  EXPECT_EQ(store.Delete("a", "t").code(), absl::StatusCode::kNotFound);
  // Another upload of the same bytes by the tenant: not had (it keeps the rig too).
  bool had = true;
  ASSERT_NE(store.Adopt("a", 2, "t", &had), nullptr);
  EXPECT_FALSE(had);
  EXPECT_TRUE(store.Holds("a", "t"));  // in its quota already
  // That second upload fails to keep it: the first's hold stays (until the review of 2026-12-07
  // one flag served both, and the second's failure dropped the rig the first then answered for).
  store.ReleaseUnsaved("a", "t");
  EXPECT_EQ(store.Tenants("a"), (std::vector<std::string>{"t"}));
  EXPECT_EQ(store.Find("a", 2, "t"), nullptr);
  // Not evicted for another rig while unsaved, though no session uses it.
  const auto full = store.Insert("b", limb, 3, "t", &evicted);
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted) << full.status();
  EXPECT_TRUE(evicted.empty());
  // Another tenant adopts it; that upload fails to keep it: its hold goes, the first stays.
  ASSERT_NE(store.Adopt("a", 4, "u", &had), nullptr);
  EXPECT_FALSE(had);
  EXPECT_EQ(store.Tenants("a"), (std::vector<std::string>{"t", "u"}));
  store.ReleaseUnsaved("a", "u");
  EXPECT_EQ(store.Tenants("a"), (std::vector<std::string>{"t"}));
  // Kept: seen, used, listed, deletable; a release after that does nothing.
  store.Saved("a", "t");
  EXPECT_NE(store.Find("a", 5, "t"), nullptr);
  EXPECT_TRUE(store.Acquire("a", 5, "t"));
  EXPECT_EQ(store.List("t").size(), 1u);
  ASSERT_NE(store.Adopt("a", 5, "t", &had), nullptr);
  EXPECT_TRUE(had);
  store.ReleaseUnsaved("a", "t");
  EXPECT_EQ(store.Tenants("a"), (std::vector<std::string>{"t"}));
  // Now evictable for another rig, and gone with it.
  const auto room = store.Insert("b", limb, 6, "t", &evicted);
  ASSERT_TRUE(room.ok()) << room.status();
  EXPECT_EQ(evicted, (std::vector<std::string>{"a"}));
  // The last unsaved hold released: the rig leaves the store and its bytes the budget.
  store.ReleaseUnsaved("b", "t");
  EXPECT_EQ(store.count(), 0u);
  EXPECT_EQ(store.bytes(), 0u);
}

}  // namespace
}  // namespace sinew::server
