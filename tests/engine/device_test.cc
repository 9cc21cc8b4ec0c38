// Device names (`--device`, `model.device`) and the checks that refuse a
// device before any weights load: the CPU always runs; `cuda` where no GPU is
// usable (CI) is refused naming CUDA, by CheckDevice and by Engine::Start.
#include <gtest/gtest.h>

#include "engine/device/device.h"
#include "engine/models/model.h"
#include "engine/serving/engine.h"

namespace flashroll::engine {
namespace {

TEST(DeviceTest, ParsesCpuAndCudaOrdinals) {
  EXPECT_EQ(*ParseDevice("cpu"), DeviceSpec{});
  EXPECT_EQ(*ParseDevice("cuda"), (DeviceSpec{DeviceSpec::Kind::kCuda, 0}));
  EXPECT_EQ(*ParseDevice("cuda:3"), (DeviceSpec{DeviceSpec::Kind::kCuda, 3}));
  EXPECT_EQ(DeviceName(*ParseDevice("cuda:3")), "cuda:3");
  EXPECT_EQ(DeviceName(*ParseDevice("cpu")), "cpu");
  for (const char* bad : {"", "gpu", "cuda:", "cuda:-1", "cuda:x", "cuda:1x", "CPU", "cuda0"}) {
    Result<DeviceSpec> d = ParseDevice(bad);
    ASSERT_FALSE(d.ok()) << bad;
    EXPECT_EQ(d.status().message(), "'" + std::string(bad) + "' is not a device (expected cpu, cuda or cuda:N)");
  }
}

TEST(DeviceTest, TheCpuAlwaysRuns) { EXPECT_TRUE(CheckDevice(DeviceSpec{}, int64_t{1} << 50).ok()); }

bool GpuUsable() { return CheckDevice(DeviceSpec{DeviceSpec::Kind::kCuda, 0}, 0).ok(); }

TEST(DeviceTest, CudaWithoutAUsableGpuIsRefusedNamingCuda) {
  if (GpuUsable()) GTEST_SKIP() << "a usable GPU is present";
  const Status st = CheckDevice(DeviceSpec{DeviceSpec::Kind::kCuda, 0}, 0);
  EXPECT_EQ(st.code(), Code::kFailedPrecondition);
  EXPECT_EQ(st.message().rfind("cuda:0: ", 0), 0u) << st.message();
  EXPECT_NE(st.message().find("CUDA"), std::string::npos) << st.message();
  if (!BuiltWithCuda()) {
    EXPECT_EQ(st.message(), "cuda:0: this flashroll was built without CUDA (nvcc was not found at configure time)");
  }
}

TEST(DeviceTest, EngineOnCudaWithoutAUsableGpuFailsAtStart) {
  if (GpuUsable()) GTEST_SKIP() << "a usable GPU is present";
  auto model = Model::Load("tests/data/parity/qwen3");
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EngineOptions options;
  options.kv_memory_bytes = 1 << 20;
  options.device = DeviceSpec{DeviceSpec::Kind::kCuda, 0};
  auto engine = Engine::Start(**model, nullptr, options);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("CUDA"), std::string::npos) << engine.status().ToString();
}

}  // namespace
}  // namespace flashroll::engine
