// The tokenizer that ships with a model: tokenizer.json (+ tokenizer_config.json)
// in a Hugging Face directory, or the tokenizer.ggml.* metadata of a GGUF file.
#pragma once

#include <memory>

#include "common/status.h"
#include "engine/models/model.h"
#include "engine/tokenizer/tokenizer.h"

namespace flashroll::engine {

// Errors name the tokenizer file and key, as the loaders report them.
Result<std::unique_ptr<Tokenizer>> LoadModelTokenizer(const Model& model);

}  // namespace flashroll::engine
