// Tokenizer::FromGguf: builds a tokenizer from the tokenizer.ggml.* keys
// that llama.cpp's converters write into every GGUF file.
#include "engine/format/gguf.h"
#include "engine/tokenizer/tokenizer.h"

namespace flashroll::engine {

namespace {

// Reads an optional integer id key; absent keys leave *id unchanged.
Status ReadOptionalId(const GgufFile& gguf, std::string_view key, int32_t* id) {
  if (!gguf.Has(key)) return Status::Ok();
  FR_ASSIGN_OR_RETURN(int64_t v, gguf.GetInt(key));
  if (v < -1 || v > INT32_MAX) {
    return Status::InvalidArgument(gguf.path() + ": metadata key '" + std::string(key) + "': id " +
                                   std::to_string(v) + " out of range");
  }
  *id = static_cast<int32_t>(v);
  return Status::Ok();
}

Status ReadOptionalBool(const GgufFile& gguf, std::string_view key, bool* value) {
  if (!gguf.Has(key)) return Status::Ok();
  FR_ASSIGN_OR_RETURN(*value, gguf.GetBool(key));
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const GgufFile& gguf) {
  TokenizerSpec spec;
  spec.source = gguf.path();
  FR_ASSIGN_OR_RETURN(std::string_view model, gguf.GetString("tokenizer.ggml.model"));
  if (model == "gpt2") {
    spec.model = TokenizerModel::kByteLevelBpe;
    if (!gguf.Has("tokenizer.ggml.pre")) {
      return Status::Unimplemented(gguf.path() +
                                   ": metadata key 'tokenizer.ggml.pre' is missing; cannot tell "
                                   "which pre-tokenizer this BPE vocabulary needs");
    }
    FR_ASSIGN_OR_RETURN(std::string_view pre, gguf.GetString("tokenizer.ggml.pre"));
    auto kind = PreTokenizerFromGgufName(pre);
    if (!kind.ok()) return kind.status().Wrap(gguf.path() + ": metadata key 'tokenizer.ggml.pre'");
    spec.pre = *kind;
    spec.ignore_merges = spec.pre == PreTokenizerKind::kLlama3;
  } else if (model == "llama") {
    spec.model = TokenizerModel::kSentencePieceBpe;
    spec.pre = PreTokenizerKind::kNone;
    spec.bos_id = 1;  // llama.cpp's defaults for SentencePiece vocabularies
    spec.eos_id = 2;
    spec.unk_id = 0;
    spec.add_bos = true;
  } else {
    return Status::Unimplemented(gguf.path() + ": metadata key 'tokenizer.ggml.model': model '" +
                                 std::string(model) + "' is not supported (want gpt2 or llama)");
  }

  FR_ASSIGN_OR_RETURN(auto tokens, gguf.GetStringArray("tokenizer.ggml.tokens"));
  spec.tokens.reserve(tokens.size());
  for (std::string_view t : tokens) spec.tokens.emplace_back(t);

  if (gguf.Has("tokenizer.ggml.token_type")) {
    FR_ASSIGN_OR_RETURN(auto types, gguf.GetIntArray("tokenizer.ggml.token_type"));
    spec.types.reserve(types.size());
    for (size_t i = 0; i < types.size(); ++i) {
      if (types[i] < 0 || types[i] > 6) {
        return Status::InvalidArgument(gguf.path() + ": metadata key 'tokenizer.ggml.token_type'[" +
                                       std::to_string(i) + "]: unknown token type " +
                                       std::to_string(types[i]));
      }
      spec.types.push_back(static_cast<TokenType>(types[i]));
    }
  }
  if (gguf.Has("tokenizer.ggml.scores")) {
    FR_ASSIGN_OR_RETURN(spec.scores, gguf.GetFloatArray("tokenizer.ggml.scores"));
  }
  if (spec.model == TokenizerModel::kByteLevelBpe) {
    FR_ASSIGN_OR_RETURN(auto merges, gguf.GetStringArray("tokenizer.ggml.merges"));
    spec.merges.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
      // "left right"; search from 1 so that a left part starting with a
      // space still splits at the separator.
      size_t sep = merges[i].find(' ', 1);
      if (sep == std::string_view::npos) {
        return Status::InvalidArgument(gguf.path() + ": metadata key 'tokenizer.ggml.merges'[" +
                                       std::to_string(i) + "]: '" + std::string(merges[i]) +
                                       "' is not 'left right'");
      }
      spec.merges.emplace_back(std::string(merges[i].substr(0, sep)),
                               std::string(merges[i].substr(sep + 1)));
    }
  }

  FR_RETURN_IF_ERROR(ReadOptionalId(gguf, "tokenizer.ggml.bos_token_id", &spec.bos_id));
  FR_RETURN_IF_ERROR(ReadOptionalId(gguf, "tokenizer.ggml.eos_token_id", &spec.eos_id));
  FR_RETURN_IF_ERROR(ReadOptionalId(gguf, "tokenizer.ggml.unknown_token_id", &spec.unk_id));
  FR_RETURN_IF_ERROR(ReadOptionalId(gguf, "tokenizer.ggml.padding_token_id", &spec.pad_id));
  FR_RETURN_IF_ERROR(ReadOptionalBool(gguf, "tokenizer.ggml.add_bos_token", &spec.add_bos));
  FR_RETURN_IF_ERROR(ReadOptionalBool(gguf, "tokenizer.ggml.add_eos_token", &spec.add_eos));
  FR_RETURN_IF_ERROR(ReadOptionalBool(gguf, "tokenizer.ggml.add_space_prefix", &spec.add_space_prefix));
  for (std::string_view key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    int32_t id = -1;
    FR_RETURN_IF_ERROR(ReadOptionalId(gguf, key, &id));
    if (id >= 0) spec.extra_eos_ids.push_back(id);
  }
  if (gguf.Has("tokenizer.chat_template")) {
    FR_ASSIGN_OR_RETURN(std::string_view tmpl, gguf.GetString("tokenizer.chat_template"));
    spec.chat_template = std::string(tmpl);
  }
  return Create(std::move(spec));
}

}  // namespace flashroll::engine
