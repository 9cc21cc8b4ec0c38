// What every CUDA backend test shares: the GPU it runs on, and the skip that
// says why where no usable GPU is present (CI, a build without CUDA).
#pragma once

#include <gtest/gtest.h>

#include "engine/device/device.h"

namespace flashroll::engine::cuda_testing {

inline const DeviceSpec kGpu{DeviceSpec::Kind::kCuda, 0};

}  // namespace flashroll::engine::cuda_testing

// A macro, not a function: GTEST_SKIP must return from the test body itself.
#define SKIP_WITHOUT_GPU()                                                                   \
  do {                                                                                       \
    if (::flashroll::Status st =                                                             \
            ::flashroll::engine::CheckDevice(::flashroll::engine::cuda_testing::kGpu, 0);    \
        !st.ok())                                                                            \
      GTEST_SKIP() << st.message();                                                          \
  } while (0)
