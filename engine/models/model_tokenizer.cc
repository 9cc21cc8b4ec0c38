#include "engine/models/model_tokenizer.h"

#include <filesystem>

namespace flashroll::engine {

Result<std::unique_ptr<Tokenizer>> LoadModelTokenizer(const Model& model) {
  if (const GgufFile* gguf = model.files().gguf()) return Tokenizer::FromGguf(*gguf);
  const std::string dir = model.files().path();
  const std::string config = dir + "/tokenizer_config.json";
  std::error_code ec;
  return Tokenizer::FromHuggingFace(dir + "/tokenizer.json", std::filesystem::exists(config, ec) ? config : "");
}

}  // namespace flashroll::engine
