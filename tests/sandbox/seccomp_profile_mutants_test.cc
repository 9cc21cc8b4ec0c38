// Edges of the Docker-style seccomp profile parser (sandbox/seccomp_profile.h):
// every action and operator name, the errno and argument-index bounds, which
// fields may be absent or null, and the default-deny rules for defaultAction.
#include <gtest/gtest.h>
#include <seccomp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>

#include "sandbox/seccomp_profile.h"

namespace flashroll::sandbox {
namespace {

Result<SeccompProfile> Parse(const std::string& text) {
  auto json = ParseJson(text, "profile");
  if (!json.ok()) return json.status();
  return ParseSeccompProfile(*json);
}

std::string Rule(const std::string& fields) { return R"({"syscalls": [{"names": ["mkdir"], )" + fields + "}]}"; }

TEST(SeccompProfileMutantsTest, Actions) {
  const std::pair<const char*, uint32_t> actions[] = {
      {"SCMP_ACT_ALLOW", SCMP_ACT_ALLOW},          {"SCMP_ACT_ERRNO", SCMP_ACT_ERRNO(EPERM)},
      {"SCMP_ACT_KILL", SCMP_ACT_KILL_THREAD},     {"SCMP_ACT_KILL_THREAD", SCMP_ACT_KILL_THREAD},
      {"SCMP_ACT_KILL_PROCESS", SCMP_ACT_KILL_PROCESS}, {"SCMP_ACT_TRAP", SCMP_ACT_TRAP},
      {"SCMP_ACT_LOG", SCMP_ACT_LOG}};
  for (const auto& [name, action] : actions) {
    auto p = Parse(std::string(R"({"defaultAction": ")") + name + R"(", "allowUnlisted": true})");
    ASSERT_TRUE(p.ok()) << name << ": " << p.status().ToString();
    EXPECT_EQ(p->default_action, action) << name;
    EXPECT_TRUE(p->rules.empty());
    auto r = Parse(Rule(std::string(R"("action": ")") + name + "\""));
    ASSERT_TRUE(r.ok()) << name << ": " << r.status().ToString();
    ASSERT_EQ(r->rules.size(), 1u);
    EXPECT_EQ(r->rules[0].action, action) << name;
  }
  auto bad = Parse(R"({"defaultAction": "SCMP_ACT_NOTIFY"})");
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("unknown action 'SCMP_ACT_NOTIFY'"), std::string::npos)
      << bad.status().ToString();
  EXPECT_FALSE(Parse(R"({"defaultAction": 1})").ok());
  EXPECT_FALSE(Parse(R"({"defaultAction": null})").ok());
}

TEST(SeccompProfileMutantsTest, DefaultDeny) {
  auto none = Parse(R"({})");
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(none->default_action, SCMP_ACT_ERRNO(ENOSYS));
  auto errno_only = Parse(R"({"defaultErrnoRet": 13})");
  ASSERT_TRUE(errno_only.ok()) << errno_only.status().ToString();
  EXPECT_EQ(errno_only->default_action, SCMP_ACT_ERRNO(13));
  auto explicit_errno = Parse(R"({"defaultAction": "SCMP_ACT_ERRNO"})");
  ASSERT_TRUE(explicit_errno.ok()) << explicit_errno.status().ToString();
  EXPECT_EQ(explicit_errno->default_action, SCMP_ACT_ERRNO(EPERM));
  for (const char* action : {"SCMP_ACT_ALLOW", "SCMP_ACT_LOG"}) {
    EXPECT_EQ(Parse(std::string(R"({"defaultAction": ")") + action + "\"}").status().message(),
              std::string("defaultAction: ") + action +
                  " lets through every system call not listed, new ones too; set \"allowUnlisted\": true to mean it");
    EXPECT_FALSE(Parse(std::string(R"({"defaultAction": ")") + action + R"(", "allowUnlisted": false})").ok());
    EXPECT_FALSE(Parse(std::string(R"({"defaultAction": ")") + action + R"(", "allowUnlisted": 1})").ok());
  }
  // The opt-in changes nothing for a default that denies.
  for (const char* action : {"SCMP_ACT_ERRNO", "SCMP_ACT_KILL", "SCMP_ACT_KILL_PROCESS", "SCMP_ACT_TRAP"}) {
    EXPECT_TRUE(Parse(std::string(R"({"defaultAction": ")") + action + "\"}").ok()) << action;
  }
  EXPECT_FALSE(Parse(R"({"defaultAction": "SCMP_ACT_ALLOW", "allowUnlisted": null})").ok());
  EXPECT_FALSE(Parse(R"({"allowUnlisted": "yes"})").ok());
}

TEST(SeccompProfileMutantsTest, ErrnoBounds) {
  auto errno_of = [](const std::string& text) { return Parse(text); };
  auto low = errno_of(R"({"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 0})");
  ASSERT_TRUE(low.ok()) << low.status().ToString();
  EXPECT_EQ(low->default_action, SCMP_ACT_ERRNO(0));
  auto high = errno_of(R"({"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 4095})");
  ASSERT_TRUE(high.ok()) << high.status().ToString();
  EXPECT_EQ(high->default_action, SCMP_ACT_ERRNO(4095));
  auto over = errno_of(R"({"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 4096})");
  EXPECT_EQ(over.status().message(), "defaultErrnoRet: must be in 0..4095");
  EXPECT_FALSE(errno_of(R"({"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": -1})").ok());
  // errnoRet only changes an ERRNO action.
  auto allow = errno_of(R"({"defaultAction": "SCMP_ACT_ALLOW", "allowUnlisted": true, "defaultErrnoRet": 5})");
  ASSERT_TRUE(allow.ok());
  EXPECT_EQ(allow->default_action, SCMP_ACT_ALLOW);
  auto rule = Parse(Rule(R"("action": "SCMP_ACT_ERRNO", "errnoRet": 38)"));
  ASSERT_TRUE(rule.ok()) << rule.status().ToString();
  EXPECT_EQ(rule->rules[0].action, SCMP_ACT_ERRNO(38));
  EXPECT_EQ(Parse(Rule(R"("action": "SCMP_ACT_ERRNO", "errnoRet": 4096)")).status().message(),
            "syscalls[0].errnoRet: must be in 0..4095");
  auto rule_max = Parse(Rule(R"("action": "SCMP_ACT_ERRNO", "errnoRet": 4095)"));
  ASSERT_TRUE(rule_max.ok()) << rule_max.status().ToString();
  EXPECT_EQ(rule_max->rules[0].action, SCMP_ACT_ERRNO(4095));
}

TEST(SeccompProfileMutantsTest, Operators) {
  const std::pair<const char*, int> ops[] = {
      {"SCMP_CMP_NE", SCMP_CMP_NE}, {"SCMP_CMP_LT", SCMP_CMP_LT}, {"SCMP_CMP_LE", SCMP_CMP_LE},
      {"SCMP_CMP_EQ", SCMP_CMP_EQ}, {"SCMP_CMP_GE", SCMP_CMP_GE}, {"SCMP_CMP_GT", SCMP_CMP_GT},
      {"SCMP_CMP_MASKED_EQ", SCMP_CMP_MASKED_EQ}};
  for (const auto& [name, op] : ops) {
    auto p = Parse(Rule(std::string(R"("action": "SCMP_ACT_ERRNO", "args": [{"index": 1, "value": 7, "op": ")") +
                        name + "\"}]"));
    ASSERT_TRUE(p.ok()) << name << ": " << p.status().ToString();
    ASSERT_EQ(p->rules[0].args.size(), 1u);
    EXPECT_EQ(p->rules[0].args[0].op, op) << name;
  }
  auto bad = Parse(Rule(R"("action": "SCMP_ACT_ERRNO", "args": [{"index": 1, "value": 7, "op": "SCMP_CMP_XX"}])"));
  EXPECT_EQ(bad.status().message(), "syscalls[0].args[0].op: unknown operator 'SCMP_CMP_XX'");
}

TEST(SeccompProfileMutantsTest, Arguments) {
  auto p = Parse(Rule(R"("action": "SCMP_ACT_ERRNO", "args": [
      {"index": 0, "value": 1, "op": "SCMP_CMP_EQ"},
      {"index": 5, "value": 18446744073709551615, "valueTwo": 3, "op": "SCMP_CMP_MASKED_EQ"}])"));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const auto& args = p->rules[0].args;
  ASSERT_EQ(args.size(), 2u);
  EXPECT_EQ(args[0].index, 0u);
  EXPECT_EQ(args[0].value, 1u);
  EXPECT_EQ(args[0].value_two, 0u);
  EXPECT_EQ(args[1].index, 5u);
  EXPECT_EQ(args[1].value, UINT64_MAX);
  EXPECT_EQ(args[1].value_two, 3u);
  EXPECT_EQ(Parse(Rule(R"("action": "SCMP_ACT_ERRNO", "args": [{"index": 6, "value": 1, "op": "SCMP_CMP_EQ"}])"))
                .status()
                .message(),
            "syscalls[0].args[0].index: must be in 0..5");
  EXPECT_FALSE(Parse(Rule(R"("action": "SCMP_ACT_ERRNO", "args": [{"index": 1, "op": "SCMP_CMP_EQ"}])")).ok());
  EXPECT_FALSE(Parse(Rule(R"("action": "SCMP_ACT_ERRNO", "args": [{"index": 1, "value": 1}])")).ok());
  EXPECT_FALSE(Parse(Rule(R"("action": "SCMP_ACT_ERRNO", "args": [{"value": 1, "op": "SCMP_CMP_EQ"}])")).ok());
  EXPECT_FALSE(
      Parse(Rule(R"("action": "SCMP_ACT_ERRNO", "args": [{"index": 1, "value": 1, "op": "SCMP_CMP_EQ", "x": 1}])"))
          .ok());
  auto null_args = Parse(Rule(R"("action": "SCMP_ACT_ERRNO", "args": null)"));
  ASSERT_TRUE(null_args.ok()) << null_args.status().ToString();
  EXPECT_TRUE(null_args->rules[0].args.empty());
  EXPECT_FALSE(Parse(Rule(R"("action": "SCMP_ACT_ERRNO", "args": {})")).ok());
}

TEST(SeccompProfileMutantsTest, RulesAndNames) {
  auto p = Parse(R"({"syscalls": [
      {"names": ["mkdir", "rmdir"], "action": "SCMP_ACT_ERRNO", "comment": "no dirs"},
      {"names": ["unlink"], "action": "SCMP_ACT_LOG"}]})");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->rules.size(), 2u);
  EXPECT_EQ(p->rules[0].syscalls, (std::vector<int>{__NR_mkdir, __NR_rmdir}));
  EXPECT_EQ(p->rules[1].syscalls, (std::vector<int>{__NR_unlink}));
  EXPECT_EQ(p->rules[1].action, SCMP_ACT_LOG);
  EXPECT_EQ(Parse(R"({"syscalls": [{"names": [], "action": "SCMP_ACT_LOG"}]})").status().message(),
            "syscalls[0].names: must name at least one system call");
  EXPECT_EQ(Parse(R"({"syscalls": [{"names": ["mkdir", "nosuchcall"], "action": "SCMP_ACT_LOG"}]})").status().message(),
            "syscalls[0].names[1]: unknown system call 'nosuchcall'");
  EXPECT_FALSE(Parse(R"({"syscalls": [{"names": ["mkdir"]}]})").ok());
  EXPECT_FALSE(Parse(R"({"syscalls": [{"action": "SCMP_ACT_LOG"}]})").ok());
  EXPECT_FALSE(Parse(R"({"syscalls": [{"names": ["mkdir"], "action": "SCMP_ACT_LOG", "other": 1}]})").ok());
  auto null_rules = Parse(R"({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": null})");
  ASSERT_TRUE(null_rules.ok()) << null_rules.status().ToString();
  EXPECT_TRUE(null_rules->rules.empty());
  EXPECT_FALSE(Parse(R"({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": {}})").ok());
  EXPECT_EQ(Parse(R"({"defaultAction": "SCMP_ACT_ERRNO", "architectures": []})").status().message(),
            "unknown field \"architectures\"");
  EXPECT_EQ(Parse("[]").status().message(), "expected a JSON object at the top level");
}

TEST(SeccompProfileMutantsTest, ReadNamesTheFile) {
  const std::string path = ::testing::TempDir() + "seccomp_mutants_" + std::to_string(::getpid()) + ".json";
  std::ofstream(path) << R"({"defaultAction": "SCMP_ACT_BOGUS"})";
  auto bad = ReadSeccompProfile(path);
  std::ofstream(path) << R"({"defaultAction": "SCMP_ACT_LOG", "allowUnlisted": true})";
  auto good = ReadSeccompProfile(path);
  ::unlink(path.c_str());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message().rfind(path + ": ", 0), 0u) << bad.status().ToString();
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ(good->default_action, SCMP_ACT_LOG);
  EXPECT_FALSE(ReadSeccompProfile("/no/such/profile.json").ok());
}

}  // namespace
}  // namespace flashroll::sandbox
