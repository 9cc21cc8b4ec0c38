// StreamingDecoder: turns generated token ids into text one token at a time.
//
// A token may end in the middle of a UTF-8 character (byte-level BPE and
// <0xNN> byte fallback both split characters), so the decoder holds back an
// incomplete trailing sequence until the bytes that complete it arrive. For
// SentencePiece vocabularies it also drops the single leading space the
// encoder adds, so that the concatenation of everything Push() and Finish()
// return equals Tokenizer::Decode() of the same ids.
//
// Thread safety: not thread-safe; use one decoder per sequence. The
// Tokenizer must outlive the decoder.
#pragma once

#include <cstdint>
#include <string>

#include "engine/tokenizer/tokenizer.h"

namespace flashroll::engine {

class StreamingDecoder {
 public:
  // `at_sequence_start`: the first pushed token starts the text, so a
  // SentencePiece leading space is dropped. Pass false when continuing text
  // whose beginning was already emitted.
  StreamingDecoder(const Tokenizer& tokenizer, bool skip_special, bool at_sequence_start = true);

  // Appends `id` and returns the text that became complete: possibly empty,
  // always valid UTF-8 (bytes that can never form a character become U+FFFD).
  std::string Push(int32_t id);

  // Returns whatever is still held back (an unfinished character becomes
  // U+FFFD) and resets the pending state.
  std::string Finish();

 private:
  const Tokenizer& tokenizer_;
  const bool skip_special_;
  bool strip_space_;      // the next emitted byte is the dropped leading space
  std::string pending_;   // bytes not yet returned
};

}  // namespace flashroll::engine
