// ChoiceText: the text of one generated choice, as its tokens arrive.
//
// Tokens are decoded incrementally (special tokens such as <|im_end|> are
// left out; a character split across tokens waits for its last byte). The
// text is cut before the first stop string, which OpenAI's API leaves out of
// the reply; while the choice runs, a tail that could still turn out to be
// the start of a stop string is not yet stable, so a stream never sends text
// that a later stop string would take back.
//
// Thread safety: not thread-safe; one per choice. The Tokenizer must outlive it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/tokenizer/streaming_decoder.h"
#include "engine/tokenizer/tokenizer.h"

namespace flashroll::engine {

class ChoiceText {
 public:
  ChoiceText(const Tokenizer& tokenizer, std::vector<std::string> stops);

  void Push(int32_t token);
  // Ends the choice: flushes the decoder and cuts at the first stop string.
  void Finish();

  // The text so far (after Finish, the final text).
  const std::string& text() const { return text_; }
  // How many leading bytes of text() can no longer change: all of it after
  // Finish; before, up to the earliest place a stop string starts or could
  // still start.
  size_t stable_length() const;
  // True when Finish cut the text at a stop string.
  bool stopped_by_string() const { return cut_; }

 private:
  StreamingDecoder decoder_;
  std::vector<std::string> stops_;
  std::string text_;
  bool finished_ = false;
  bool cut_ = false;
};

}  // namespace flashroll::engine
