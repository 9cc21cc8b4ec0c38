// libFuzzer harness: the Hugging Face tokenizer.json loader on arbitrary
// text, then encoding and decoding with whatever loads. Any crash or
// sanitizer report is a bug; errors are expected.
//
// Built by fuzz/CMakeLists.txt; run through scripts/run-fuzzers.sh.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "engine/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto tok = flashroll::engine::Tokenizer::FromHuggingFaceText(text, "", "fuzz");
  if (!tok.ok()) return 0;
  auto ids = (*tok)->Encode(text.substr(0, 512), true);
  (void)(*tok)->Decode(ids);
  ids = (*tok)->Encode("Hello world's 123 \xF0\x9F\xA6\x99 <|im_end|>\n", false);
  (void)(*tok)->Decode(ids, true);
  return 0;
}
