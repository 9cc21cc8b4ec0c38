#include "engine/tokenizer/streaming_decoder.h"

#include "engine/tokenizer/unicode.h"

namespace flashroll::engine {

StreamingDecoder::StreamingDecoder(const Tokenizer& tokenizer, bool skip_special,
                                   bool at_sequence_start)
    : tokenizer_(tokenizer),
      skip_special_(skip_special),
      strip_space_(at_sequence_start && tokenizer.add_space_prefix()) {}

std::string StreamingDecoder::Push(int32_t id) {
  if (skip_special_ && tokenizer_.IsControl(id)) return {};
  pending_ += tokenizer_.TokenBytes(id);
  if (strip_space_ && !pending_.empty()) {
    // Decode() strips one space from the start of the whole text only.
    if (pending_[0] == ' ') pending_.erase(0, 1);
    strip_space_ = false;
  }
  size_t keep = IncompleteUtf8Suffix(pending_);
  std::string out = SanitizeUtf8(std::string_view(pending_).substr(0, pending_.size() - keep));
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string StreamingDecoder::Finish() {
  std::string out = SanitizeUtf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace flashroll::engine
