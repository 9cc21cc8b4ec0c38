// End-to-end tests of the flashroll binary: exit codes and one-line errors.
#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "tests/cli/run_flashroll.h"
#include "tests/test_files.h"

namespace {

using flashroll::testing::ReadFile;

using flashroll::testing::CommandResult;

using flashroll::testing::Flashroll;

std::string WriteTemp(const std::string& name, const std::string& text) {
  std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

TEST(CliTest, HelpListsCommands) {
  CommandResult r = Flashroll("--help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("config check"), std::string::npos);
  EXPECT_NE(r.output.find("version"), std::string::npos);
}

TEST(CliTest, VersionPrints) {
  CommandResult r = Flashroll("version");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.output, "flashroll " FLASHROLL_VERSION_FOR_TEST "\n");
}

TEST(CliTest, UnknownCommandExits2) {
  CommandResult r = Flashroll("frobnicate");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.output, "flashroll: unknown command 'frobnicate' (see flashroll --help)\n");
}

TEST(CliTest, QuickstartConfigIsValid) {
  CommandResult r = Flashroll("config check configs/quickstart.yaml");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(CliTest, SandboxdConfigIsValid) {
  CommandResult r = Flashroll("config check configs/sandboxd.yaml");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::string text = ReadFile("configs/sandboxd.yaml");
  const size_t at = text.find("images: [python]");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 16, "images: [/etc]");
  r = Flashroll("config check " + WriteTemp("sandboxd.yaml", text));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("images[0]: image name '/etc'"), std::string::npos) << r.output;
}

TEST(CliTest, BrokenConfigNamesLineAndKey) {
  std::string text = ReadFile("configs/quickstart.yaml");
  const size_t at = text.find("group_size: ");
  ASSERT_NE(at, std::string::npos);
  int line = 1;
  for (size_t i = 0; i < at; ++i) line += text[i] == '\n';
  text.replace(at, text.find('\n', at) - at, "group_size: four");
  CommandResult r = Flashroll("config check " + WriteTemp("broken.yaml", text));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("broken.yaml:" + std::to_string(line) +
                       ": scheduler.group_size: expected an integer, got 'four'"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
}

TEST(CliTest, MalformedYamlExits2) {
  CommandResult r = Flashroll("config check " + WriteTemp("malformed.yaml", "kind: rl_job\nname: [x\n"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("malformed.yaml:"), std::string::npos) << r.output;
}

TEST(CliTest, UnknownKindExits2) {
  CommandResult r = Flashroll("config check " + WriteTemp("kind.yaml", "kind: nope\n"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("kind.yaml:1: kind: unknown config kind 'nope'"), std::string::npos) << r.output;
}

TEST(CliTest, MissingFileExits2) {
  CommandResult r = Flashroll("config check /nonexistent.yaml");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("/nonexistent.yaml"), std::string::npos);
}

}  // namespace
