// libFuzzer harness: ParseSafetensors on arbitrary bytes. On success every
// tensor's first and last data byte is read, so a tensor that points outside
// the input shows up as an AddressSanitizer report. Any crash or sanitizer
// report is a bug; errors are expected.
//
// Built by fuzz/CMakeLists.txt; run through scripts/run-fuzzers.sh.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "engine/format/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // An exact-size heap copy, so ASan catches reads one byte past the end.
  std::unique_ptr<uint8_t[]> copy(new uint8_t[size == 0 ? 1 : size]);
  if (size > 0) std::memcpy(copy.get(), data, size);
  auto tensors = flashroll::engine::ParseSafetensors(copy.get(), size, "fuzz");
  if (!tensors.ok()) return 0;
  for (const auto& t : *tensors) {
    if (t.size_bytes == 0) continue;
    volatile uint8_t first = t.data[0];
    volatile uint8_t last = t.data[t.size_bytes - 1];
    (void)first;
    (void)last;
  }
  return 0;
}
