// The method-neutral parameters (core/deformer/params.h) and the registry: a ParamSet is checked
// against the method's own ParamSpecs before its parser runs, every error names the field, and a
// method only ever receives its own parameters struct.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/cage/cage_deformer.h"
#include "core/deformer/deformer.h"
#include "core/implicit/implicit_params.h"
#include "tests/core/test_util.h"

namespace sinew {
namespace {

using ::testing::HasSubstr;

absl::Status Parse(std::string_view method, const ParamSet& set) {
  return ParseDeformerConfig(*FindMethod(method), set, "deformer.x").status();
}

TEST(Params, EveryRegisteredMethodHasAUniqueNameAndId) {
  for (const MethodInfo& a : Methods()) {
    EXPECT_NE(a.id, 0u) << a.name;
    EXPECT_FALSE(a.name.empty());
    EXPECT_EQ(FindMethod(a.name), &a);
    EXPECT_EQ(FindMethodById(a.id), &a);
    // A method with parameters says which struct its parser makes.
    EXPECT_EQ(a.parse != nullptr, a.params_type != nullptr) << a.name;
    EXPECT_EQ(a.params.empty(), a.parse == nullptr) << a.name;
  }
  EXPECT_EQ(FindMethod("no-such-method"), nullptr);
}

TEST(Params, EmptySetGivesTheDefaults) {
  auto c = ParseDeformerConfig(*FindMethod("implicit"), {}, "deformer.implicit");
  ASSERT_TRUE(c.ok()) << c.status();
  const ImplicitConfig& p = ParamsOf<ImplicitConfig>(*c);
  EXPECT_EQ(p.sigma, 0.35);
  EXPECT_EQ(p.default_operator, JointOperator::kContact);
  // No struct at all also reads as the defaults.
  EXPECT_EQ(ParamsOf<ImplicitConfig>(DeformerConfig{"implicit", nullptr}).max_substeps, 32u);
}

TEST(Params, ValuesReachTheMethodsStruct) {
  ParamSet joint;
  joint.Set("joint", ParamValue::Number(3)).Set("op", ParamValue::Choice("bulge"));
  ParamValue joints;
  joints.kind = ParamValue::Kind::kList;
  joints.list = {joint};
  ParamSet set;
  set.Set("sigma", ParamValue::Number(0.5))
      .Set("default_operator", ParamValue::Choice("clean-union"))
      .Set("joints", joints)
      .Set("max_substeps", ParamValue::Number(8));
  auto c = ParseDeformerConfig(*FindMethod("elastic-implicit"), set, "deformer.implicit");
  ASSERT_TRUE(c.ok()) << c.status();
  const ImplicitConfig& p = ParamsOf<ImplicitConfig>(*c);
  EXPECT_EQ(p.sigma, 0.5);
  EXPECT_EQ(p.default_operator, JointOperator::kCleanUnion);
  ASSERT_EQ(p.joint_operators.size(), 1u);
  EXPECT_EQ(p.joint_operators[0], (std::pair<uint32_t, JointOperator>{3, JointOperator::kBulge}));
  EXPECT_EQ(p.max_substeps, 8u);
  EXPECT_EQ(c->method, "elastic-implicit");
}

TEST(Params, ErrorsNameTheField) {
  ParamSet set;
  set.Set("sigmaa", ParamValue::Number(1));
  EXPECT_THAT(std::string(Parse("implicit", set).message()), HasSubstr("deformer.x.sigmaa: not a parameter"));
  set = {};
  set.Set("sigma", ParamValue::Flag(true));
  EXPECT_THAT(std::string(Parse("implicit", set).message()), HasSubstr("deformer.x.sigma: must be a number"));
  set = {};
  set.Set("sigma", ParamValue::Number(1.5));
  EXPECT_THAT(std::string(Parse("implicit", set).message()), HasSubstr("deformer.x.sigma: 1.5 is outside (0, 1]"));
  set = {};
  set.Set("max_iterations", ParamValue::Number(2.5));
  EXPECT_THAT(std::string(Parse("implicit", set).message()), HasSubstr("deformer.x.max_iterations: 2.5 is not"));
  set = {};
  set.Set("default_operator", ParamValue::Choice("glue"));
  EXPECT_THAT(std::string(Parse("implicit", set).message()),
              HasSubstr("deformer.x.default_operator: \"glue\" is not one of default, union"));
  ParamSet item;
  item.Set("joint", ParamValue::Number(1)).Set("op", ParamValue::Choice("melt"));
  ParamValue list;
  list.kind = ParamValue::Kind::kList;
  list.list = {ParamSet{}, item};
  list.list[0].Set("joint", ParamValue::Number(2));
  set = {};
  set.Set("joints", list);
  EXPECT_THAT(std::string(Parse("implicit", set).message()), HasSubstr("deformer.x.joints[1].op: \"melt\""));
  // LBS has no parameters at all.
  set = {};
  set.Set("cage", ParamValue::Number(0));
  EXPECT_THAT(std::string(Parse("lbs", set).message()), HasSubstr("deformer.x.cage: not a parameter of this method (it has none)"));
}

TEST(Params, CreateRefusesAnotherMethodsStruct) {
  auto rig = std::make_shared<const Rig>(testing::SmallLimb());
  auto cage = std::make_shared<CageParams>();
  auto st = CreateDeformer(rig, {"implicit", cage}).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("not the parameters of method implicit"));
  st = CreateDeformer(rig, {"lbs", cage}).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateDeformer(rig, {"nope", nullptr}).status().code(), absl::StatusCode::kInvalidArgument);
}

// A cage method whose coordinates would pass kMaxCoordinateBytes is refused before anything is
// allocated, naming the cage (until 2026-12-01 the allocation of 800 GB ended the process). The
// rig is filled in directly: a million vertices in a 100 000-vertex cage, never validated or
// allocated beyond its positions.
TEST(Params, CageCoordinatesPastTheirLimitAreRefusedNamingTheCage) {
  Rig rig;
  rig.positions.assign(3 * 1'000'000, 0.f);
  Cage cage;
  cage.positions.assign(3 * 100'000, 0.f);
  cage.triangles.assign(3 * 200'000, 0u);
  rig.cages.push_back(cage);
  for (const char* method : {"cage-mvc", "cage-green"}) {
    const MethodInfo* m = FindMethod(method);
    ASSERT_NE(m, nullptr);
    auto prepared = m->prepare(rig, DeformerConfig(method), nullptr, nullptr);
    EXPECT_EQ(prepared.status().code(), absl::StatusCode::kResourceExhausted) << method;
    EXPECT_THAT(std::string(prepared.status().message()), HasSubstr("rig.cages[0]: method " + std::string(method)));
  }
  EXPECT_TRUE(CheckCoordinateBytes(65536, 8192, 0, "cage-mvc").ok());  // exactly 4 GiB
  EXPECT_EQ(CheckCoordinateBytes(65536, 8193, 0, "cage-mvc").code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace sinew
