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

namespace flashroll::engine::cuda_testing {

inline const DeviceSpec kGpu{DeviceSpec::Kind::kCuda, 0};

// A fixture's logits.bin: little-endian float32.
inline std::vector<float> ReadFloats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

inline std::vector<int32_t> Ints(const Json& array) {
  std::vector<int32_t> out;
  for (const Json& v : array) out.push_back(v.get<int32_t>());
  return out;
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
