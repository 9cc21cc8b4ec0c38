// libFuzzer harness: GgufFile parsing of arbitrary bytes, then the tokenizer
// loader and encoder when the bytes parse. Any crash, sanitizer report or
// leak is a bug; errors are expected.
//
// Built by fuzz/CMakeLists.txt; run through scripts/run-fuzzers.sh.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/format/gguf.h"
#include "engine/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The parser reads files through a mapping: give it an in-memory file.
  int fd = memfd_create("gguf_fuzz", MFD_CLOEXEC);
  if (fd < 0) return 0;
  size_t off = 0;
  while (off < size) {
    ssize_t n = write(fd, data + off, size - off);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  std::string path = "/proc/self/fd/" + std::to_string(fd);
  auto gguf = flashroll::engine::GgufFile::Open(path);
  close(fd);
  if (!gguf.ok()) return 0;
  for (const auto& t : (*gguf)->tensors()) {
    if (t.size_bytes > 0) {
      volatile uint8_t last = t.data[t.size_bytes - 1];
      (void)last;
    }
  }
  auto tok = flashroll::engine::Tokenizer::FromGguf(**gguf);
  if (tok.ok()) {
    std::string text(reinterpret_cast<const char*>(data), size < 256 ? size : 256);
    auto ids = (*tok)->Encode(text, true);
    (void)(*tok)->Decode(ids);
  }
  return 0;
}
