#include "common/config.h"

#include <gtest/gtest.h>

namespace flashroll {
namespace {

Schema TestSchema() {
  return Schema::Map()
      .Required("kind", Schema::Enum({"test"}))
      .Optional("threads", Schema::Int(1, 64))
      .Optional("ratio", Schema::Float(0, 1))
      .Optional("debug", Schema::Bool())
      .Optional("timeout", Schema::Duration(1, 60'000))
      .Optional("memory", Schema::ByteSize(1024))
      .Optional("env", Schema::Any())
      .Optional("sandbox", Schema::Map().Required("image", Schema::String()))
      .Optional("efforts", Schema::List(Schema::Int(1, 100), 1));
}

Status Check(const std::string& yaml) {
  auto file = ParseYaml(yaml, "job.yaml");
  if (!file.ok()) return file.status();
  return TestSchema().Validate(file->root, file->path);
}

TEST(ConfigTest, ValidFilePasses) {
  EXPECT_TRUE(Check("kind: test\nthreads: 2\nratio: 0.5\ndebug: true\ntimeout: 10s\n"
                    "memory: 256M\nenv: {A: b}\nsandbox:\n  image: host\nefforts: [1, 50, 100]\n")
                  .ok());
}

TEST(ConfigTest, UnknownKeyNamesLineAndPath) {
  Status s = Check("kind: test\nsandbox:\n  image: host\n  imagee: x\n");
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("job.yaml:4: sandbox.imagee: unknown key", 0), 0u) << s.message();
}

TEST(ConfigTest, WrongTypeNamesLineAndPath) {
  Status s = Check("kind: test\nthreads: many\n");
  EXPECT_EQ(s.message(), "job.yaml:2: threads: expected an integer, got 'many'");
  s = Check("kind: test\nsandbox: [1, 2]\n");
  EXPECT_EQ(s.message(), "job.yaml:2: sandbox: expected a map, got a list");
  s = Check("kind: test\nefforts: [1, x]\n");
  EXPECT_EQ(s.message(), "job.yaml:2: efforts[1]: expected an integer, got 'x'");
  s = Check("kind: test\ndebug: maybe\n");
  EXPECT_EQ(s.message(), "job.yaml:2: debug: expected true or false, got 'maybe'");
}

TEST(ConfigTest, MissingRequiredKey) {
  Status s = Check("threads: 2\n");
  EXPECT_EQ(s.message(), "job.yaml:1: kind: missing required key");
  s = Check("kind: test\nsandbox:\n  {}\n");
  EXPECT_NE(s.message().find("sandbox.image: missing required key"), std::string::npos) << s.message();
}

TEST(ConfigTest, OutOfRange) {
  EXPECT_EQ(Check("kind: test\nthreads: 65\n").message(),
            "job.yaml:2: threads: value 65 out of range [1, 64]");
  EXPECT_NE(Check("kind: test\nratio: 1.5\n").message().find("ratio: value 1.5 out of range"),
            std::string::npos);
  EXPECT_NE(Check("kind: test\ntimeout: 2m\n").message().find("timeout: duration 2m out of range"),
            std::string::npos);
  EXPECT_NE(Check("kind: test\nmemory: 12\n").message().find("memory: size 12 out of range"),
            std::string::npos);
  EXPECT_NE(Check("kind: test\nefforts: []\n").message().find("at least 1 items"), std::string::npos);
  EXPECT_NE(Check("kind: other\n").message().find("kind: 'other' is not one of: test"),
            std::string::npos);
}

TEST(ConfigTest, SyntaxErrorHasLine) {
  auto file = ParseYaml("kind: test\nsandbox: [1, 2\nthreads: 3\n", "bad.yaml");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().message().rfind("bad.yaml:", 0), 0u);
  EXPECT_NE(file.status().message().find("(syntax)"), std::string::npos);
}

TEST(ConfigTest, EmptyFileIsAnError) {
  EXPECT_FALSE(ParseYaml("", "empty.yaml").ok());
  EXPECT_FALSE(ParseYaml("# only a comment\n", "empty.yaml").ok());
}

TEST(ConfigTest, MissingFile) {
  auto file = LoadYamlFile("/nonexistent/job.yaml");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), Code::kNotFound);
  EXPECT_NE(file.status().message().find("/nonexistent/job.yaml"), std::string::npos);
}

TEST(ConfigTest, KindIsRead) {
  auto file = ParseYaml("kind: rl_job\n", "a.yaml");
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(*ConfigKind(*file), "rl_job");
  auto list = ParseYaml("- a\n", "b.yaml");
  ASSERT_TRUE(list.ok());
  EXPECT_FALSE(ConfigKind(*list).ok());
}

TEST(ConfigTest, Durations) {
  EXPECT_EQ(ParseDuration("250ms")->count(), 250);
  EXPECT_EQ(ParseDuration("10s")->count(), 10'000);
  EXPECT_EQ(ParseDuration("1.5s")->count(), 1'500);
  EXPECT_EQ(ParseDuration("2m")->count(), 120'000);
  EXPECT_EQ(ParseDuration("1h")->count(), 3'600'000);
  EXPECT_EQ(ParseDuration("3")->count(), 3'000);
  EXPECT_FALSE(ParseDuration("10 parsecs").ok());
  EXPECT_FALSE(ParseDuration("s").ok());
  EXPECT_FALSE(ParseDuration("").ok());
}

TEST(ConfigTest, ByteSizes) {
  EXPECT_EQ(*ParseByteSize("4096"), 4096u);
  EXPECT_EQ(*ParseByteSize("64K"), 64u << 10);
  EXPECT_EQ(*ParseByteSize("256M"), 256u << 20);
  EXPECT_EQ(*ParseByteSize("256MiB"), 256u << 20);
  EXPECT_EQ(*ParseByteSize("256MB"), 256u << 20);
  EXPECT_EQ(*ParseByteSize("1G"), 1ull << 30);
  EXPECT_EQ(*ParseByteSize("0.5G"), 1ull << 29);
  EXPECT_FALSE(ParseByteSize("12Q").ok());
  EXPECT_FALSE(ParseByteSize("M").ok());
  EXPECT_FALSE(ParseByteSize("-1M").ok());
}

TEST(ConfigTest, TypedReadsUseFallbacks) {
  auto file = ParseYaml("a: 3\nb: x\nc: 0.25\nd: true\ne: 2s\nf: 1K\ng: [x, y]\n", "r.yaml");
  ASSERT_TRUE(file.ok());
  const YAML::Node& r = file->root;
  EXPECT_EQ(ReadInt(r, "a", 0), 3);
  EXPECT_EQ(ReadInt(r, "missing", 7), 7);
  EXPECT_EQ(ReadString(r, "b", ""), "x");
  EXPECT_DOUBLE_EQ(ReadFloat(r, "c", 0), 0.25);
  EXPECT_TRUE(ReadBool(r, "d", false));
  EXPECT_EQ(ReadDuration(r, "e", std::chrono::milliseconds(0)).count(), 2000);
  EXPECT_EQ(ReadByteSize(r, "f", 0), 1024u);
  EXPECT_EQ(ReadStringList(r, "g"), (std::vector<std::string>{"x", "y"}));
}

}  // namespace
}  // namespace flashroll
