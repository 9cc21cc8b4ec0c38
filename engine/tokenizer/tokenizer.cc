#include "engine/tokenizer/tokenizer.h"

#include <algorithm>
#include <queue>

#include "engine/tokenizer/byte_alphabet.h"
#include "engine/tokenizer/unicode.h"

namespace flashroll::engine {

namespace {

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581 "▁"

std::string ByteTokenText(uint8_t b) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string s = "<0x";
  s.push_back(kHex[b >> 4]);
  s.push_back(kHex[b & 15]);
  s.push_back('>');
  return s;
}

// Parses "<0xNN>"; returns -1 when `text` is not a byte token.
int ParseByteToken(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int v = 0;
  for (size_t i = 3; i < 5; ++i) {
    char c = text[i];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10
          : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::Create(TokenizerSpec spec) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  FR_RETURN_IF_ERROR(t->Build(spec));
  return t;
}

Status Tokenizer::Build(TokenizerSpec& spec) {
  const std::string& src = spec.source;
  auto invalid = [&](const std::string& why) { return Status::InvalidArgument(src + ": " + why); };
  const size_t n = spec.tokens.size();
  if (n == 0) return invalid("empty vocabulary");
  if (n > static_cast<size_t>(INT32_MAX)) return invalid("vocabulary too large");
  if (!spec.types.empty() && spec.types.size() != n) {
    return invalid(std::to_string(spec.types.size()) + " token types for " + std::to_string(n) +
                   " tokens");
  }
  if (!spec.scores.empty() && spec.scores.size() != n) {
    return invalid(std::to_string(spec.scores.size()) + " token scores for " + std::to_string(n) +
                   " tokens");
  }
  auto check_id = [&](int32_t id, const char* what) -> Status {
    if (id < -1 || id >= static_cast<int32_t>(n)) {
      return invalid(std::string(what) + " id " + std::to_string(id) + " is outside the vocabulary of " +
                     std::to_string(n));
    }
    return Status::Ok();
  };
  FR_RETURN_IF_ERROR(check_id(spec.bos_id, "bos"));
  FR_RETURN_IF_ERROR(check_id(spec.eos_id, "eos"));
  FR_RETURN_IF_ERROR(check_id(spec.unk_id, "unk"));
  FR_RETURN_IF_ERROR(check_id(spec.pad_id, "pad"));
  for (int32_t id : spec.extra_eos_ids) FR_RETURN_IF_ERROR(check_id(id, "end-of-generation"));

  model_ = spec.model;
  pre_ = spec.pre;
  ignore_merges_ = spec.ignore_merges;
  add_space_prefix_ = spec.add_space_prefix;
  bos_id_ = spec.bos_id;
  eos_id_ = spec.eos_id;
  unk_id_ = spec.unk_id;
  pad_id_ = spec.pad_id;
  add_bos_ = spec.add_bos;
  add_eos_ = spec.add_eos;
  extra_eos_ids_ = std::move(spec.extra_eos_ids);
  chat_template_ = std::move(spec.chat_template);

  tokens_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    tokens_[i].text = std::move(spec.tokens[i]);
    tokens_[i].score = spec.scores.empty() ? 0.0f : spec.scores[i];
    tokens_[i].type = spec.types.empty() ? TokenType::kNormal : spec.types[i];
  }
  text_to_id_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    // Later ids win on duplicate texts, as in llama.cpp.
    text_to_id_[tokens_[i].text] = static_cast<int32_t>(i);
  }

  char_to_byte_.fill(0);
  byte_token_.fill(-1);
  if (model_ == TokenizerModel::kByteLevelBpe) {
    for (int b = 0; b < 256; ++b) {
      uint32_t cp = ByteToAlphabet(static_cast<uint8_t>(b));
      char_to_byte_[cp] = static_cast<uint8_t>(b);
      std::string s;
      AppendUtf8(cp, &s);
      byte_token_[b] = TokenId(s);
      if (byte_token_[b] < 0) {
        return invalid("byte-level vocabulary has no token for byte " + ByteTokenText(static_cast<uint8_t>(b)) +
                       " ('" + s + "')");
      }
    }
  } else {
    for (int b = 0; b < 256; ++b) byte_token_[b] = TokenId(ByteTokenText(static_cast<uint8_t>(b)));
  }

  rank_merges_ = model_ == TokenizerModel::kByteLevelBpe || !spec.merges.empty();
  if (model_ == TokenizerModel::kSentencePieceBpe && spec.merges.empty() && spec.scores.empty()) {
    return invalid("SentencePiece vocabulary has neither scores nor merges");
  }
  merges_.reserve(spec.merges.size());
  for (size_t r = 0; r < spec.merges.size(); ++r) {
    const auto& [left, right] = spec.merges[r];
    int32_t l = TokenId(left);
    int32_t rt = TokenId(right);
    int32_t m = TokenId(left + right);
    if (l < 0 || rt < 0 || m < 0) {
      return invalid("merge " + std::to_string(r) + " ('" + left + "' '" + right + "'): " +
                     (l < 0 ? "left part" : rt < 0 ? "right part" : "merged token") +
                     " is not in the vocabulary");
    }
    uint64_t key = (static_cast<uint64_t>(l) << 32) | static_cast<uint32_t>(rt);
    merges_.emplace(key, Merge{static_cast<int32_t>(r), m});  // first (lowest) rank wins
  }

  // Chat models end turns with these control tokens even when the files do
  // not list them as end-of-generation ids (llama.cpp detects them the same way).
  static constexpr std::string_view kTurnEnds[] = {"<|eot_id|>", "<|eom_id|>", "<|im_end|>",
                                                    "<|end|>", "<end_of_turn>", "<|endoftext|>"};
  for (std::string_view end : kTurnEnds) {
    int32_t id = TokenId(end);
    if (id >= 0 && id != eos_id_ && tokens_[id].type == TokenType::kControl &&
        std::find(extra_eos_ids_.begin(), extra_eos_ids_.end(), id) == extra_eos_ids_.end()) {
      extra_eos_ids_.push_back(id);
    }
  }

  trie_.assign(1, TrieNode{});
  for (size_t i = 0; i < n; ++i) {
    TokenType type = tokens_[i].type;
    if (type == TokenType::kControl || type == TokenType::kUserDefined || type == TokenType::kUnknown) {
      AddSpecial(static_cast<int32_t>(i));
    }
  }
  return Status::Ok();
}

void Tokenizer::AddSpecial(int32_t id) {
  const std::string& text = tokens_[id].text;
  if (text.empty()) return;
  if (tokens_[id].type == TokenType::kUserDefined) has_user_defined_ = true;
  int32_t node = 0;
  for (unsigned char c : text) {
    auto& ch = trie_[node].children;
    auto it = std::lower_bound(ch.begin(), ch.end(), std::make_pair(c, INT32_MIN));
    if (it != ch.end() && it->first == c) {
      node = it->second;
    } else {
      int32_t next = static_cast<int32_t>(trie_.size());
      ch.insert(it, {c, next});
      trie_.emplace_back();  // invalidates `ch`; not used after this
      node = next;
    }
  }
  trie_[node].token = id;
}

size_t Tokenizer::MatchSpecial(std::string_view text, size_t pos, bool parse_special, int32_t* id) const {
  int32_t node = 0;
  size_t best = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto& ch = trie_[node].children;
    auto c = static_cast<unsigned char>(text[i]);
    auto it = std::lower_bound(ch.begin(), ch.end(), std::make_pair(c, INT32_MIN));
    if (it == ch.end() || it->first != c) break;
    node = it->second;
    int32_t tok = trie_[node].token;
    if (tok >= 0 && (parse_special || tokens_[tok].type == TokenType::kUserDefined)) {
      best = i + 1 - pos;
      *id = tok;
    }
  }
  return best;
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool parse_special) const {
  std::vector<int32_t> out;
  EncodeAppend(text, parse_special, &out);
  return out;
}

void Tokenizer::EncodeAppend(std::string_view text, bool parse_special, std::vector<int32_t>* out) const {
  // Text between special tokens is encoded fragment by fragment; a
  // SentencePiece fragment that starts the text or follows a special token
  // gets the space prefix (llama.cpp and Hugging Face agree on this).
  bool scan = !trie_[0].children.empty() && (parse_special || has_user_defined_);
  size_t start = 0;
  bool after_special = true;
  if (scan) {
    for (size_t pos = 0; pos < text.size();) {
      int32_t id;
      size_t len = MatchSpecial(text, pos, parse_special, &id);
      if (len == 0) {
        ++pos;
        continue;
      }
      if (pos > start) EncodeText(text.substr(start, pos - start), after_special, out);
      out->push_back(id);
      after_special = true;
      pos += len;
      start = pos;
    }
  }
  if (start < text.size()) EncodeText(text.substr(start), after_special, out);
}

void Tokenizer::EncodeText(std::string_view text, bool prefix_space, std::vector<int32_t>* out) const {
  if (model_ == TokenizerModel::kSentencePieceBpe) {
    EncodeSentencePiece(text, prefix_space, out);
    return;
  }
  thread_local std::vector<std::string_view> pieces;
  pieces.clear();
  PreTokenize(pre_, text, &pieces);
  for (std::string_view piece : pieces) EncodeByteLevelPiece(piece, out);
}

void Tokenizer::EncodeByteLevelPiece(std::string_view piece, std::vector<int32_t>* out) const {
  if (ignore_merges_) {
    std::string alphabet;
    alphabet.reserve(piece.size() * 2);
    for (unsigned char b : piece) AppendUtf8(ByteToAlphabet(b), &alphabet);
    int32_t id = TokenId(alphabet);
    if (id >= 0) {
      out->push_back(id);
      return;
    }
  }
  thread_local std::vector<int32_t> symbols;
  symbols.clear();
  for (unsigned char b : piece) symbols.push_back(byte_token_[b]);
  MergeByRank(&symbols);
  out->insert(out->end(), symbols.begin(), symbols.end());
}

void Tokenizer::MergeByRank(std::vector<int32_t>* symbols) const {
  const size_t n = symbols->size();
  if (n < 2) return;
  std::vector<int32_t>& id = *symbols;
  thread_local std::vector<int32_t> next;
  thread_local std::vector<int32_t> prev;
  next.resize(n);
  prev.resize(n);
  for (size_t i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
    prev[i] = static_cast<int32_t>(i) - 1;
  }
  // Lowest rank first; among equal ranks the leftmost pair.
  struct Candidate {
    int32_t rank;
    int32_t left;
    int32_t left_id;
    int32_t right_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto consider = [&](int32_t left) {
    if (left < 0 || next[left] < 0) return;
    int32_t right = next[left];
    uint64_t key = (static_cast<uint64_t>(id[left]) << 32) | static_cast<uint32_t>(id[right]);
    auto it = merges_.find(key);
    if (it != merges_.end()) queue.push({it->second.rank, left, id[left], id[right]});
  };
  for (size_t i = 0; i + 1 < n; ++i) consider(static_cast<int32_t>(i));
  while (!queue.empty()) {
    Candidate c = queue.top();
    queue.pop();
    int32_t right = next[c.left];
    // Stale entries: either side changed since the pair was queued.
    if (id[c.left] != c.left_id || right < 0 || id[right] != c.right_id) continue;
    uint64_t key = (static_cast<uint64_t>(c.left_id) << 32) | static_cast<uint32_t>(c.right_id);
    id[c.left] = merges_.find(key)->second.result;
    id[right] = -1;
    next[c.left] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.left;
    consider(prev[c.left]);
    consider(c.left);
  }
  size_t w = 0;
  for (int32_t i = 0; i >= 0; i = next[i]) id[w++] = id[i];
  id.resize(w);
}

void Tokenizer::EmitBytes(std::string_view bytes, std::vector<int32_t>* out) const {
  for (unsigned char b : bytes) {
    int32_t t = byte_token_[b] >= 0 ? byte_token_[b] : unk_id_;
    if (t >= 0) out->push_back(t);
  }
}

void Tokenizer::EncodeSentencePiece(std::string_view text, bool prefix_space,
                                    std::vector<int32_t>* out) const {
  if (text.empty()) return;
  std::string s;
  s.reserve(text.size() + 8);
  if (prefix_space && add_space_prefix_) s += kSpmSpace;
  for (char c : text) {
    if (c == ' ') {
      s += kSpmSpace;
    } else {
      s.push_back(c);
    }
  }
  // Symbols start as single characters (invalid bytes stand alone).
  struct Symbol {
    size_t offset;
    size_t size;
    int32_t prev;
    int32_t next;
  };
  std::vector<Symbol> sym;
  for (size_t pos = 0; pos < s.size();) {
    size_t len;
    DecodeUtf8(s, pos, &len);
    int32_t i = static_cast<int32_t>(sym.size());
    sym.push_back({pos, len, i - 1, -1});
    if (i > 0) sym[i - 1].next = i;
    pos += len;
  }

  if (rank_merges_) {
    // Hugging Face BPE with byte fallback: characters outside the vocabulary
    // become byte tokens up front, then merges apply by rank.
    thread_local std::vector<int32_t> ids;
    ids.clear();
    for (const Symbol& y : sym) {
      std::string_view ch(s.data() + y.offset, y.size);
      int32_t id = TokenId(ch);
      if (id >= 0) {
        ids.push_back(id);
      } else {
        EmitBytes(ch, &ids);
      }
    }
    MergeByRank(&ids);
    out->insert(out->end(), ids.begin(), ids.end());
    return;
  }

  // Score-ordered merges (llama.cpp's SentencePiece BPE): repeatedly merge
  // the adjacent pair whose concatenation is the highest-scoring token.
  struct Bigram {
    float score;
    int32_t left;
    int32_t right;
    size_t size;
    bool operator<(const Bigram& o) const {
      return score != o.score ? score < o.score : left > o.left;
    }
  };
  std::priority_queue<Bigram> queue;
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    std::string_view t(s.data() + sym[left].offset, sym[left].size + sym[right].size);
    int32_t id = TokenId(t);
    if (id < 0) return;
    queue.push({tokens_[id].score, left, right, t.size()});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(sym.size()); ++i) try_add(i - 1, i);
  while (!queue.empty()) {
    Bigram b = queue.top();
    queue.pop();
    Symbol& l = sym[b.left];
    Symbol& r = sym[b.right];
    if (l.size == 0 || r.size == 0 || l.size + r.size != b.size) continue;
    l.size += r.size;
    r.size = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) {
    std::string_view t(s.data() + sym[i].offset, sym[i].size);
    int32_t id = TokenId(t);
    if (id >= 0) {
      out->push_back(id);
    } else {
      EmitBytes(t, out);
    }
  }
}

std::string_view Tokenizer::TokenText(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return tokens_[id].text;
}

TokenType Tokenizer::TokenTypeOf(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return TokenType::kUndefined;
  return tokens_[id].type;
}

int32_t Tokenizer::TokenId(std::string_view text) const {
  auto it = text_to_id_.find(text);
  return it == text_to_id_.end() ? -1 : it->second;
}

bool Tokenizer::IsEndOfGeneration(int32_t id) const {
  if (id < 0) return false;
  return id == eos_id_ ||
         std::find(extra_eos_ids_.begin(), extra_eos_ids_.end(), id) != extra_eos_ids_.end();
}

std::string Tokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  const Token& t = tokens_[id];
  if (model_ == TokenizerModel::kSentencePieceBpe) {
    if (t.type == TokenType::kControl || t.type == TokenType::kUserDefined ||
        t.type == TokenType::kUnknown) {
      return t.text;
    }
    int b = ParseByteToken(t.text);
    if (b >= 0 && (t.type == TokenType::kByte || byte_token_[b] == id)) {
      return std::string(1, static_cast<char>(b));
    }
    std::string out;
    out.reserve(t.text.size());
    for (size_t pos = 0; pos < t.text.size();) {
      if (t.text.compare(pos, kSpmSpace.size(), kSpmSpace) == 0) {
        out.push_back(' ');
        pos += kSpmSpace.size();
      } else {
        out.push_back(t.text[pos++]);
      }
    }
    return out;
  }
  // Byte alphabet back to bytes, for added tokens too (as Hugging Face's
  // ByteLevel decoder does); a text with characters outside the alphabet
  // is its own bytes.
  std::string out;
  out.reserve(t.text.size());
  for (size_t pos = 0; pos < t.text.size();) {
    size_t len;
    uint32_t cp = DecodeUtf8(t.text, pos, &len);
    if (cp == kInvalidCodepoint || cp >= char_to_byte_.size() || !IsAlphabetChar(cp)) return t.text;
    out.push_back(static_cast<char>(char_to_byte_[cp]));
    pos += len;
  }
  return out;
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string raw;
  for (int32_t id : ids) {
    if (skip_special && TokenTypeOf(id) == TokenType::kControl) continue;
    raw += TokenBytes(id);
  }
  if (add_space_prefix() && !raw.empty() && raw[0] == ' ') raw.erase(0, 1);
  return SanitizeUtf8(raw);
}

}  // namespace flashroll::engine
