// What every CUDA backend test shares: the GPU it runs on, the skip that
// says why where no usable GPU is present (CI, a build without CUDA), and
// the parity fixtures' readers.
#pragma once

#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/json.h"
#include "engine/device/device.h"
#include "engine/models/model.h"
#include "engine/serving/engine.h"
#include "tests/test_files.h"

namespace flashroll::engine::cuda_testing {

inline const DeviceSpec kGpu{DeviceSpec::Kind::kCuda, 0};

using flashroll::testing::Ints;
using flashroll::testing::ReadFloats;

// An engine on the GPU with a small KV pool.
inline EngineOptions GpuOptions() {
  EngineOptions o;
  o.device = kGpu;
  o.kv_memory_bytes = 64 << 20;
  return o;
}

inline std::unique_ptr<Model> LoadOrDie(const std::string& path) {
  auto m = Model::Load(path);
  if (!m.ok()) {
    ADD_FAILURE() << m.status().ToString();
    return nullptr;
  }
  return std::move(*m);
}

}  // namespace flashroll::engine::cuda_testing

// A macro, not a function: GTEST_SKIP must return from the test body itself.
#define SKIP_WITHOUT_GPU()                                                                   \
  do {                                                                                       \
    if (::flashroll::Status st =                                                             \
            ::flashroll::engine::CheckDevice(::flashroll::engine::cuda_testing::kGpu, 0);    \
        !st.ok())                                                                            \
      GTEST_SKIP() << st.message();                                                          \
  } while (0)
