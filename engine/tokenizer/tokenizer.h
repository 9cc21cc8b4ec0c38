// Tokenizer: text <-> token ids for the vocabularies the engine serves.
//
// Two models are implemented:
//   - byte-level BPE (GPT-2, Llama 3, Qwen2, DeepSeek): a regex-style
//     pre-tokenizer splits the text (pre_tokenizer.h), each piece's bytes are
//     mapped to the GPT-2 byte alphabet and merged by merge rank;
//   - SentencePiece BPE (Llama 2, phi-3): spaces become U+2581 ("▁"), a space
//     is prefixed, symbols merge by token score (GGUF) or merge rank
//     (tokenizer.json), and characters outside the vocabulary fall back to
//     <0xNN> byte tokens.
// Special and added tokens are matched in the text before the model runs
// (longest match first). Loaders: FromGguf() (tokenizer.ggml.* metadata) and
// FromHuggingFace() (tokenizer.json + tokenizer_config.json), both in their
// own .cc files.
//
// Thread safety: a Tokenizer is immutable after construction; all const
// methods may be called concurrently.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "engine/tokenizer/pre_tokenizer.h"

namespace flashroll::engine {

class GgufFile;

// Token types as stored in GGUF tokenizer.ggml.token_type.
enum class TokenType : uint8_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      // special tokens: <|im_start|>, <s>, ... (matched only with parse_special)
  kUserDefined = 4,  // added tokens matched in any text
  kUnused = 5,
  kByte = 6,         // <0xNN> byte fallback tokens
};

enum class TokenizerModel {
  kByteLevelBpe,       // merges over the GPT-2 byte alphabet
  kSentencePieceBpe,   // ▁ spaces, score- or rank-ordered merges, byte fallback
};

// Everything a tokenizer is built from; filled by the loaders (or by tests).
struct TokenizerSpec {
  std::string source;  // file name, for error messages
  TokenizerModel model = TokenizerModel::kByteLevelBpe;
  PreTokenizerKind pre = PreTokenizerKind::kNone;
  std::vector<std::string> tokens;  // indexed by id
  std::vector<TokenType> types;     // same size as tokens (empty: all normal)
  std::vector<float> scores;        // SentencePiece with score-ordered merges
  // Merges in rank order ("left", "right"). For SentencePiece, a non-empty
  // list selects rank-ordered merges (tokenizer.json) instead of scores.
  std::vector<std::pair<std::string, std::string>> merges;
  bool ignore_merges = false;     // a piece that is a whole token is not merged (Llama 3)
  bool add_space_prefix = true;   // SentencePiece: prefix text with "▁"
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t unk_id = -1;
  int32_t pad_id = -1;
  bool add_bos = false;
  bool add_eos = false;
  std::vector<int32_t> extra_eos_ids;  // e.g. <|eot_id|>, <|im_end|>
  std::string chat_template;
};

class Tokenizer {
 public:
  // Validates `spec` and builds the lookup tables. Errors (kInvalidArgument,
  // naming spec.source): ids out of range, missing byte tokens, merges whose
  // parts or result are not in the vocabulary, size mismatches.
  static Result<std::unique_ptr<Tokenizer>> Create(TokenizerSpec spec);

  // Reads the tokenizer.ggml.* keys of a GGUF file (tokenizer_gguf.cc).
  // Errors name the file and the key.
  static Result<std::unique_ptr<Tokenizer>> FromGguf(const GgufFile& gguf);

  // Reads a Hugging Face tokenizer.json and, when `config_path` is not empty,
  // its tokenizer_config.json (bos/eos/added tokens/chat_template)
  // (tokenizer_json.cc). Errors name the file and the JSON key.
  static Result<std::unique_ptr<Tokenizer>> FromHuggingFace(const std::string& tokenizer_json_path,
                                                            const std::string& config_path);
  // The same from file contents; `source` names them in errors.
  static Result<std::unique_ptr<Tokenizer>> FromHuggingFaceText(std::string_view tokenizer_json,
                                                                std::string_view config_json,
                                                                std::string_view source);

  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Tokenizes `text`. Control tokens (<|im_end|>, ...) written in the text
  // are recognised only when `parse_special` is true; user-defined added
  // tokens always are. No BOS/EOS is added (see add_bos()).
  std::vector<int32_t> Encode(std::string_view text, bool parse_special) const;
  // Appends the tokens of `text` to *out.
  void EncodeAppend(std::string_view text, bool parse_special, std::vector<int32_t>* out) const;

  // Concatenated text of `ids`, invalid UTF-8 replaced by U+FFFD. Control
  // tokens are written as their text unless `skip_special`. SentencePiece
  // models drop the one leading space their encoder added. Ids out of range
  // are skipped.
  std::string Decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // The raw bytes one token stands for (▁ as space, <0xNN> as the byte, the
  // byte alphabet decoded, added tokens included, as Hugging Face does);
  // SentencePiece control and added tokens give their text. Empty when out
  // of range.
  std::string TokenBytes(int32_t id) const;

  // Vocabulary lookups.
  int32_t vocab_size() const { return static_cast<int32_t>(tokens_.size()); }
  // The token's text as stored in the vocabulary ("Ġthe", "▁the", "<s>"); empty when out of range.
  std::string_view TokenText(int32_t id) const;
  TokenType TokenTypeOf(int32_t id) const;
  // The id whose vocabulary text is exactly `text`, or -1.
  int32_t TokenId(std::string_view text) const;
  bool IsControl(int32_t id) const { return TokenTypeOf(id) == TokenType::kControl; }
  // True for eos_id() and extra_eos_ids(): tokens that end a generation.
  bool IsEndOfGeneration(int32_t id) const;

  TokenizerModel model() const { return model_; }
  PreTokenizerKind pre_tokenizer() const { return pre_; }
  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }
  int32_t unk_id() const { return unk_id_; }
  int32_t pad_id() const { return pad_id_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool add_space_prefix() const { return model_ == TokenizerModel::kSentencePieceBpe && add_space_prefix_; }
  const std::vector<int32_t>& extra_eos_ids() const { return extra_eos_ids_; }
  const std::string& chat_template() const { return chat_template_; }

 private:
  struct Token {
    std::string text;
    float score;
    TokenType type;
  };
  // A node of the byte trie over special/added token texts.
  struct TrieNode {
    std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
    int32_t token = -1;
  };
  struct Merge {
    int32_t rank;
    int32_t result;
  };

  Tokenizer() = default;
  Status Build(TokenizerSpec& spec);
  void AddSpecial(int32_t id);
  // Length and id of the longest special token at text[pos], or 0.
  size_t MatchSpecial(std::string_view text, size_t pos, bool parse_special, int32_t* id) const;
  void EncodeText(std::string_view text, bool prefix_space, std::vector<int32_t>* out) const;
  void EncodeByteLevelPiece(std::string_view piece, std::vector<int32_t>* out) const;
  void EncodeSentencePiece(std::string_view text, bool prefix_space, std::vector<int32_t>* out) const;
  void MergeByRank(std::vector<int32_t>* symbols) const;
  void EmitBytes(std::string_view bytes, std::vector<int32_t>* out) const;

  TokenizerModel model_ = TokenizerModel::kByteLevelBpe;
  PreTokenizerKind pre_ = PreTokenizerKind::kNone;
  std::vector<Token> tokens_;
  std::unordered_map<std::string_view, int32_t> text_to_id_;  // views tokens_[i].text
  std::unordered_map<uint64_t, Merge> merges_;                // (left << 32 | right)
  bool rank_merges_ = false;  // SentencePiece: merges_ instead of scores
  bool ignore_merges_ = false;
  bool add_space_prefix_ = true;
  std::array<int32_t, 256> byte_token_{};     // byte-level: the alphabet char; SPM: <0xNN>
  std::array<uint8_t, 512> char_to_byte_{};   // byte alphabet code point -> byte
  std::vector<TrieNode> trie_;
  bool has_user_defined_ = false;
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  int32_t unk_id_ = -1;
  int32_t pad_id_ = -1;
  bool add_bos_ = false;
  bool add_eos_ = false;
  std::vector<int32_t> extra_eos_ids_;
  std::string chat_template_;
};

}  // namespace flashroll::engine
