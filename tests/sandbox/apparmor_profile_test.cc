// Generated AppArmor profiles compile (apparmor_parser --skip-kernel-load),
// say what the spec asks for, and a hostile --rw path names only itself.
#include "sandbox/apparmor_profile.h"

#include <gtest/gtest.h>
#include <stdio.h>
#include <unistd.h>

#include <fstream>
#include <regex>

#include "sandbox/apparmor.h"
#include "sandbox/mount.h"

namespace flashroll::sandbox {
namespace {

const std::vector<std::string> kRootEntries = {"bin", "dev", "etc", "proc", "root", "sys", "tmp", "usr"};

bool HaveParser() {
  return access("/usr/sbin/apparmor_parser", X_OK) == 0 || access("/sbin/apparmor_parser", X_OK) == 0;
}

#define REQUIRE_PARSER()                                                                             \
  if (!HaveParser()) FAIL() << "apparmor_parser not installed (Debian package apparmor): run "       \
                               "scripts/install-deps.sh"

std::string Generate(const SandboxSpec& spec, const std::string& name = "fr-1-2-3") {
  auto text = GenerateAppArmorProfile(name, spec, kRootEntries);
  EXPECT_TRUE(text.ok()) << text.status().ToString();
  return text.ok() ? *text : std::string();
}

// The parser's view of the profile: one "aare: <as written>   ->   <regex>"
// line per path it compiled (apparmor_parser -D rule-exprs).
std::vector<std::string> CompiledPaths(const std::string& text) {
  char path[] = "/tmp/apparmor-test-XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  const std::string command = std::string(access("/usr/sbin/apparmor_parser", X_OK) == 0 ? "/usr/sbin" : "/sbin") +
                              "/apparmor_parser --skip-kernel-load --skip-cache -D rule-exprs " + path + " 2>&1";
  std::vector<std::string> lines;
  if (FILE* out = popen(command.c_str(), "r")) {
    char line[4096];
    while (fgets(line, sizeof(line), out) != nullptr) {
      if (std::string(line).rfind("aare: ", 0) == 0) lines.emplace_back(line);
    }
    pclose(out);
  }
  unlink(path);
  return lines;
}

size_t Count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

TEST(AppArmorProfileTest, TheDefaultSpecsProfileCompiles) {
  REQUIRE_PARSER();
  const std::string text = Generate(SandboxSpec());
  const Status compiled = RunAppArmorParser(text, /*load=*/false);
  EXPECT_TRUE(compiled.ok()) << compiled.ToString() << "\n" << text;
}

// The profile the manager generates for a host-image sandbox, from its real
// mount plan: /usr is a read-only bind of the host's, and /bin, /lib, ...
// are symlinks into it; none may be written, whatever the mount says.
TEST(AppArmorProfileTest, TheHostsReadOnlyTreesGetNoWriteRule) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (the host image's plan)";
  auto mounts = PrepareMountsParentSide(SandboxSpec());
  ASSERT_TRUE(mounts.ok()) << mounts.status().ToString();
  auto text = GenerateAppArmorProfile("fr-1-2-3", SandboxSpec(), mounts->writable_root_entries);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  for (const char* tree : {"\"/usr", "\"/bin", "\"/lib", "\"/sbin"}) {
    EXPECT_EQ(text->find(tree), std::string::npos) << tree << " is writable:\n" << *text;
  }
  EXPECT_NE(text->find("  \"/tmp/**\" rwlk,\n"), std::string::npos) << *text;
  EXPECT_NE(text->find("  \"/etc/**\" rwlk,\n"), std::string::npos) << *text;
}

TEST(AppArmorProfileTest, SaysWhatTheSpecAsksFor) {
  const std::string text = Generate(SandboxSpec(), "fr-9-8-7");
  EXPECT_NE(text.find("profile flashroll-fr-9-8-7 flags=(attach_disconnected,mediate_deleted) {"), std::string::npos);
  for (const char* rule : {"  deny mount,\n", "  deny umount,\n", "  deny pivot_root,\n", "  deny /proc/sys/** wkl,\n",
                           "  deny /sys/** wkl,\n", "  deny network packet,\n",
                           "  ptrace (trace, read, tracedby, readby) peer=flashroll-fr-9-8-7,\n",
                           "  \"/tmp/**\" rwlk,\n", "  /dev/null rw,\n"}) {
    EXPECT_NE(text.find(rule), std::string::npos) << rule;
  }
  // No writes to /proc, /sys or /dev trees; no raw sockets; only the
  // sandbox's bounded capabilities (caps.h), in one rule.
  for (const char* absent : {"\"/proc", "\"/sys", "\"/dev", "network inet raw", "sys_admin", "net_admin",
                             "sys_ptrace", "sys_module", "net_raw", "mknod"}) {
    EXPECT_EQ(text.find(absent), std::string::npos) << absent;
  }
  const std::string capabilities =
      "  capability chown dac_override fowner fsetid kill setgid setuid setpcap net_bind_service sys_chroot "
      "audit_write,\n";
  EXPECT_NE(text.find(capabilities), std::string::npos);
  EXPECT_EQ(text.find("capability"), text.rfind("capability"));
}

TEST(AppArmorProfileTest, RawSocketsOnlyWithNetPolicy) {
  REQUIRE_PARSER();
  SandboxSpec spec;
  spec.net = NetMode::kPolicy;
  const std::string text = Generate(spec);
  EXPECT_NE(text.find("  network inet raw,\n"), std::string::npos);
  EXPECT_NE(text.find("  network inet6 raw,\n"), std::string::npos);
  EXPECT_TRUE(RunAppArmorParser(text, false).ok());
}

TEST(AppArmorProfileTest, RwPathsBecomeWritableTreesAndCompile) {
  REQUIRE_PARSER();
  SandboxSpec spec;
  spec.rw_paths = {"/work/data", "/srv/with space/", "/srv/quote\"d"};
  const std::string text = Generate(spec);
  EXPECT_NE(text.find("  \"/work/data/**\" rwlk,\n"), std::string::npos);
  EXPECT_NE(text.find("  \"/srv/with space/**\" rwlk,\n"), std::string::npos) << "trailing / dropped";
  EXPECT_NE(text.find("  \"/srv/quote\\\"d\" rwlk,\n"), std::string::npos);
  const Status compiled = RunAppArmorParser(text, false);
  EXPECT_TRUE(compiled.ok()) << compiled.ToString();
}

TEST(AppArmorProfileTest, QuotingEscapesEverySpecialCharacter) {
  auto quoted = QuoteAppArmorPath("/a b\"c\\d*e?f[g]h{i,j}k^l@m#n", "rw path");
  ASSERT_TRUE(quoted.ok());
  EXPECT_EQ(*quoted, "\"/a b\\\"c\\\\d\\*e\\?f\\[g\\]h\\{i\\,j\\}k\\^l\\@m\\#n\"");
}

TEST(AppArmorProfileTest, ControlCharactersAreRefusedNamingTheField) {
  for (const std::string& path : {std::string("/a\nb"), std::string("/a\rb"), std::string("/a\tb"),
                                 std::string("/a\x7f" "b"), std::string("/a\0b", 4)}) {
    SandboxSpec spec;
    spec.rw_paths = {path};
    auto text = GenerateAppArmorProfile("fr-1-2-3", spec, kRootEntries);
    ASSERT_FALSE(text.ok()) << ::testing::PrintToString(path);
    EXPECT_EQ(text.status().code(), Code::kInvalidArgument);
    EXPECT_NE(text.status().message().find("rw path"), std::string::npos) << text.status().ToString();
    EXPECT_NE(text.status().message().find("control character at byte 2"), std::string::npos)
        << text.status().ToString();
  }
}

// An attacker's --rw path that would close the quote, end the rule and add
// its own (write everywhere, mount, a second profile) compiles to exactly
// as many path rules as a harmless path, each matching the literal text.
TEST(AppArmorProfileTest, AHostilePathCannotInjectRules) {
  REQUIRE_PARSER();
  SandboxSpec benign;
  benign.rw_paths = {"/srv/plain"};
  const size_t expected = CompiledPaths(Generate(benign)).size();
  ASSERT_GT(expected, 10u);
  for (const std::string& hostile :
       {std::string("/srv/x\" rwlk,\n  /** rwlk,\n  mount,\n  \"/y"), std::string("/srv/x\", /** rwlk, \"/y"),
        std::string("/srv/x} profile evil { /** rwlk, } {"), std::string("/srv/{,**}"), std::string("/srv/@{HOME}"),
        std::string("/srv/x\\\" /** rwlk, #"), std::string("/srv/[a-z]*"), std::string("/srv/x,y")}) {
    SandboxSpec spec;
    spec.rw_paths = {hostile};
    auto text = GenerateAppArmorProfile("fr-1-2-3", spec, kRootEntries);
    if (!text.ok()) {  // refused (a newline): fine, nothing injected
      EXPECT_EQ(text.status().code(), Code::kInvalidArgument);
      continue;
    }
    EXPECT_EQ(Count(*text, "\n  mount"), 0u) << *text;
    EXPECT_EQ(Count(*text, "\nprofile "), 1u) << *text;
    const Status compiled = RunAppArmorParser(*text, false);
    EXPECT_TRUE(compiled.ok()) << ::testing::PrintToString(hostile) << ": " << compiled.ToString();
    const auto paths = CompiledPaths(*text);
    EXPECT_EQ(paths.size(), expected) << ::testing::PrintToString(hostile);
    // Of the path's three rules (P, P/, P/**), two compile to regexes
    // without any wildcard: every special character stayed literal.
    size_t literal = 0;
    for (const auto& line : paths) {
      if (line.find("/srv/") == std::string::npos) continue;
      literal += line.substr(line.find("->") + 2).find("[^") == std::string::npos;
    }
    EXPECT_EQ(literal, 2u) << ::testing::PrintToString(hostile) << "\n" << ::testing::PrintToString(paths);
  }
}

TEST(AppArmorProfileTest, WithoutAppArmorInTheKernelNothingIsLoadedOrReclaimed) {
  if (AppArmorEnabled()) GTEST_SKIP() << "this kernel has AppArmor";
  auto reclaimed = ReclaimAppArmorProfiles();
  ASSERT_TRUE(reclaimed.ok());
  EXPECT_TRUE(reclaimed->empty());
  AppArmorProfiles::Lease none;
  EXPECT_TRUE(none.Release().ok());
}

}  // namespace
}  // namespace flashroll::sandbox
