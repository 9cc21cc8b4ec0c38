#include "sandbox/state.h"

#include <gtest/gtest.h>

namespace flashroll::sandbox {
namespace {

TEST(SandboxStateTest, RunningAllowsEverythingButThaw) {
  EXPECT_TRUE(CheckVerb(State::kRunning, Verb::kExec, "a").ok());
  EXPECT_TRUE(CheckVerb(State::kRunning, Verb::kFreeze, "a").ok());
  EXPECT_TRUE(CheckVerb(State::kRunning, Verb::kFiles, "a").ok());
  EXPECT_TRUE(CheckVerb(State::kRunning, Verb::kDestroy, "a").ok());
  EXPECT_EQ(CheckVerb(State::kRunning, Verb::kThaw, "a").code(), Code::kFailedPrecondition);
}

TEST(SandboxStateTest, FrozenAllowsThawFilesDestroy) {
  const Status exec = CheckVerb(State::kFrozen, Verb::kExec, "sb-1");
  EXPECT_EQ(exec.code(), Code::kFailedPrecondition);
  EXPECT_EQ(exec.message(), "sandbox sb-1 is frozen: exec not allowed");
  EXPECT_TRUE(CheckVerb(State::kFrozen, Verb::kThaw, "a").ok());
  EXPECT_TRUE(CheckVerb(State::kFrozen, Verb::kFiles, "a").ok());
  EXPECT_TRUE(CheckVerb(State::kFrozen, Verb::kDestroy, "a").ok());
}

TEST(SandboxStateTest, DestroyedIsNotFound) {
  EXPECT_EQ(CheckVerb(State::kDestroyed, Verb::kDestroy, "a").code(), Code::kNotFound);
  EXPECT_EQ(CheckVerb(State::kDestroyed, Verb::kExec, "a").code(), Code::kNotFound);
}

}  // namespace
}  // namespace flashroll::sandbox
