#include "common/json.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

namespace flashroll {
namespace {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "json_test.XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(JsonParse, ParsesValidDocument) {
  Result<Json> r = ParseJson(R"({"a": [1, 2, "x"], "b": {"c": true}})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)["a"][2], "x");
  EXPECT_EQ((*r)["b"]["c"], true);
}

TEST(JsonParse, ErrorNamesByteLineAndColumn) {
  // The stray 'x' is byte 11: line 2, column 3.
  Result<Json> r = ParseJson("{\"a\": 1,\n  x}", "request body");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  const std::string& m = r.status().message();
  EXPECT_EQ(m.rfind("request body: parse error at byte 11 (line 2, column 3): ", 0), 0u) << m;
  EXPECT_EQ(m.find("[json.exception"), std::string::npos) << m;
}

TEST(JsonParse, EmptyAndTruncatedInputAreErrors) {
  EXPECT_EQ(ParseJson("").status().code(), Code::kInvalidArgument);
  Result<Json> r = ParseJson("[1, 2");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("at byte 5 (line 1, column 6)"), std::string::npos)
      << r.status().message();
}

TEST(JsonParse, TrailingGarbageIsAnError) { EXPECT_FALSE(ParseJson("{} {}").ok()); }

TEST(JsonDump, InvalidUtf8IsReplacedNotThrown) {
  Json v = {{"out", std::string("ok\xff")}};
  std::string s = DumpJson(v);
  EXPECT_EQ(s, "{\"out\":\"ok\xEF\xBF\xBD\"}");
}

TEST(JsonView, TypedGettersNameTheFieldPath) {
  Json body = ParseJson(R"({"cmd": ["ls", "-l", 3], "n": "7", "env": {"A": 1}})").value();
  JsonView view(body, "body");

  Result<std::vector<std::string>> cmd = view.GetStringArray("cmd");
  ASSERT_FALSE(cmd.ok());
  EXPECT_EQ(cmd.status().message(), "body.cmd[2]: expected a string, got number");

  EXPECT_EQ(view.GetInt("n").status().message(), "body.n: expected an integer, got string");
  EXPECT_EQ(view.GetString("image").status().message(), "body.image: missing");

  Result<JsonView> env = view.GetObject("env");
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env->GetString("A").status().message(), "body.env.A: expected a string, got number");
  EXPECT_EQ(env->GetInt("A").value(), 1);

  Result<JsonView> second = view.Get("cmd").value().At(1);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->AsString().value(), "-l");
  EXPECT_EQ(view.Get("cmd").value().At(3).status().message(),
            "body.cmd[3]: out of range (the array has 3 elements)");
}

TEST(JsonView, NonObjectRootIsReported) {
  Json arr = Json::array();
  JsonView view(arr, "body");
  EXPECT_EQ(view.GetString("x").status().message(), "body: expected an object, got array");
  EXPECT_EQ(view.GetString("x", "d").status().message(), "body: expected an object, got array");
  EXPECT_FALSE(view.Has("x"));
}

TEST(JsonView, OptionalFieldsUseFallbackOnlyWhenAbsentOrNull) {
  Json body = ParseJson(R"({"t": null, "u": 5, "s": 1})").value();
  JsonView view(body, "req");
  EXPECT_EQ(view.GetInt("t", 30).value(), 30);
  EXPECT_EQ(view.GetInt("missing", 31).value(), 31);
  EXPECT_EQ(view.GetInt("u", 30).value(), 5);
  EXPECT_EQ(view.GetBool("b", true).value(), true);
  EXPECT_EQ(view.GetString("s", "x").status().message(), "req.s: expected a string, got number");
}

TEST(JsonView, IntegerConversions) {
  Json body = ParseJson(
                  R"({"f": 3.0, "h": 3.5, "neg": -4, "big": 18446744073709551615,
                      "huge": 1e30, "negf": -1.0})")
                  .value();
  JsonView v(body, "x");
  EXPECT_EQ(v.GetInt("f").value(), 3);
  EXPECT_EQ(v.GetInt("h").status().message(), "x.h: expected an integer, got number");
  EXPECT_EQ(v.GetInt("neg").value(), -4);
  EXPECT_EQ(v.GetUint("neg").status().message(), "x.neg: expected a non-negative integer, got -4");
  EXPECT_EQ(v.GetUint("negf").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(v.GetUint("big").value(), 18446744073709551615ull);
  EXPECT_NE(v.GetInt("big").status().message().find("out of range"), std::string::npos);
  EXPECT_NE(v.GetInt("huge").status().message().find("out of range"), std::string::npos);
  EXPECT_DOUBLE_EQ(v.GetDouble("h").value(), 3.5);
  EXPECT_DOUBLE_EQ(v.GetDouble("neg").value(), -4.0);
}

TEST(JsonView, ExpectOnlyKeysReportsTypos) {
  Json body = ParseJson(R"({"image": "x", "imgae": "y"})").value();
  JsonView v(body, "body");
  EXPECT_TRUE(v.ExpectOnlyKeys({"image", "imgae"}).ok());
  Status s = v.ExpectOnlyKeys({"image", "cmd"});
  EXPECT_EQ(s.message(), "body: unknown field \"imgae\"");
}

TEST(JsonFile, WriteThenReadRoundTrips) {
  TempDir dir;
  std::string path = dir.path() + "/state.json";
  Json v = {{"version", 3}, {"names", {"a", "b"}}};
  ASSERT_TRUE(WriteJsonFileAtomic(path, v, 0600).ok());
  Result<Json> back = ReadJsonFile(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, v);

  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  // Overwrite, and no temporary file is left behind.
  ASSERT_TRUE(WriteJsonFileAtomic(path, Json{{"version", 4}}).ok());
  EXPECT_EQ(ReadJsonFile(path).value()["version"], 4);
  int entries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    (void)entry;
    ++entries;
  }
  EXPECT_EQ(entries, 1);
}

TEST(JsonFile, InvalidUtf8IsRefusedAndOldFileKept) {
  TempDir dir;
  std::string path = dir.path() + "/s.json";
  ASSERT_TRUE(WriteJsonFileAtomic(path, Json{{"k", "old"}}).ok());
  Status s = WriteJsonFileAtomic(path, Json{{"k", std::string("\xff")}});
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(ReadJsonFile(path).value()["k"], "old");
}

TEST(JsonFile, ErrorsNameThePath) {
  TempDir dir;
  Result<Json> missing = ReadJsonFile(dir.path() + "/nope.json");
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_NE(missing.status().message().find("open " + dir.path() + "/nope.json"),
            std::string::npos);

  std::string bad = dir.path() + "/bad.json";
  std::ofstream(bad) << "{\n\"a\": }";
  Result<Json> r = ReadJsonFile(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().rfind(bad + ": parse error at byte 7 (line 2, column 6)", 0), 0u)
      << r.status().message();

  Status s = WriteJsonFileAtomic(dir.path() + "/no/such/dir/x.json", Json::object());
  EXPECT_EQ(s.code(), Code::kNotFound);
}

// Regression (found by fuzz/hf_config_fuzz.cc): a number too large for a
// double threw out_of_range, which escaped ParseJson and killed the process.
TEST(JsonRegressionTest, NumberOverflowIsAnError) {
  auto parsed = ParseJson("[1e400]", "config.json");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), Code::kInvalidArgument);
  EXPECT_NE(parsed.status().message().find("config.json"), std::string::npos);
}

// Regression: a non-negative signed integer (how nlohmann stores int64_t
// values built in memory) was refused as "expected a non-negative integer".
TEST(JsonRegressionTest, SignedNonNegativeIntegerIsAnUnsigned) {
  Json value = {{"ttl", int64_t{1500}}, {"neg", int64_t{-1}}};
  JsonView view(value, "body");
  auto ttl = view.GetUint("ttl");
  ASSERT_TRUE(ttl.ok()) << ttl.status().ToString();
  EXPECT_EQ(*ttl, 1500u);
  EXPECT_FALSE(view.GetUint("neg").ok());
}

}  // namespace
}  // namespace flashroll
