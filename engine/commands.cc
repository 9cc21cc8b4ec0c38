// Output formats (the command-line contract of issue 3; external checks parse them):
//   logits:   {"logits": [[float, ...], ...]}  one row per input position, full vocabulary,
//             float32 values printed to round-trip; with --routing on a MoE model also
//             "routing": [[[id, ...], ...], ...] indexed [layer][position][k], experts in
//             descending router score (layers without experts have no positions).
//   generate --tokens ... --json:  {"tokens": [id, ...]}  the continuation only.
//   generate --prompt TEXT:        the generated text, streamed, then a newline
//                                  (with --json: {"tokens": [...], "text": "..."}).
//   model-info PATH:  "family: llama" / "parameters: N" / "kv_bytes_per_token: N" /
//                     "dtype: f32" / "format: safetensors" /
//                     "device memory (cuda): weights 15.3 GiB, KV 144 KiB/token[, KV pool P for ..., total T]"
//                     lines (with --json: one object; "device_memory" holds the byte counts).
#include "engine/commands.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/flags.h"
#include "common/json.h"
#include "engine/device/device.h"
#include "engine/device/device_memory.h"
#include "engine/serving/decode_benchmark.h"
#include "engine/serving/device_logits.h"
#include "engine/serving/generate.h"
#include "engine/serving/preempt_benchmark.h"
#include "engine/models/model.h"
#include "engine/models/model_tokenizer.h"
#include "engine/server/serve.h"
#include "engine/serving/swap_benchmark.h"
#include "engine/tokenizer/streaming_decoder.h"
#include "engine/tokenizer/tokenizer.h"

namespace flashroll {
namespace {

using engine::Model;

// Parses "ID ID ..." (spaces, tabs or commas between ids).
Result<std::vector<int32_t>> ParseTokens(const std::string& text) {
  std::vector<int32_t> tokens;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == ' ' || text[i] == '\t' || text[i] == ',' || text[i] == '\n') {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < text.size() && text[end] != ' ' && text[end] != '\t' && text[end] != ',' && text[end] != '\n') ++end;
    int32_t id = 0;
    auto [ptr, ec] = std::from_chars(text.data() + i, text.data() + end, id);
    if (ec != std::errc() || ptr != text.data() + end || id < 0) {
      return Status::InvalidArgument("--tokens: '" + text.substr(i, end - i) + "' is not a token id");
    }
    tokens.push_back(id);
    i = end;
  }
  if (tokens.empty()) return Status::InvalidArgument("--tokens: no token ids given");
  return tokens;
}

void AppendFloat(float v, std::string* out) {
  if (!std::isfinite(v)) {
    out->append("null");
    return;
  }
  char buf[32];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, ec == std::errc() ? ptr : buf);
}

void AppendIds(const std::vector<int32_t>& ids, std::string* out) {
  out->push_back('[');
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out->push_back(',');
    out->append(std::to_string(ids[i]));
  }
  out->push_back(']');
}

void WriteOut(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

// The --device flag every engine command takes.
constexpr const char* kDeviceHelp = "where the model runs: cpu (default), cuda or cuda:N (GPU N)";

// Parses --device and checks, before any weights load, that it can hold the
// model at `model_path` (these commands' KV pools are small).
Result<engine::DeviceSpec> CheckDeviceFlag(const std::string& text, const std::string& model_path) {
  Result<engine::DeviceSpec> device = engine::ParseDevice(text);
  if (!device.ok()) return device.status().Wrap("--device");
  Status st = engine::CheckDevice(*device, engine::DeviceWeightBytes(*device, model_path));
  if (!st.ok()) return st.Wrap("--device");
  return device;
}

Result<std::unique_ptr<Model>> LoadModel(const std::string& path) {
  if (path.empty()) return Status::InvalidArgument("--model: a model directory or GGUF file is required");
  return Model::Load(path);
}

// [position][moe_layer][k] ids as [layer][position][k], dense layers empty
// (what Model::Forward gives).
engine::Routing RoutingByLayer(const engine::Model& model, const std::vector<int32_t>& routed, int64_t positions) {
  const engine::ModelConfig& c = model.config();
  const engine::RoutingShape shape = model.routing_shape();
  engine::Routing out(static_cast<size_t>(c.num_layers));
  int64_t moe_index = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (shape.empty() || !model.decoder_options().moe || !c.IsMoeLayer(l)) continue;
    for (int64_t t = 0; t < positions; ++t) {
      const int32_t* ids = &routed[t * shape.TokenIds() + moe_index * shape.k];
      out[l].emplace_back(ids, ids + shape.k);
    }
    ++moe_index;
  }
  return out;
}

int RunLogits(const std::vector<std::string>& args) {
  std::string model_path, tokens_text, device_text = "cpu";
  bool routing = false;
  FlagParser flags("flashroll logits --model PATH --tokens \"ID ID ...\" [--routing] [--device cpu|cuda[:N]]",
                   "Runs the model over the tokens and prints {\"logits\": [[...], ...]}: one row of "
                   "full-vocabulary float32 logits per position. --routing adds the experts chosen per "
                   "[layer][position][k] on mixture-of-experts models.");
  flags.String("--model", &model_path, "Hugging Face model directory or GGUF file");
  flags.String("--tokens", &tokens_text, "input token ids, separated by spaces");
  flags.Bool("--routing", &routing, "also print the routed expert ids (MoE models)");
  flags.String("--device", &device_text, kDeviceHelp);
  if (auto exit = flags.ParseOrExit(args)) return *exit;
  Result<std::vector<int32_t>> tokens = ParseTokens(tokens_text);
  if (!tokens.ok()) return ReportFailure(tokens.status());
  Result<engine::DeviceSpec> device = CheckDeviceFlag(device_text, model_path);
  if (!device.ok()) return ReportFailure(device.status());
  Result<std::unique_ptr<Model>> model = LoadModel(model_path);
  if (!model.ok()) return ReportFailure(model.status());
  std::vector<float> logits;
  engine::Routing routes;
  if (device->is_cuda()) {
    std::vector<int32_t> routed;  // [position][moe_layer][k]
    const bool moe = !(*model)->routing_shape().empty();
    Result<std::vector<float>> rows = engine::DeviceLogits(**model, *device, *tokens, routing && moe ? &routed : nullptr);
    if (!rows.ok()) return ReportFailure(rows.status().Wrap("--tokens"));
    logits = std::move(*rows);
    if (routing) routes = RoutingByLayer(**model, routed, static_cast<int64_t>(tokens->size()));
  } else {
    engine::KvCache cache = (*model)->NewCache();
    Status st = (*model)->Forward(*tokens, &cache, true, &logits, routing ? &routes : nullptr);
    if (!st.ok()) return ReportFailure(st.Wrap("--tokens"));
  }

  const size_t vocab = static_cast<size_t>((*model)->config().vocab_size);
  std::string out;
  out.reserve(logits.size() * 12 + 64);
  out.append("{\"logits\":[");
  for (size_t row = 0; row < tokens->size(); ++row) {
    if (row) out.push_back(',');
    out.push_back('[');
    for (size_t j = 0; j < vocab; ++j) {
      if (j) out.push_back(',');
      AppendFloat(logits[row * vocab + j], &out);
    }
    out.push_back(']');
  }
  out.push_back(']');
  if (routing) {
    out.append(",\"routing\":[");
    for (size_t layer = 0; layer < routes.size(); ++layer) {
      if (layer) out.push_back(',');
      out.push_back('[');
      for (size_t pos = 0; pos < routes[layer].size(); ++pos) {
        if (pos) out.push_back(',');
        AppendIds(routes[layer][pos], &out);
      }
      out.push_back(']');
    }
    out.push_back(']');
  }
  out.append("}\n");
  WriteOut(out);
  return 0;
}

int RunGenerate(const std::vector<std::string>& args) {
  std::string model_path, tokens_text, prompt, device_text = "cpu";
  int64_t max_tokens = 64, seed = 0;
  double temperature = 0.0;
  bool json = false;
  FlagParser flags(
      "flashroll generate --model PATH (--tokens \"ID ...\" | --prompt TEXT) [--max-tokens N] "
      "[--temperature T] [--seed S] [--json] [--device cpu|cuda[:N]]",
      "Generates a continuation. With --tokens and --json prints {\"tokens\": [...]} (the "
      "continuation only); with --prompt prints the generated text. Temperature 0 is greedy. "
      "Generation stops after --max-tokens or at an end-of-sequence token the model names.");
  flags.String("--model", &model_path, "Hugging Face model directory or GGUF file");
  flags.String("--tokens", &tokens_text, "prompt token ids, separated by spaces");
  flags.String("--prompt", &prompt, "prompt text (tokenised with the model's tokenizer; special tokens such as <|im_start|> are recognised)");
  flags.Int("--max-tokens", &max_tokens, "tokens to generate at most (default 64)");
  flags.Double("--temperature", &temperature, "sampling temperature; 0 is greedy (default)");
  flags.Int("--seed", &seed, "random seed for sampling (default 0)");
  flags.Bool("--json", &json, "print JSON instead of text");
  flags.String("--device", &device_text, kDeviceHelp);
  if (auto exit = flags.ParseOrExit(args)) return *exit;
  if (tokens_text.empty() == prompt.empty()) {
    return ReportFailure(Status::InvalidArgument("generate: give exactly one of --tokens and --prompt"));
  }
  if (max_tokens < 0) return ReportFailure(Status::InvalidArgument("--max-tokens: must not be negative"));
  if (!(temperature >= 0)) return ReportFailure(Status::InvalidArgument("--temperature: must not be negative"));

  std::vector<int32_t> input;
  if (!tokens_text.empty()) {
    Result<std::vector<int32_t>> tokens = ParseTokens(tokens_text);
    if (!tokens.ok()) return ReportFailure(tokens.status());
    input = *tokens;
  }
  Result<engine::DeviceSpec> device = CheckDeviceFlag(device_text, model_path);
  if (!device.ok()) return ReportFailure(device.status());
  Result<std::unique_ptr<Model>> model = LoadModel(model_path);
  if (!model.ok()) return ReportFailure(model.status());
  engine::GenerateOptions options;
  options.device = *device;
  options.max_tokens = max_tokens;
  options.temperature = temperature;
  options.seed = static_cast<uint64_t>(seed);

  if (prompt.empty()) {
    Result<std::vector<int32_t>> out = engine::Generate(**model, input, options);
    if (!out.ok()) return ReportFailure(out.status().Wrap("--tokens"));
    std::string text;
    if (json) {
      text = "{\"tokens\":";
      AppendIds(*out, &text);
      text += "}\n";
    } else {
      for (size_t i = 0; i < out->size(); ++i) text += (i ? " " : "") + std::to_string((*out)[i]);
      text += "\n";
    }
    WriteOut(text);
    return 0;
  }

  Result<std::unique_ptr<engine::Tokenizer>> tokenizer = engine::LoadModelTokenizer(**model);
  if (!tokenizer.ok()) return ReportFailure(tokenizer.status());
  const engine::Tokenizer& tok = **tokenizer;
  if (tok.add_bos() && tok.bos_id() >= 0) input.push_back(tok.bos_id());
  // Special tokens written in the prompt (<|im_start|>, ...) are those tokens,
  // as transformers' tokenizer and llama.cpp read a prompt: a chat-formatted
  // prompt then means what the model was trained on.
  tok.EncodeAppend(prompt, /*parse_special=*/true, &input);
  if (tok.eos_id() >= 0) options.stop_tokens.push_back(tok.eos_id());
  for (int32_t id : tok.extra_eos_ids()) options.stop_tokens.push_back(id);
  engine::StreamingDecoder decoder(tok, /*skip_special=*/true);
  std::string text;
  Result<std::vector<int32_t>> out = engine::Generate(**model, input, options, [&](int32_t id) {
    std::string piece = decoder.Push(id);
    if (json) {
      text += piece;
    } else {
      WriteOut(piece);
    }
  });
  if (!out.ok()) return ReportFailure(out.status().Wrap("--prompt"));
  const std::string rest = decoder.Finish();
  if (json) {
    std::string line = "{\"tokens\":";
    AppendIds(*out, &line);
    line += ",\"text\":" + DumpJson(Json(text + rest)) + "}\n";
    WriteOut(line);
  } else {
    WriteOut(rest + "\n");
  }
  return 0;
}

int RunModelInfo(const std::vector<std::string>& args) {
  std::vector<std::string> paths;
  bool json = false;
  std::string kv_memory_text;
  int64_t context = 0, batch = 1;
  FlagParser flags("flashroll model-info PATH [--json] [--kv-memory SIZE | --context N [--batch B]]",
                   "Prints a model's family, parameter count, bytes of KV cache per token, weight dtype "
                   "and the GPU memory its weights and KV pool take on the CUDA backend (bf16 KV, blocks "
                   "of 16 tokens).");
  flags.Positional("PATH", &paths, "Hugging Face model directory or GGUF file");
  flags.Bool("--json", &json, "print one JSON object");
  flags.String("--kv-memory", &kv_memory_text, "also report a KV pool of this size, as serve --kv-memory (e.g. 8G)");
  flags.Int("--context", &context, "also report the KV pool for --batch sequences of this many tokens");
  flags.Int("--batch", &batch, "sequences of --context tokens (default 1)");
  if (auto exit = flags.ParseOrExit(args)) return *exit;
  if (paths.size() != 1) return ReportFailure(Status::InvalidArgument("model-info: expected one PATH"));
  if (!kv_memory_text.empty() && context > 0) {
    return ReportFailure(Status::InvalidArgument("model-info: give --kv-memory or --context, not both"));
  }
  if (context < 0 || batch < 1) {
    return ReportFailure(Status::InvalidArgument("model-info: --context must be >= 0 and --batch >= 1"));
  }
  Result<std::unique_ptr<Model>> model = LoadModel(paths[0]);
  if (!model.ok()) return ReportFailure(model.status());
  const Model& m = **model;
  const engine::ModelConfig& c = m.config();
  const int64_t weight_bytes = engine::CudaWeightBytes(m.files());
  const int64_t kv_per_token = engine::KvLayoutOf(c).TokenBytes();
  int64_t pool_bytes = -1;  // none asked for
  std::string pool_for;
  if (!kv_memory_text.empty()) {
    Result<uint64_t> kv_memory = ParseByteSize(kv_memory_text);
    if (!kv_memory.ok()) return ReportFailure(kv_memory.status().Wrap("--kv-memory"));
    pool_bytes = engine::KvPoolBytes(c, static_cast<int64_t>(*kv_memory));
    pool_for = "--kv-memory " + kv_memory_text;
  } else if (context > 0) {
    pool_bytes = engine::KvPoolBytesFor(c, context, batch);
    pool_for = std::to_string(batch) + " x " + std::to_string(context) + " tokens";
  }
  if (json) {
    Json device_memory = {{"device", "cuda"}, {"weight_bytes", weight_bytes}, {"kv_bytes_per_token", kv_per_token}};
    if (pool_bytes >= 0) {
      device_memory["kv_pool_bytes"] = pool_bytes;
      device_memory["total_bytes"] = weight_bytes + pool_bytes;
    }
    Json info = {{"family", c.architecture},
                 {"parameters", m.ParameterCount()},
                 {"kv_bytes_per_token", m.KvBytesPerToken()},
                 {"dtype", m.WeightDType()},
                 {"format", m.files().format()},
                 {"device_memory", device_memory}};
    WriteOut(DumpJson(info) + "\n");
  } else {
    std::string memory = "device memory (cuda): weights " + engine::HumanBytes(weight_bytes) + ", KV " +
                         engine::HumanBytes(kv_per_token) + "/token";
    if (pool_bytes >= 0) {
      memory += ", KV pool " + engine::HumanBytes(pool_bytes) + " for " + pool_for + ", total " +
                engine::HumanBytes(weight_bytes + pool_bytes);
    }
    WriteOut("family: " + c.architecture + "\nparameters: " + std::to_string(m.ParameterCount()) +
             "\nkv_bytes_per_token: " + std::to_string(m.KvBytesPerToken()) + "\ndtype: " + m.WeightDType() +
             "\nformat: " + m.files().format() + "\n" + memory + "\n");
  }
  return 0;
}

int RunBenchDecode(const std::vector<std::string>& args) {
  std::string model_path, kv_dtype = "bf16", device_text = "cpu";
  int64_t threads = 0, batch = 1, context = 64, gen = 64, prefill = 512, repeats = 3;
  bool json = false;
  FlagParser flags("flashroll bench decode --model PATH [--threads N] [--batch B] [--context C] [--json] "
                   "[--device cpu|cuda[:N]]",
                   "Measures the serving engine: prefill tokens/s of one --prefill-tokens prompt, and "
                   "decode tokens/s of --batch sequences decoding --gen tokens each after a prompt of "
                   "--context tokens (greedy, prefix caching off; median of --repeats runs after a warm-up).");
  flags.String("--model", &model_path, "Hugging Face model directory or GGUF file");
  flags.Int("--threads", &threads, "kernel threads (default: all cores)");
  flags.Int("--batch", &batch, "sequences decoding at once (default 1)");
  flags.Int("--context", &context, "prompt tokens of each decoding sequence (default 64)");
  flags.Int("--gen", &gen, "tokens each sequence generates (default 64)");
  flags.Int("--prefill-tokens", &prefill, "prompt tokens of the prefill measurement (default 512)");
  flags.Int("--repeats", &repeats, "measured runs; the median is reported (default 3)");
  flags.String("--kv-dtype", &kv_dtype, "KV cache dtype: bf16 (default) or f32");
  flags.Bool("--json", &json, "print one JSON object");
  flags.String("--device", &device_text, kDeviceHelp);
  if (auto exit = flags.ParseOrExit(args)) return *exit;
  engine::DecodeBenchmarkOptions options;
  auto dtype = engine::ParseKvDType(kv_dtype);
  if (!dtype.ok()) return ReportFailure(dtype.status().Wrap("--kv-dtype"));
  Result<engine::DeviceSpec> device = CheckDeviceFlag(device_text, model_path);
  if (!device.ok()) return ReportFailure(device.status());
  options.device = *device;
  options.kv_dtype = *dtype;
  options.threads = static_cast<int>(threads);
  options.batch = batch;
  options.context = context;
  options.gen_tokens = gen;
  options.prefill_tokens = prefill;
  options.repeats = static_cast<int>(repeats);
  Result<std::unique_ptr<Model>> model = LoadModel(model_path);
  if (!model.ok()) return ReportFailure(model.status());
  auto result = engine::RunDecodeBenchmark(**model, options);
  if (!result.ok()) return ReportFailure(result.status());
  if (json) {
    WriteOut(DumpJson(Json{{"tokens_per_s", result->tokens_per_s},
                           {"prefill_tokens_per_s", result->prefill_tokens_per_s}}) + "\n");
  } else {
    WriteOut("decode: " + std::to_string(result->tokens_per_s) + " tokens/s\nprefill: " +
             std::to_string(result->prefill_tokens_per_s) + " tokens/s\n");
  }
  return 0;
}

int RunBenchPreempt(const std::vector<std::string>& args) {
  std::string model_path, kv_dtype = "bf16", persist_dir;
  int64_t threads = 0, context = 4096, repeats = 3;
  bool json = false;
  FlagParser flags("flashroll bench preempt --model PATH --context N [--kv-dtype bf16|f32] [--json]",
                   "Measures what pausing a sequence of --context prompt tokens costs against recomputing it: "
                   "resume_ms (paused in memory, from Resume to its next token), resume_from_disk_ms (paused to "
                   "disk, the file dropped from the page cache), reprefill_ms (a prefill of the same tokens, "
                   "prefix caching off) and persist_bytes_per_token (the sequence file's size per token); "
                   "medians of --repeats runs.");
  flags.String("--model", &model_path, "Hugging Face model directory or GGUF file");
  flags.Int("--context", &context, "prompt tokens of the paused sequence (default 4096)");
  flags.String("--kv-dtype", &kv_dtype, "KV cache dtype: bf16 (default) or f32");
  flags.Int("--threads", &threads, "kernel threads (default: all cores)");
  flags.Int("--repeats", &repeats, "measured runs; the median is reported (default 3)");
  flags.String("--persist-dir", &persist_dir, "directory for the sequence file (default: a fresh one under $TMPDIR or /tmp)");
  flags.Bool("--json", &json, "print one JSON object");
  if (auto exit = flags.ParseOrExit(args)) return *exit;
  engine::PreemptBenchmarkOptions options;
  auto dtype = engine::ParseKvDType(kv_dtype);
  if (!dtype.ok()) return ReportFailure(dtype.status().Wrap("--kv-dtype"));
  options.kv_dtype = *dtype;
  options.threads = static_cast<int>(threads);
  options.context = context;
  options.repeats = static_cast<int>(repeats);
  options.persist_dir = persist_dir;
  Result<std::unique_ptr<Model>> model = LoadModel(model_path);
  if (!model.ok()) return ReportFailure(model.status());
  auto result = engine::RunPreemptBenchmark(**model, options);
  if (!result.ok()) return ReportFailure(result.status());
  if (json) {
    WriteOut(DumpJson(Json{{"resume_ms", result->resume_ms},
                           {"resume_from_disk_ms", result->resume_from_disk_ms},
                           {"reprefill_ms", result->reprefill_ms},
                           {"persist_bytes_per_token", result->persist_bytes_per_token},
                           {"kv_dtype", kv_dtype}}) + "\n");
  } else {
    WriteOut("resume: " + std::to_string(result->resume_ms) + " ms\nresume from disk: " +
             std::to_string(result->resume_from_disk_ms) + " ms\nre-prefill: " + std::to_string(result->reprefill_ms) +
             " ms\npersisted: " + std::to_string(result->persist_bytes_per_token) + " bytes/token\n");
  }
  return 0;
}

int RunBenchSwap(const std::vector<std::string>& args) {
  std::string model_path, kv_dtype = "bf16";
  int64_t threads = 0, sequences = 32, context = 64;
  bool json = false;
  FlagParser flags("flashroll bench swap --model PATH [--sequences 32] [--context 64] [--threads N] [--json]",
                   "Measures a weight swap under load: --sequences greedy sequences decode while the same "
                   "weights, loaded again beforehand, are swapped in as the next version. Prints swap_pause_ms "
                   "(the gap less one step: the time the loop spent swapping), gap_ms (last token before the swap "
                   "to the first after), step_ms, swap_call_ms and tokens/s before, during and after the swap.");
  flags.String("--model", &model_path, "Hugging Face model directory or GGUF file");
  flags.Int("--sequences", &sequences, "sequences decoding at once (default 32)");
  flags.Int("--context", &context, "prompt tokens of each sequence (default 64)");
  flags.Int("--threads", &threads, "kernel threads (default: all cores)");
  flags.String("--kv-dtype", &kv_dtype, "KV cache dtype: bf16 (default) or f32");
  flags.Bool("--json", &json, "print one JSON object");
  if (auto exit = flags.ParseOrExit(args)) return *exit;
  engine::SwapBenchmarkOptions options;
  auto dtype = engine::ParseKvDType(kv_dtype);
  if (!dtype.ok()) return ReportFailure(dtype.status().Wrap("--kv-dtype"));
  options.kv_dtype = *dtype;
  options.threads = static_cast<int>(threads);
  options.sequences = sequences;
  options.context = context;
  Result<std::unique_ptr<Model>> model = LoadModel(model_path);
  if (!model.ok()) return ReportFailure(model.status());
  Result<std::unique_ptr<Model>> next = LoadModel(model_path);
  if (!next.ok()) return ReportFailure(next.status());
  auto result = engine::RunSwapBenchmark(**model, std::move(next).value(), options);
  if (!result.ok()) return ReportFailure(result.status());
  const engine::SwapBenchmarkResult& r = *result;
  if (json) {
    WriteOut(DumpJson(Json{{"swap_pause_ms", r.swap_pause_ms},
                           {"gap_ms", r.gap_ms},
                           {"step_ms", r.step_ms},
                           {"swap_call_ms", r.swap_call_ms},
                           {"tokens_per_s_before", r.tokens_per_s_before},
                           {"tokens_per_s_during", r.tokens_per_s_during},
                           {"tokens_per_s_after", r.tokens_per_s_after},
                           {"sequences", r.sequences}}) + "\n");
  } else {
    WriteOut("swap pause: " + std::to_string(r.swap_pause_ms) + " ms\ngap: " + std::to_string(r.gap_ms) +
             " ms\nstep: " + std::to_string(r.step_ms) + " ms\nswap call: " + std::to_string(r.swap_call_ms) +
             " ms\ntokens/s before: " + std::to_string(r.tokens_per_s_before) + "\ntokens/s during: " +
             std::to_string(r.tokens_per_s_during) + "\ntokens/s after: " + std::to_string(r.tokens_per_s_after) +
             "\n");
  }
  return 0;
}

int RunServe(const std::vector<std::string>& args) {
  engine::ServeOptions o;
  FlagParser flags(
      "flashroll serve --model PATH [--host 127.0.0.1] [--port 8000] [--api-key-file F] [--threads N] "
      "[--max-running N] [--kv-memory 2G] [--kv-dtype bf16|f32] [--max-model-len N] [--checkpoint-root DIR] [--reprefill-older-than K] [--weight-memory 64M] [--persist-dir DIR] "
      "[--device cpu|cuda[:N]]",
      "Serves the model over an OpenAI-compatible HTTP API (/v1/models, /v1/completions, "
      "/v1/chat/completions, /v1/score, /v1/sequences, /v1/sessions, /v1/weights, /health, /metrics) until SIGINT or SIGTERM. Prints \"serving NAME on URL\" "
      "once it accepts connections (--port 0 picks a free port).");
  flags.String("--model", &o.model_path, "Hugging Face model directory or GGUF file");
  flags.String("--host", &o.host, "address to listen on (default 127.0.0.1)");
  flags.Int("--port", &o.port, "port to listen on (default 8000; 0: a free one)");
  flags.String("--api-key-file", &o.api_key_file,
               "file listing the keys clients send as \"Authorization: Bearer KEY\", one a line; each key is a client, "
               "which sees only its own sessions and sequences");
  flags.String("--served-model-name", &o.served_model_name, "the model's name in the API (default: PATH's basename)");
  flags.Int("--threads", &o.threads, "kernel threads (default: all cores)");
  flags.String("--device", &o.device, kDeviceHelp);
  flags.Int("--max-running", &o.max_running, "sequences decoding at once (default 64)");
  flags.String("--kv-memory", &o.kv_memory, "memory for the KV cache, e.g. 512M or 2G (default 2G)");
  flags.String("--kv-dtype", &o.kv_dtype, "KV cache dtype: bf16 (default) or f32");
  flags.Int("--max-model-len", &o.max_model_len, "context limit in tokens (default: the model's)");
  flags.Int("--max-connections", &o.max_connections, "concurrent connections; more are answered 429 (default 64)");
  flags.String("--checkpoint-root", &o.checkpoint_root,
               "directory beneath which POST /v1/weights loads checkpoints (default: none, the route answers 403)");
  flags.Int("--reprefill-older-than", &o.reprefill_older_than,
            "after a swap to weight version V, recompute the KV blocks written by versions older than V - K "
            "before decoding on (default -1: off, stale KV is kept)");
  flags.String("--persist-dir", &o.persist_dir,
               "an existing directory where sequences and sessions paused to disk are kept (default: none, pausing to "
               "disk is refused)");
  flags.String("--weight-memory", &o.weight_memory,
               "memory for resident weights; requests with \"pin_version\": true need room for two versions and are "
               "refused below it (default: room for two)");
  if (auto exit = flags.ParseOrExit(args)) return *exit;
  return engine::RunServe(o);
}

}  // namespace

void RegisterEngineCommands(Registry& registry) {
  registry.AddCommand({"logits", "print a model's logits for given token ids (JSON)", RunLogits});
  registry.AddCommand({"generate", "generate a continuation from token ids or a text prompt", RunGenerate});
  registry.AddCommand({"bench decode", "measure the engine's decode and prefill tokens/s on a model", RunBenchDecode});
  registry.AddCommand({"bench swap", "measure the pause a weight swap causes sequences that are decoding", RunBenchSwap});
  registry.AddCommand({"bench preempt", "measure resuming a paused sequence (memory, disk) against re-prefilling it",
                       RunBenchPreempt});
  registry.AddCommand({"model-info", "print a model's family, size, KV bytes per token and dtype", RunModelInfo});
  registry.AddCommand({"serve", "serve a model over an OpenAI-compatible HTTP API", RunServe});
}

}  // namespace flashroll
