// Fixtures the rollout tests share: a sandbox manager per test, and the
// default model's tokenizer loaded once per suite (it takes a while).
#pragma once

#include <unistd.h>

#include <memory>

#include <gtest/gtest.h>

#include "engine/tokenizer/tokenizer.h"
#include "sandbox/sandbox.h"

namespace flashroll::rollout_testing {

// Opens a sandbox manager for each test, or skips it saying why (not root,
// no cgroups).
class SandboxManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "sandboxes need root";
    auto manager = sandbox::Manager::Open();
    if (!manager.ok()) GTEST_SKIP() << manager.status().ToString();
    manager_ = std::move(*manager);
  }
  std::unique_ptr<sandbox::Manager> manager_;
};

// Adds to `Base` the default model's tokenizer, loaded once per suite.
template <typename Base = ::testing::Test>
class WithDefaultTokenizer : public Base {
 protected:
  static void SetUpTestSuite() {
    auto tokenizer = engine::Tokenizer::FromHuggingFace("models/default/tokenizer.json",
                                                        "models/default/tokenizer_config.json");
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
    tokenizer_ = tokenizer->release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    tokenizer_ = nullptr;
  }
  static inline engine::Tokenizer* tokenizer_ = nullptr;
};

}  // namespace flashroll::rollout_testing
