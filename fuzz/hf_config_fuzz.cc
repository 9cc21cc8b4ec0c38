// libFuzzer harness: config.json text through ParseJson, ParseHfConfig,
// ApplyGenerationConfig (the same document read as generation_config.json)
// and ValidateModelConfig. Any crash or sanitizer report (including signed
// overflow from UBSan) is a bug; errors are expected.
//
// Built by fuzz/CMakeLists.txt; run through scripts/run-fuzzers.sh.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/json.h"
#include "engine/format/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto json = flashroll::ParseJson(text, "fuzz");
  if (!json.ok()) return 0;
  auto config = flashroll::engine::ParseHfConfig(*json, "fuzz/config.json");
  if (!config.ok()) return 0;
  (void)flashroll::engine::ApplyGenerationConfig(*json, "fuzz/generation_config.json", &*config);
  if (flashroll::engine::ValidateModelConfig(*config, "fuzz").ok()) {
    for (int64_t layer = 0; layer < config->num_layers && layer < 64; ++layer) {
      (void)config->IsMoeLayer(layer);
    }
  }
  return 0;
}
