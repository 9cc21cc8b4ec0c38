// Edges of the YAML schema checks and the value parsers (common/config.h):
// inclusive bounds, every unit, every fallback, and the exact error lines.
#include <gtest/gtest.h>

#include "common/config.h"

namespace flashroll {
namespace {

Status CheckWith(const Schema& schema, const std::string& yaml) {
  auto file = ParseYaml(yaml, "c.yaml");
  if (!file.ok()) return file.status();
  return schema.Validate(file->root, file->path);
}

Schema Field(Schema value) { return Schema::Map().Optional("v", std::move(value)); }

TEST(ConfigMutantsTest, IntBoundsAreInclusive) {
  const Schema s = Field(Schema::Int(-3, 7));
  EXPECT_TRUE(CheckWith(s, "v: -3").ok());
  EXPECT_TRUE(CheckWith(s, "v: 7").ok());
  EXPECT_TRUE(CheckWith(s, "v: 0").ok());
  EXPECT_EQ(CheckWith(s, "v: -4").message(), "c.yaml:1: v: value -4 out of range [-3, 7]");
  EXPECT_EQ(CheckWith(s, "v: 8").message(), "c.yaml:1: v: value 8 out of range [-3, 7]");
  EXPECT_EQ(CheckWith(s, "v: 1.5").message(), "c.yaml:1: v: expected an integer, got '1.5'");
  EXPECT_EQ(CheckWith(s, "v: 99999999999999999999").message(),
            "c.yaml:1: v: expected an integer, got '99999999999999999999'");
  EXPECT_EQ(CheckWith(s, "v: ''").message(), "c.yaml:1: v: expected an integer, got ''");
  EXPECT_TRUE(CheckWith(Field(Schema::Int()), "v: -9223372036854775808").ok());
}

TEST(ConfigMutantsTest, FloatBoundsAreInclusive) {
  const Schema s = Field(Schema::Float(0.5, 2));
  EXPECT_TRUE(CheckWith(s, "v: 0.5").ok());
  EXPECT_TRUE(CheckWith(s, "v: 2").ok());
  EXPECT_EQ(CheckWith(s, "v: 0.25").message(), "c.yaml:1: v: value 0.25 out of range [0.5, 2]");
  EXPECT_EQ(CheckWith(s, "v: 2.5").message(), "c.yaml:1: v: value 2.5 out of range [0.5, 2]");
  EXPECT_EQ(CheckWith(s, "v: .nan").message(), "c.yaml:1: v: expected a number, got '.nan'");
  EXPECT_EQ(CheckWith(s, "v: 1e999").message(), "c.yaml:1: v: expected a number, got '1e999'");
  EXPECT_EQ(CheckWith(s, "v: 1x").message(), "c.yaml:1: v: expected a number, got '1x'");
}

TEST(ConfigMutantsTest, Bools) {
  const Schema s = Field(Schema::Bool());
  for (const char* ok : {"true", "True", "TRUE", "false", "False", "FALSE"}) {
    EXPECT_TRUE(CheckWith(s, std::string("v: ") + ok).ok()) << ok;
  }
  for (const char* bad : {"yes", "1", "tRUE", "falsey"}) {
    EXPECT_FALSE(CheckWith(s, std::string("v: ") + bad).ok()) << bad;
  }
  auto file = ParseYaml("a: True\nb: FALSE\nc: no\nd: [1]\n", "b.yaml");
  ASSERT_TRUE(file.ok());
  EXPECT_TRUE(ReadBool(file->root, "a", false));
  EXPECT_FALSE(ReadBool(file->root, "b", true));
  EXPECT_TRUE(ReadBool(file->root, "c", true));
  EXPECT_FALSE(ReadBool(file->root, "c", false));
  EXPECT_TRUE(ReadBool(file->root, "d", true));
  EXPECT_TRUE(ReadBool(file->root, "missing", true));
}

TEST(ConfigMutantsTest, EnumsNameEveryValue) {
  const Schema s = Field(Schema::Enum({"a", "b", "c"}));
  EXPECT_TRUE(CheckWith(s, "v: a").ok());
  EXPECT_TRUE(CheckWith(s, "v: c").ok());
  EXPECT_EQ(CheckWith(s, "v: d").message(), "c.yaml:1: v: 'd' is not one of: a, b, c");
  EXPECT_EQ(CheckWith(s, "v: [a]").message(), "c.yaml:1: v: expected one of the listed values, got a list");
}

TEST(ConfigMutantsTest, DurationAndSizeBoundsAreInclusive) {
  const Schema d = Field(Schema::Duration(100, 2000));
  EXPECT_TRUE(CheckWith(d, "v: 100ms").ok());
  EXPECT_TRUE(CheckWith(d, "v: 2s").ok());
  EXPECT_EQ(CheckWith(d, "v: 99ms").message(), "c.yaml:1: v: duration 99ms out of range [100ms, 2000ms]");
  EXPECT_EQ(CheckWith(d, "v: 2001ms").message(), "c.yaml:1: v: duration 2001ms out of range [100ms, 2000ms]");
  EXPECT_EQ(CheckWith(d, "v: 2x").message(), "c.yaml:1: v: unknown duration unit 'x' in '2x' (use ms, s, m or h)");
  const Schema b = Field(Schema::ByteSize(1024, 4096));
  EXPECT_TRUE(CheckWith(b, "v: 1K").ok());
  EXPECT_TRUE(CheckWith(b, "v: 4096").ok());
  EXPECT_EQ(CheckWith(b, "v: 1023").message(), "c.yaml:1: v: size 1023 out of range [1024, 4096] bytes");
  EXPECT_EQ(CheckWith(b, "v: 4097").message(), "c.yaml:1: v: size 4097 out of range [1024, 4096] bytes");
  EXPECT_EQ(CheckWith(b, "v: many").message(), "c.yaml:1: v: expected a size such as 256M or 1G, got 'many'");
  EXPECT_EQ(CheckWith(b, "v: {}").message(), "c.yaml:1: v: expected a size such as 256M, got a map");
  EXPECT_EQ(CheckWith(d, "v: ~").message(), "");  // null: an absent optional key
}

TEST(ConfigMutantsTest, Lists) {
  const Schema s = Field(Schema::List(Schema::String(), 2));
  EXPECT_TRUE(CheckWith(s, "v: [a, b]").ok());
  EXPECT_EQ(CheckWith(s, "v: [a]").message(), "c.yaml:1: v: expected at least 2 items, got 1");
  EXPECT_EQ(CheckWith(s, "v: a").message(), "c.yaml:1: v: expected a list, got 'a'");
  EXPECT_EQ(CheckWith(s, "v:\n  - a\n  - [b]\n").message(), "c.yaml:3: v[1]: expected a string, got a list");
  EXPECT_TRUE(CheckWith(Field(Schema::List(Schema::Int())), "v: []").ok());
}

TEST(ConfigMutantsTest, MapsAndMessages) {
  const Schema s = Schema::Map().Required("a", Schema::Int()).Optional("b", Schema::Map().Required("c", Schema::Any()));
  EXPECT_TRUE(CheckWith(s, "a: 1\nb:\n  c: [anything]\n").ok());
  EXPECT_EQ(CheckWith(s, "a: 1\nz: 2\n").message(), "c.yaml:2: z: unknown key (expected one of: a, b)");
  EXPECT_EQ(CheckWith(s, "a: ~\n").message(), "c.yaml:1: a: missing required key");
  EXPECT_EQ(CheckWith(s, "a: 1\nb:\n  d: 1\n").message(), "c.yaml:3: b.d: unknown key (expected one of: c)");
  EXPECT_EQ(CheckWith(s, "[1]").message(), "c.yaml:1: (top level): expected a map, got a list");
  EXPECT_EQ(CheckWith(s, "a: 1\nb: x\n").message(), "c.yaml:2: b: expected a map, got 'x'");
  EXPECT_EQ(CheckWith(Field(Schema::Int()), "v:\n  - 1\n").message(), "c.yaml:2: v: expected an integer, got a list");
  EXPECT_EQ(ParseYaml("", "e.yaml").status().message(), "e.yaml:1: (top level): the file is empty");
  EXPECT_EQ(ParseYaml("~", "e.yaml").status().message(), "e.yaml:1: (top level): the file is empty");
  Status syntax = ParseYaml("a: 1\nb: [\n", "s.yaml").status();
  EXPECT_EQ(syntax.message().rfind("s.yaml:", 0), 0u) << syntax.message();
  EXPECT_NE(syntax.message().find(": (syntax): "), std::string::npos) << syntax.message();
}

TEST(ConfigMutantsTest, Kind) {
  auto kind = [](const std::string& yaml) {
    auto file = ParseYaml(yaml, "k.yaml");
    EXPECT_TRUE(file.ok());
    return ConfigKind(*file);
  };
  EXPECT_EQ(kind("kind: rl_job\n").value(), "rl_job");
  EXPECT_EQ(kind("[1]").status().message(), "k.yaml:1: (top level): expected a map with a 'kind' key");
  EXPECT_EQ(kind("a: 1\n").status().message(), "k.yaml:1: kind: missing required key");
  EXPECT_EQ(kind("a: 1\nkind: ~\n").status().message(), "k.yaml:1: kind: missing required key");
  EXPECT_EQ(kind("a: 1\nkind: [x]\n").status().message(), "k.yaml:2: kind: expected a string");
}

TEST(ConfigMutantsTest, DurationUnits) {
  EXPECT_EQ(ParseDuration("250ms")->count(), 250);
  EXPECT_EQ(ParseDuration("2")->count(), 2000);
  EXPECT_EQ(ParseDuration("1.5s")->count(), 1500);
  EXPECT_EQ(ParseDuration("2m")->count(), 120000);
  EXPECT_EQ(ParseDuration("1h")->count(), 3600000);
  EXPECT_EQ(ParseDuration("0.0006s")->count(), 1);  // rounded, not truncated
  EXPECT_EQ(ParseDuration("0")->count(), 0);
  EXPECT_FALSE(ParseDuration("").ok());
  EXPECT_FALSE(ParseDuration("s").ok());
  EXPECT_FALSE(ParseDuration("-1s").ok());
  EXPECT_FALSE(ParseDuration("1..2s").ok());
  EXPECT_FALSE(ParseDuration("1 s").ok());
  EXPECT_FALSE(ParseDuration("1d").ok());
  EXPECT_EQ(ParseDuration("2500000000000h")->count(), 9'000'000'000'000'000'000);
  Status big = ParseDuration("2600000000000h").status();  // 9.36e18 ms
  EXPECT_NE(big.message().find("is too large"), std::string::npos) << big.ToString();
}

TEST(ConfigMutantsTest, ByteSizeUnits) {
  EXPECT_EQ(*ParseByteSize("17"), 17u);
  EXPECT_EQ(*ParseByteSize("17B"), 17u);
  EXPECT_EQ(*ParseByteSize("1K"), 1024u);
  EXPECT_EQ(*ParseByteSize("1k"), 1024u);
  EXPECT_EQ(*ParseByteSize("1Ki"), 1024u);
  EXPECT_EQ(*ParseByteSize("1KiB"), 1024u);
  EXPECT_EQ(*ParseByteSize("1kb"), 1024u);
  EXPECT_EQ(*ParseByteSize("3M"), 3u << 20);
  EXPECT_EQ(*ParseByteSize("2G"), uint64_t{2} << 30);
  EXPECT_EQ(*ParseByteSize("5T"), uint64_t{5} << 40);
  EXPECT_EQ(*ParseByteSize("0.5K"), 512u);
  EXPECT_EQ(*ParseByteSize("1.0009765625K"), 1025u);
  EXPECT_FALSE(ParseByteSize("").ok());
  EXPECT_FALSE(ParseByteSize("K").ok());
  EXPECT_FALSE(ParseByteSize("1P").ok());
  EXPECT_FALSE(ParseByteSize("1KK").ok());
  EXPECT_FALSE(ParseByteSize("1iB").ok());
  EXPECT_FALSE(ParseByteSize("-1").ok());
  Status unit = ParseByteSize("2X").status();
  EXPECT_EQ(unit.message(), "unknown size unit 'X' in '2X' (use K, M, G or T)");
  // Past INT64_MAX but within uint64: 15625 * 2^50 bytes.
  EXPECT_EQ(*ParseByteSize("16000000T"), uint64_t{15625} << 50);
  EXPECT_EQ(*ParseByteSize("8388608T"), uint64_t{1} << 63);
  EXPECT_FALSE(ParseByteSize("17000000T").ok());  // 1.87e19 bytes
}

TEST(ConfigMutantsTest, TypedReadsFallBack) {
  auto file = ParseYaml("i: 12\nbad_i: 12x\nf: 0.25\nbad_f: .inf\ns: text\nl: [a, b]\nm: {x: 1}\n"
                        "d: 3s\nbad_d: 3y\nz: 2K\nbad_z: 2Y\n",
                        "r.yaml");
  ASSERT_TRUE(file.ok());
  const YAML::Node& root = file->root;
  EXPECT_EQ(ReadInt(root, "i", 7), 12);
  EXPECT_EQ(ReadInt(root, "bad_i", 7), 7);
  EXPECT_EQ(ReadInt(root, "l", 7), 7);
  EXPECT_EQ(ReadInt(root, "missing", 7), 7);
  EXPECT_EQ(ReadFloat(root, "f", 1.0), 0.25);
  EXPECT_EQ(ReadFloat(root, "bad_f", 1.0), 1.0);
  EXPECT_EQ(ReadFloat(root, "m", 1.0), 1.0);
  EXPECT_EQ(ReadString(root, "s", "fb"), "text");
  EXPECT_EQ(ReadString(root, "l", "fb"), "fb");
  EXPECT_EQ(ReadString(root, "missing", "fb"), "fb");
  EXPECT_EQ(ReadDuration(root, "d", std::chrono::milliseconds(5)).count(), 3000);
  EXPECT_EQ(ReadDuration(root, "bad_d", std::chrono::milliseconds(5)).count(), 5);
  EXPECT_EQ(ReadDuration(root, "l", std::chrono::milliseconds(5)).count(), 5);
  EXPECT_EQ(ReadByteSize(root, "z", 9), 2048u);
  EXPECT_EQ(ReadByteSize(root, "bad_z", 9), 9u);
  EXPECT_EQ(ReadByteSize(root, "m", 9), 9u);
  EXPECT_EQ(ReadStringList(root, "l"), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(ReadStringList(root, "s").empty());
  EXPECT_TRUE(ReadStringList(root, "missing").empty());
}

TEST(ConfigMutantsTest, ErrorsAtANode) {
  auto file = ParseYaml("a: 1\nb:\n  c: 2\n", "n.yaml");
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->ErrorAt(file->root["b"]["c"], "b.c", "too big").message(), "n.yaml:3: b.c: too big");
  EXPECT_EQ(file->ErrorAt(file->root["zz"], "zz", "absent").message(), "n.yaml: zz: absent");
  EXPECT_EQ(file->ErrorAt(file->root, "", "whole").message(), "n.yaml:1: (top level): whole");
  EXPECT_EQ(LoadYamlFile("/no/such/file.yaml").status().code(), Code::kNotFound);
}

// A node built in code has no source position: errors fall back to line 1.
TEST(ConfigMutantsTest, NodesWithoutAPositionReportLineOne) {
  YAML::Node built;
  built["kind"] = "test";
  built["extra"] = 1;
  const Schema s = Schema::Map().Required("kind", Schema::String());
  EXPECT_EQ(s.Validate(built, "built.yaml").message(), "built.yaml:1: extra: unknown key (expected one of: kind)");
  YAML::Node missing;
  missing["other"] = 2;
  const Schema r = Schema::Map().Optional("other", Schema::Int()).Required("kind", Schema::String());
  EXPECT_EQ(r.Validate(missing, "built.yaml").message(), "built.yaml:1: kind: missing required key");
  EXPECT_EQ(ConfigKind(ConfigFile{"built.yaml", missing}).status().message(),
            "built.yaml:1: kind: missing required key");
  YAML::Node list;
  list.push_back(1);
  EXPECT_EQ(ConfigKind(ConfigFile{"built.yaml", list}).status().message(),
            "built.yaml:1: (top level): expected a map with a 'kind' key");
}

}  // namespace
}  // namespace flashroll
