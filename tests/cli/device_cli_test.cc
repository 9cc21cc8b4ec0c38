// `--device` on the engine commands: listed in every --help, in every build;
// `--device cuda` where no GPU is usable (CI: no GPU, or a build without
// CUDA) exits non-zero within seconds, before any weights load, with one
// line naming CUDA and what is missing.
#include <chrono>
#include <string>

#include <gtest/gtest.h>

#include "tests/cli/run_flashroll.h"

namespace {

using flashroll::testing::RunFlashroll;

TEST(DeviceCliTest, EveryEngineCommandListsTheDeviceFlag) {
  for (const char* command : {"serve", "generate", "logits", "bench decode"}) {
    const auto r = RunFlashroll(std::string(command) + " --help");
    EXPECT_EQ(r.exit_code, 0) << command;
    EXPECT_NE(r.output.find("--device"), std::string::npos) << command << ":\n" << r.output;
    EXPECT_NE(r.output.find("cuda"), std::string::npos) << command;
  }
}

TEST(DeviceCliTest, BadDeviceNamesTheFlag) {
  const auto r = RunFlashroll("logits --model tests/data/parity/qwen3 --tokens 1 --device tpu");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--device: 'tpu' is not a device (expected cpu, cuda or cuda:N)"), std::string::npos)
      << r.output;
}

// Run where no GPU is usable. The model path does not exist: the device is
// refused first, so no weights are read.
TEST(DeviceCliTest, CudaWithoutAGpuFailsFastBeforeLoadingWeights) {
  const auto probe = RunFlashroll("logits --model tests/data/parity/qwen3 --tokens 1 --device cuda");
  if (probe.exit_code == 0) GTEST_SKIP() << "a usable GPU is present";
  const char* const commands[] = {
      "logits --model /nonexistent/model --tokens 1 --device cuda",
      "generate --model /nonexistent/model --tokens 1 --device cuda:0",
      "bench decode --model /nonexistent/model --device cuda",
      "serve --model /nonexistent/model --port 0 --device cuda",
  };
  for (const char* args : commands) {
    const auto start = std::chrono::steady_clock::now();
    const auto r = RunFlashroll(args);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_LT(seconds, 10.0) << args;
    EXPECT_NE(r.output.find("--device: cuda:0: "), std::string::npos) << args << ":\n" << r.output;
    EXPECT_NE(r.output.find("CUDA"), std::string::npos) << args << ":\n" << r.output;
    EXPECT_EQ(r.output.find("nonexistent"), std::string::npos) << "the model was looked at first: " << r.output;
    EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << "one line: " << r.output;
  }
}

}  // namespace
