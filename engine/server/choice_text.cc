#include "engine/server/choice_text.h"

#include <algorithm>

namespace flashroll::engine {

ChoiceText::ChoiceText(const Tokenizer& tokenizer, std::vector<std::string> stops)
    : decoder_(tokenizer, /*skip_special=*/true), stops_(std::move(stops)) {}

void ChoiceText::Push(int32_t token) {
  if (!finished_) text_ += decoder_.Push(token);
}

void ChoiceText::Finish() {
  if (finished_) return;
  text_ += decoder_.Finish();
  size_t first = std::string::npos;
  for (const std::string& stop : stops_) first = std::min(first, text_.find(stop));
  if (first != std::string::npos) {
    text_.resize(first);
    cut_ = true;
  }
  finished_ = true;
}

size_t ChoiceText::stable_length() const {
  if (finished_) return text_.size();
  size_t stable = text_.size();
  for (const std::string& stop : stops_) {
    const size_t at = text_.find(stop);
    if (at != std::string::npos) {
      stable = std::min(stable, at);
      continue;
    }
    // The longest tail of the text that is a proper prefix of the stop.
    for (size_t keep = std::min(text_.size(), stop.size() - 1); keep > 0; --keep) {
      if (text_.compare(text_.size() - keep, keep, stop, 0, keep) == 0) {
        stable = std::min(stable, text_.size() - keep);
        break;
      }
    }
  }
  return stable;
}

}  // namespace flashroll::engine
