// Tokenizer::FromHuggingFace: builds a tokenizer from a Hugging Face
// tokenizer.json (model, pre-tokenizer, normalizer, added tokens) and its
// tokenizer_config.json (bos/eos, add_bos_token, chat_template).
//
// Supported: model "BPE" either byte-level (a ByteLevel pre-tokenizer, alone
// with use_regex or after Split patterns this engine implements) or
// SentencePiece-style (byte_fallback with a Prepend("▁")+Replace(" ", "▁")
// normalizer or a Metaspace pre-tokenizer that always prepends). An NFC
// normalizer is accepted but not applied: input is assumed to be NFC
// already. Anything else is kUnimplemented naming the JSON key.
#include <fstream>
#include <sstream>

#include "common/json.h"
#include "common/log.h"
#include "engine/tokenizer/tokenizer.h"

namespace flashroll::engine {

namespace {

constexpr std::string_view kJsonSpmSpace = "\xE2\x96\x81";  // "▁"

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::FromErrno(errno, "open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::IoError("read " + path);
  return ss.str();
}

// A tokenizer_config.json token field: a string or {"content": "..."}.
Result<std::string> TokenContent(const JsonView& v) {
  if (v.value().is_object()) return v.GetString("content");
  return v.AsString();
}

struct AddedToken {
  int64_t id;
  std::string content;
  bool special;
};

struct PreTokenizerInfo {
  bool byte_level = false;
  bool byte_level_regex = false;
  std::vector<std::string> split_patterns;
  bool metaspace = false;
};

Status ReadPreTokenizer(const JsonView& v, PreTokenizerInfo* info) {
  FR_ASSIGN_OR_RETURN(std::string type, v.GetString("type"));
  if (type == "Sequence") {
    FR_ASSIGN_OR_RETURN(auto items, v.GetArray("pretokenizers"));
    for (const JsonView& item : items) FR_RETURN_IF_ERROR(ReadPreTokenizer(item, info));
    return Status::Ok();
  }
  if (type == "ByteLevel") {
    FR_ASSIGN_OR_RETURN(bool prefix, v.GetBool("add_prefix_space", false));
    if (prefix) return Status::Unimplemented(v.path() + ".add_prefix_space: true is not supported");
    info->byte_level = true;
    FR_ASSIGN_OR_RETURN(info->byte_level_regex, v.GetBool("use_regex", true));
    return Status::Ok();
  }
  if (type == "Split") {
    FR_ASSIGN_OR_RETURN(JsonView pattern, v.GetObject("pattern"));
    FR_ASSIGN_OR_RETURN(std::string behavior, v.GetString("behavior"));
    FR_ASSIGN_OR_RETURN(bool invert, v.GetBool("invert", false));
    if (behavior != "Isolated" || invert) {
      return Status::Unimplemented(v.path() + ": Split with behavior " + behavior +
                                   (invert ? " (inverted)" : "") + " is not supported");
    }
    if (!pattern.Has("Regex")) return Status::Unimplemented(pattern.path() + ": only Regex patterns are supported");
    FR_ASSIGN_OR_RETURN(std::string regex, pattern.GetString("Regex"));
    info->split_patterns.push_back(std::move(regex));
    return Status::Ok();
  }
  if (type == "Metaspace") {
    FR_ASSIGN_OR_RETURN(std::string replacement, v.GetString("replacement", std::string(kJsonSpmSpace)));
    FR_ASSIGN_OR_RETURN(std::string scheme, v.GetString("prepend_scheme", "always"));
    FR_ASSIGN_OR_RETURN(bool split, v.GetBool("split", false));
    if (replacement != kJsonSpmSpace || scheme != "always" || split) {
      return Status::Unimplemented(v.path() + ": Metaspace other than replacement \"▁\", "
                                   "prepend_scheme \"always\", split false is not supported");
    }
    info->metaspace = true;
    return Status::Ok();
  }
  return Status::Unimplemented(v.path() + ".type: pre-tokenizer '" + type + "' is not supported");
}

// Recognises the SentencePiece normalizer Sequence[Prepend("▁"), Replace(" ", "▁")]
// (or the Replace alone); sets *prepend. NFC is accepted as a no-op.
Status ReadNormalizer(const JsonView& v, bool* spm, bool* prepend) {
  FR_ASSIGN_OR_RETURN(std::string type, v.GetString("type"));
  if (type == "Sequence") {
    FR_ASSIGN_OR_RETURN(auto items, v.GetArray("normalizers"));
    for (const JsonView& item : items) FR_RETURN_IF_ERROR(ReadNormalizer(item, spm, prepend));
    return Status::Ok();
  }
  if (type == "NFC") {
    // Text from chat templates and tools is NFC in practice; an input that is
    // not may tokenize differently from Hugging Face.
    log::Warn("tokenizer.json NFC normalizer is not applied; input is assumed to be NFC",
              {{"key", v.path()}});
    return Status::Ok();
  }
  if (type == "Prepend") {
    FR_ASSIGN_OR_RETURN(std::string p, v.GetString("prepend"));
    if (p != kJsonSpmSpace) return Status::Unimplemented(v.path() + ".prepend: only \"▁\" is supported");
    *prepend = true;
    *spm = true;
    return Status::Ok();
  }
  if (type == "Replace") {
    FR_ASSIGN_OR_RETURN(JsonView pattern, v.GetObject("pattern"));
    FR_ASSIGN_OR_RETURN(std::string from, pattern.GetString("String", ""));
    FR_ASSIGN_OR_RETURN(std::string to, v.GetString("content"));
    if (from != " " || to != kJsonSpmSpace) {
      return Status::Unimplemented(v.path() + ": only Replace(\" \", \"▁\") is supported");
    }
    *spm = true;
    return Status::Ok();
  }
  return Status::Unimplemented(v.path() + ".type: normalizer '" + type + "' is not supported");
}

Status BuildSpec(const Json& root, const Json* config, TokenizerSpec* spec) {
  JsonView top(root, "");
  FR_RETURN_IF_ERROR(top.ExpectObject());
  FR_ASSIGN_OR_RETURN(JsonView model, top.GetObject("model"));
  FR_ASSIGN_OR_RETURN(std::string model_type, model.GetString("type", "BPE"));
  if (model_type != "BPE") {
    return Status::Unimplemented("model.type: '" + model_type + "' is not supported (want BPE)");
  }
  FR_ASSIGN_OR_RETURN(bool byte_fallback, model.GetBool("byte_fallback", false));
  FR_ASSIGN_OR_RETURN(spec->ignore_merges, model.GetBool("ignore_merges", false));

  PreTokenizerInfo pre;
  if (top.Has("pre_tokenizer")) {
    FR_ASSIGN_OR_RETURN(JsonView p, top.Get("pre_tokenizer"));
    if (!p.value().is_null()) FR_RETURN_IF_ERROR(ReadPreTokenizer(p, &pre));
  }
  bool spm_normalizer = false;
  bool prepend = false;
  if (top.Has("normalizer")) {
    FR_ASSIGN_OR_RETURN(JsonView n, top.Get("normalizer"));
    if (!n.value().is_null()) FR_RETURN_IF_ERROR(ReadNormalizer(n, &spm_normalizer, &prepend));
  }
  if (pre.byte_level) {
    spec->model = TokenizerModel::kByteLevelBpe;
    if (spm_normalizer || pre.metaspace) {
      return Status::Unimplemented("pre_tokenizer: ByteLevel mixed with SentencePiece spaces is not supported");
    }
    if (pre.byte_level_regex) {
      if (!pre.split_patterns.empty()) {
        return Status::Unimplemented("pre_tokenizer: Split patterns before a ByteLevel that also "
                                     "splits (use_regex) are not supported");
      }
      spec->pre = PreTokenizerKind::kGpt2;
    } else if (pre.split_patterns.empty()) {
      spec->pre = PreTokenizerKind::kNone;
    } else {
      auto kind = PreTokenizerFromPatterns(pre.split_patterns);
      if (!kind.ok()) return kind.status().Wrap("pre_tokenizer");
      spec->pre = *kind;
    }
  } else if (spm_normalizer || pre.metaspace || byte_fallback) {
    if (!pre.split_patterns.empty()) {
      return Status::Unimplemented("pre_tokenizer: Split patterns with SentencePiece spaces are not supported");
    }
    spec->model = TokenizerModel::kSentencePieceBpe;
    spec->pre = PreTokenizerKind::kNone;
    spec->add_space_prefix = prepend || pre.metaspace;
  } else {
    return Status::Unimplemented("pre_tokenizer/normalizer: neither byte-level nor SentencePiece-style BPE");
  }

  // Vocabulary: model.vocab plus added_tokens (which may extend it).
  FR_ASSIGN_OR_RETURN(JsonView vocab, model.GetObject("vocab"));
  std::vector<AddedToken> added;
  if (top.Has("added_tokens")) {
    FR_ASSIGN_OR_RETURN(auto items, top.GetArray("added_tokens"));
    for (const JsonView& item : items) {
      AddedToken a;
      FR_ASSIGN_OR_RETURN(a.id, item.GetInt("id"));
      FR_ASSIGN_OR_RETURN(a.content, item.GetString("content"));
      FR_ASSIGN_OR_RETURN(a.special, item.GetBool("special", false));
      added.push_back(std::move(a));
    }
  }
  if (config != nullptr && config->is_object() && config->contains("added_tokens_decoder")) {
    JsonView cfg(*config, "tokenizer_config");
    FR_ASSIGN_OR_RETURN(JsonView dec, cfg.GetObject("added_tokens_decoder"));
    for (auto it = dec.value().begin(); it != dec.value().end(); ++it) {
      JsonView item(it.value(), dec.path() + "." + it.key());
      AddedToken a;
      try {
        size_t used = 0;
        a.id = std::stoll(it.key(), &used);
        if (used != it.key().size()) throw std::invalid_argument("trailing characters");
      } catch (const std::exception&) {
        return Status::InvalidArgument(item.path() + ": key is not a token id");
      }
      FR_ASSIGN_OR_RETURN(a.content, item.GetString("content"));
      FR_ASSIGN_OR_RETURN(a.special, item.GetBool("special", false));
      added.push_back(std::move(a));
    }
  }
  const size_t entries = vocab.value().size() + added.size();
  // Ids are bounded by the number of entries, so a lying id cannot make us
  // allocate a huge table.
  const int64_t max_id = static_cast<int64_t>(2 * entries + 1024);
  std::vector<std::string> tokens;
  std::vector<bool> present;
  auto place = [&](int64_t id, const std::string& text, const std::string& where) -> Status {
    if (id < 0 || id > max_id) {
      return Status::InvalidArgument(where + ": id " + std::to_string(id) + " out of range");
    }
    if (static_cast<size_t>(id) >= tokens.size()) {
      tokens.resize(id + 1);
      present.resize(id + 1, false);
    }
    tokens[id] = text;
    present[id] = true;
    return Status::Ok();
  };
  for (auto it = vocab.value().begin(); it != vocab.value().end(); ++it) {
    JsonView idv(it.value(), vocab.path() + "." + it.key());
    FR_ASSIGN_OR_RETURN(int64_t id, idv.AsInt());
    FR_RETURN_IF_ERROR(place(id, it.key(), idv.path()));
  }
  for (const AddedToken& a : added) FR_RETURN_IF_ERROR(place(a.id, a.content, "added_tokens"));
  spec->types.assign(tokens.size(), TokenType::kNormal);
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (!present[i]) spec->types[i] = TokenType::kUnused;  // a hole in the id space
  }
  for (const AddedToken& a : added) {
    spec->types[a.id] = a.special ? TokenType::kControl : TokenType::kUserDefined;
  }
  if (spec->model == TokenizerModel::kSentencePieceBpe) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      const std::string& t = tokens[i];
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' &&
          spec->types[i] == TokenType::kNormal) {
        spec->types[i] = TokenType::kByte;
      }
    }
  }
  spec->tokens = std::move(tokens);

  // Merges: "left right" strings or ["left", "right"] pairs.
  if (model.Has("merges")) {
    FR_ASSIGN_OR_RETURN(auto merges, model.GetArray("merges"));
    spec->merges.reserve(merges.size());
    for (const JsonView& m : merges) {
      if (m.value().is_array()) {
        FR_ASSIGN_OR_RETURN(auto parts, m.AsStringArray());
        if (parts.size() != 2) return Status::InvalidArgument(m.path() + ": want two strings");
        spec->merges.emplace_back(std::move(parts[0]), std::move(parts[1]));
      } else {
        FR_ASSIGN_OR_RETURN(std::string s, m.AsString());
        size_t sep = s.find(' ');
        if (sep == std::string::npos || s.find(' ', sep + 1) != std::string::npos) {
          return Status::InvalidArgument(m.path() + ": '" + s + "' is not 'left right'");
        }
        spec->merges.emplace_back(s.substr(0, sep), s.substr(sep + 1));
      }
    }
  }
  if (spec->model == TokenizerModel::kSentencePieceBpe && spec->merges.empty()) {
    return Status::Unimplemented("model.merges: SentencePiece-style BPE without merges is not supported");
  }

  // Special ids.
  auto id_of = [&](const std::string& text) -> int32_t {
    for (size_t i = 0; i < spec->tokens.size(); ++i) {
      if (spec->tokens[i] == text) return static_cast<int32_t>(i);
    }
    return -1;
  };
  if (model.Has("unk_token")) {
    FR_ASSIGN_OR_RETURN(JsonView u, model.Get("unk_token"));
    if (!u.value().is_null()) {
      FR_ASSIGN_OR_RETURN(std::string unk, u.AsString());
      spec->unk_id = id_of(unk);
    }
  }
  // BOS added by the post-processor (TemplateProcessing starting with a special token).
  if (top.Has("post_processor")) {
    FR_ASSIGN_OR_RETURN(JsonView pp, top.Get("post_processor"));
    const Json& p = pp.value();
    if (p.is_object() && p.value("type", "") == "TemplateProcessing" && p.contains("single") &&
        p["single"].is_array() && !p["single"].empty() && p["single"][0].is_object() &&
        p["single"][0].contains("SpecialToken")) {
      const Json& st = p["single"][0]["SpecialToken"];
      if (st.is_object() && st.contains("id") && st["id"].is_string()) {
        int32_t id = id_of(st["id"].get<std::string>());
        if (id >= 0) {
          spec->bos_id = id;
          spec->add_bos = true;
        }
      }
    }
  }
  if (config != nullptr) {
    JsonView cfg(*config, "tokenizer_config");
    FR_RETURN_IF_ERROR(cfg.ExpectObject());
    for (const char* key : {"bos_token", "eos_token", "pad_token", "unk_token"}) {
      if (!cfg.Has(key)) continue;
      FR_ASSIGN_OR_RETURN(JsonView v, cfg.Get(key));
      if (v.value().is_null()) continue;
      FR_ASSIGN_OR_RETURN(std::string text, TokenContent(v));
      int32_t id = id_of(text);
      if (id < 0) {
        return Status::InvalidArgument(v.path() + ": token '" + text + "' is not in the vocabulary");
      }
      std::string_view k(key);
      (k == "bos_token" ? spec->bos_id : k == "eos_token" ? spec->eos_id
                                      : k == "pad_token" ? spec->pad_id : spec->unk_id) = id;
    }
    FR_ASSIGN_OR_RETURN(spec->add_bos, cfg.GetBool("add_bos_token", spec->add_bos));
    FR_ASSIGN_OR_RETURN(spec->add_eos, cfg.GetBool("add_eos_token", spec->add_eos));
    if (cfg.Has("chat_template")) {
      FR_ASSIGN_OR_RETURN(JsonView t, cfg.Get("chat_template"));
      if (t.value().is_string()) {
        spec->chat_template = t.value().get<std::string>();
      } else if (t.value().is_array()) {
        // A list of named templates: use "default".
        FR_ASSIGN_OR_RETURN(auto items, t.AsArray());
        for (const JsonView& item : items) {
          FR_ASSIGN_OR_RETURN(std::string name, item.GetString("name"));
          if (name == "default") {
            FR_ASSIGN_OR_RETURN(spec->chat_template, item.GetString("template"));
          }
        }
      } else if (!t.value().is_null()) {
        return Status::InvalidArgument(t.path() + ": expected a string or a list of templates");
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::FromHuggingFaceText(std::string_view tokenizer_json,
                                                                  std::string_view config_json,
                                                                  std::string_view source) {
  std::string src(source);
  FR_ASSIGN_OR_RETURN(Json root, ParseJson(tokenizer_json, src));
  Json config;
  bool have_config = !config_json.empty();
  if (have_config) {
    FR_ASSIGN_OR_RETURN(config, ParseJson(config_json, src + " (tokenizer_config.json)"));
  }
  TokenizerSpec spec;
  spec.source = src;
  try {
    Status s = BuildSpec(root, have_config ? &config : nullptr, &spec);
    if (!s.ok()) return s.Wrap(src);
  } catch (const std::exception& e) {
    // nlohmann throws on out-of-range numbers and similar; never let it escape.
    return Status::InvalidArgument(src + ": " + e.what());
  }
  return Create(std::move(spec));
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::FromHuggingFace(const std::string& tokenizer_json_path,
                                                              const std::string& config_path) {
  FR_ASSIGN_OR_RETURN(std::string text, ReadFile(tokenizer_json_path));
  std::string config;
  if (!config_path.empty()) {
    FR_ASSIGN_OR_RETURN(config, ReadFile(config_path));
  }
  FR_ASSIGN_OR_RETURN(auto tok, FromHuggingFaceText(text, config, tokenizer_json_path));
  if (tok->chat_template_.empty() && !config_path.empty()) {
    // Recent transformers versions keep the template next to the config.
    std::string dir = config_path.substr(0, config_path.find_last_of('/') + 1);
    auto tmpl = ReadFile(dir + "chat_template.jinja");
    if (tmpl.ok()) tok->chat_template_ = std::move(*tmpl);
  }
  return tok;
}

}  // namespace flashroll::engine
