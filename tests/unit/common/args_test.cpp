#include "common/args.h"

#include <gtest/gtest.h>

namespace hearth {
namespace {

const std::set<std::string> kValues = {"port", "ratio", "name"};
const std::set<std::string> kBools = {"help", "json"};

TEST(ArgsTest, ValuesInBothFormsAndBooleans) {
  auto a = Args::parse({"--port", "8080", "--name=alpha", "--json"}, kValues, kBools);
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(a->get("name"), "alpha");
  EXPECT_EQ(a->get_int("port", 0, 65535).value(), 8080);
  EXPECT_TRUE(a->has("json"));
  EXPECT_FALSE(a->has("help"));
  EXPECT_FALSE(a->get("ratio").has_value());
  EXPECT_FALSE(a->get_int("ratio", 0, 1).value().has_value()) << "an absent flag is no value, not an error";
  // The last of repeated flags wins; "=" keeps the rest of the argument, "=" included.
  auto b = Args::parse({"--name", "a", "--name=b=c"}, kValues, kBools);
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(b->get("name"), "b=c");
}

TEST(ArgsTest, EveryMistakeNamesTheFlag) {
  struct Case {
    std::vector<std::string> argv;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--bogus"}, "unknown flag --bogus"},
      {{"port"}, "unexpected argument \"port\""},
      {{"--port"}, "--port needs a value"},
      {{"--help=yes"}, "--help takes no value"},
  };
  for (const Case& c : cases) {
    auto a = Args::parse(c.argv, kValues, kBools);
    ASSERT_FALSE(a.is_ok()) << c.says;
    EXPECT_EQ(a.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(a.status().message().find(c.says), std::string::npos) << a.status().message();
  }
}

TEST(ArgsTest, IntegersAreCheckedAgainstTheirRange) {
  for (const char* bad : {"", "12x", "0x10", "99999999999999999999", "-1", "65536", " 1"}) {
    auto a = Args::parse({"--port", bad}, kValues, kBools);
    ASSERT_TRUE(a.is_ok());
    auto v = a->get_int("port", 0, 65535);
    ASSERT_FALSE(v.is_ok()) << "\"" << bad << "\"";
    EXPECT_NE(v.status().message().find("--port must be an integer in 0..65535"), std::string::npos)
        << v.status().message();
  }
  EXPECT_EQ(Args::parse({"--port", "0"}, kValues, kBools)->get_int("port", 0, 65535).value(), 0);
  EXPECT_EQ(Args::parse({"--port", "65535"}, kValues, kBools)->get_int("port", 0, 65535).value(), 65535);
}

TEST(ArgsTest, DoublesMustBeFinite) {
  EXPECT_DOUBLE_EQ(Args::parse({"--ratio", "0.25"}, kValues, kBools)->get_double("ratio").value().value(), 0.25);
  for (const char* bad : {"", "nan", "inf", "1e999", "1.5x"}) {
    auto v = Args::parse({"--ratio", bad}, kValues, kBools)->get_double("ratio");
    EXPECT_FALSE(v.is_ok()) << "\"" << bad << "\"";
  }
}

}  // namespace
}  // namespace hearth

namespace hearth {
namespace {

TEST(ArgsTest, RepeatedFlagsKeepEveryValueAndPositionalsAreOptIn) {
  auto args = Args::parse({"m.gguf", "--name", "a", "--name=b", "--x"}, {"name"}, {"x"}, /*allow_positionals=*/true);
  ASSERT_TRUE(args.is_ok()) << args.status().to_string();
  EXPECT_EQ(args->get("name"), "b");
  EXPECT_EQ(args->get_all("name"), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(args->get_all("other").empty());
  EXPECT_EQ(args->positionals(), std::vector<std::string>{"m.gguf"});
  EXPECT_FALSE(Args::parse({"m.gguf"}, {}, {}).is_ok());
  EXPECT_FALSE(Args::parse({"-m"}, {}, {}, true).is_ok()) << "a dash is never a positional";
}

}  // namespace
}  // namespace hearth
