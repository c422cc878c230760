// The clients' view of methods: names from the proto enum round-trip for every method, and
// --param NAME=VALUE reaches the method's parameters message by reflection, refusing unknown
// names and bad values by name.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "clients/lib/methods.h"

namespace sinew::client {
namespace {

using ::testing::HasSubstr;

TEST(Methods, NamesRoundTripForEveryEnumValue) {
  const auto* d = v1::Method_descriptor();
  for (int i = 0; i < d->value_count(); ++i) {
    const auto m = static_cast<v1::Method>(d->value(i)->number());
    if (m == v1::METHOD_UNSPECIFIED) continue;
    v1::Method back;
    ASSERT_TRUE(MethodFromName(MethodName(m), &back)) << MethodName(m);
    EXPECT_EQ(back, m);
  }
  v1::Method m;
  EXPECT_TRUE(MethodFromName("elastic-implicit", &m));
  EXPECT_EQ(m, v1::METHOD_ELASTIC_IMPLICIT);
  EXPECT_FALSE(MethodFromName("unspecified", &m));
  EXPECT_FALSE(MethodFromName("nope", &m));
  EXPECT_THAT(MethodNames(), HasSubstr("cage-mvc, cage-green"));
}

TEST(Methods, ParamsSetTheMethodsMessageByName) {
  v1::DeformerConfig c;
  std::string error;
  ASSERT_TRUE(SetParams(&c, "implicit", "sigma=0.5,max_iterations=12,default_operator=clean-union", &error)) << error;
  EXPECT_EQ(c.implicit().sigma(), 0.5);
  EXPECT_EQ(c.implicit().max_iterations(), 12u);
  EXPECT_EQ(c.implicit().default_operator(), v1::JOINT_OPERATOR_CLEAN_UNION);
  ASSERT_TRUE(SetParams(&c, "supercages", "skinning=dqs,no_skeleton_updater=true", &error)) << error;
  EXPECT_EQ(c.supercages().skinning(), v1::METHOD_DQS);
  EXPECT_TRUE(c.supercages().no_skeleton_updater());

  EXPECT_FALSE(SetParams(&c, "implicit", "sigmaa=1", &error));
  EXPECT_THAT(error, HasSubstr("--param sigmaa: not a parameter"));
  EXPECT_FALSE(SetParams(&c, "implicit", "sigma=abc", &error));
  EXPECT_THAT(error, HasSubstr("--param sigma: 'abc'"));
  EXPECT_FALSE(SetParams(&c, "implicit", "max_iterations=-3", &error));
  // Whole numbers out of the field's range are refused, not cut (until 2026-12-01 4294967297
  // became 1 and 99999999999999999999 became 4294967295).
  ASSERT_TRUE(SetParams(&c, "implicit", "max_iterations=4294967295", &error)) << error;
  EXPECT_EQ(c.implicit().max_iterations(), 4294967295u);
  for (const char* bad : {"max_iterations=4294967296", "max_iterations=4294967297", "max_iterations=99999999999999999999"}) {
    EXPECT_FALSE(SetParams(&c, "implicit", bad, &error)) << bad;
    EXPECT_THAT(error, HasSubstr("is out of range for uint32 (0 to 4294967295)")) << bad;
  }
  EXPECT_EQ(c.implicit().max_iterations(), 4294967295u) << "a refused value changed the field";
  EXPECT_FALSE(SetParams(&c, "implicit", "max_iterations=12.5", &error));
  EXPECT_FALSE(SetParams(&c, "implicit", "default_operator=glue", &error));
  EXPECT_FALSE(SetParams(&c, "implicit", "joints=1", &error));
  EXPECT_THAT(error, HasSubstr("a list or vector parameter"));
  EXPECT_FALSE(SetParams(&c, "implicit", "sigma", &error));
  EXPECT_THAT(error, HasSubstr("NAME=VALUE"));
  EXPECT_FALSE(SetParams(&c, "", "x=1", &error));
  EXPECT_THAT(error, HasSubstr("has no parameters"));
}

}  // namespace
}  // namespace sinew::client
