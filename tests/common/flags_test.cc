#include "common/flags.h"

#include <gtest/gtest.h>

namespace flashroll {
namespace {

struct Parsed {
  std::string model;
  int64_t max_tokens = 16;
  double temperature = 1.0;
  bool json = false;
  std::vector<std::string> allow;
  std::vector<std::string> rest;
};

// A parser wired to the fields of a Parsed.
struct TestParser {
  explicit TestParser(Parsed* p) : parser("test [flags] -- CMD", "A test.") {
    parser.String("--model", &p->model, "model path");
    parser.Int("--max-tokens", &p->max_tokens, "tokens");
    parser.Double("--temperature", &p->temperature, "temperature");
    parser.Bool("--json", &p->json, "json output");
    parser.List("--allow", &p->allow, "allow rules");
    parser.Positional("CMD", &p->rest, "command");
  }
  FlagParser parser;
};

Status Parse(const std::vector<std::string>& args, Parsed* p) {
  TestParser t(p);
  return t.parser.Parse(args);
}

TEST(FlagsTest, ParsesAllKinds) {
  Parsed p;
  ASSERT_TRUE(Parse({"--model", "m", "--max-tokens=32", "--temperature", "0.5", "--json", "--allow",
                     "10.0.0.1:80", "10.0.0.0/8:443", "--", "echo", "--json"},
                    &p)
                  .ok());
  EXPECT_EQ(p.model, "m");
  EXPECT_EQ(p.max_tokens, 32);
  EXPECT_DOUBLE_EQ(p.temperature, 0.5);
  EXPECT_TRUE(p.json);
  EXPECT_EQ(p.allow, (std::vector<std::string>{"10.0.0.1:80", "10.0.0.0/8:443"}));
  EXPECT_EQ(p.rest, (std::vector<std::string>{"echo", "--json"}));
}

TEST(FlagsTest, ErrorsNameTheFlag) {
  Parsed p;
  EXPECT_EQ(Parse({"--max-tokens", "ten"}, &p).message(), "--max-tokens: expected an integer, got 'ten'");
  EXPECT_EQ(Parse({"--model"}, &p).message(), "--model: missing value");
  EXPECT_EQ(Parse({"--nope"}, &p).message(), "unknown flag '--nope' (see --help)");
  EXPECT_EQ(Parse({"--allow", "--json"}, &p).message(), "--allow: missing value");
}

TEST(FlagsTest, HelpIsRequestedAndListsFlags) {
  Parsed p;
  TestParser t(&p);
  ASSERT_TRUE(t.parser.Parse({"--help"}).ok());
  EXPECT_TRUE(t.parser.help_requested());
  const std::string usage = t.parser.Usage();
  EXPECT_NE(usage.find("usage: test [flags] -- CMD"), std::string::npos);
  EXPECT_NE(usage.find("--max-tokens"), std::string::npos);
  EXPECT_NE(usage.find("--allow VALUE..."), std::string::npos);
}

TEST(FlagsTest, PositionalWithoutSinkIsAnError) {
  int64_t n = 0;
  FlagParser parser("t", "");
  parser.Int("--n", &n, "n");
  EXPECT_EQ(parser.Parse({"stray"}).message(), "unexpected argument 'stray'");
}

}  // namespace
}  // namespace flashroll
