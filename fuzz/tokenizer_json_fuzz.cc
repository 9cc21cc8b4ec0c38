// libFuzzer harness: the Hugging Face tokenizer.json loader on arbitrary
// text, then encoding and decoding with whatever loads. Any crash or
// sanitizer report is a bug; errors are expected.
//
// Build (not part of the CMake build):
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -I. \
//     fuzz/tokenizer_json_fuzz.cc engine/tokenizer/*.cc engine/format/mapped_file.cc \
//     engine/format/gguf.cc common/status.cc common/json.cc common/log.cc -o tokenizer_json_fuzz
//   ./tokenizer_json_fuzz -max_len=65536 tests/data/tokenizer-vectors/hf/gpt-2/
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
