// Test helpers for the serving engine's RL features on the shipped models:
// the models loaded once, deterministic prompts, seeded sampled requests,
// other weights of the same shapes, and reading a sample up to a pause.
#pragma once

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "engine/models/model.h"
#include "engine/serving/engine.h"
#include "tests/engine/checkpoint_fixture.h"

namespace flashroll::engine::testing {

// models/NAME (or a model directory NAME with a '/'), loaded once per test
// binary.
inline const Model& LoadShipped(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Model>> models;
  auto& m = models[name];
  if (!m) {
    auto loaded = Model::Load(name.find('/') == std::string::npos ? "models/" + name : name);
    if (!loaded.ok()) {
      ADD_FAILURE() << loaded.status().ToString();
      std::abort();
    }
    m = std::move(*loaded);
  }
  return *m;
}

inline std::vector<int32_t> Prompt(int32_t seed, int64_t len) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < len; ++i) p.push_back(static_cast<int32_t>(3 + (seed * 7919 + i * 104729) % 2400));
  return p;
}

inline GenerationRequest Sampled(std::vector<int32_t> prompt, int64_t max_tokens, uint64_t seed) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.sampling.temperature = 0.9;
  r.sampling.seed = seed;
  return r;
}

// Sampled, asking for the 3 most likely alternatives at every token.
inline GenerationRequest SampledWithTopLogprobs(std::vector<int32_t> prompt, int64_t max_tokens, uint64_t seed) {
  GenerationRequest r = Sampled(std::move(prompt), max_tokens, seed);
  r.sampling.top_logprobs = 3;
  return r;
}

inline bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

// An engine with a small KV pool (64 MiB unless `o` names one) and steps of
// at most 96 tokens, so that prefills are chunked.
inline std::unique_ptr<Engine> StartEngine(const Model& model, EngineOptions o = {}) {
  if (o.kv_memory_bytes == EngineOptions().kv_memory_bytes) o.kv_memory_bytes = 64 << 20;
  o.max_batch_tokens = 96;
  auto e = Engine::Start(model, nullptr, o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? std::move(*e) : nullptr;
}

// models/NAME with layers 0 and 1 exchanged: the same shapes, other weights.
inline std::unique_ptr<Model> OtherWeights(const std::string& name, const std::string& root) {
  const std::string dir = root + "/" + name + "-swapped";
  CopyCheckpoint("models/" + name, dir);
  EditSafetensorsHeader(dir + "/model.safetensors", [](Json& header) {
    for (auto& [tensor, t] : header.items()) {
      if (tensor.rfind("model.layers.0.", 0) != 0) continue;
      std::swap(t["data_offsets"], header["model.layers.1." + tensor.substr(15)]["data_offsets"]);
    }
  });
  auto m = Model::Load(dir);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(*m) : nullptr;
}

// A sample read up to a pause (in memory, or to disk) that lands somewhere
// after its `at`-th token; every token generated before the pause is read.
struct Paused {
  std::shared_ptr<RequestStream> stream;
  uint64_t id = 0;
  Choice choice;
};

inline void ReadToken(Paused* p, const StreamEvent& e) {
  p->id = e.sequence_id;
  p->choice.tokens.push_back(e.token.token);
  p->choice.samples.push_back(e.token);
  p->choice.versions.push_back(e.version);
}

inline void PauseAfter(Engine& engine, Paused* p, size_t at, bool to_disk = false) {
  while (p->choice.tokens.size() < at) {
    auto e = p->stream->Next();
    ASSERT_TRUE(e && e->has_token);
    ReadToken(p, *e);
  }
  ASSERT_TRUE(engine.Pause(p->id, {.to_disk = to_disk}).ok());
  const size_t generated = static_cast<size_t>(engine.GetSequence(p->id)->generated_tokens);
  while (p->choice.tokens.size() < generated) {
    auto e = p->stream->Next();
    ASSERT_TRUE(e && e->has_token);
    ReadToken(p, *e);
  }
}

inline void Finish(Paused* p) {
  while (auto e = p->stream->Next()) {
    if (e->has_token) ReadToken(p, *e);
  }
}

// Scores `c`'s tokens after r.prompt at r's temperature, replaying
// `routing` (flat [token][moe_layer][k]) when given: their logprobs.
inline std::vector<float> ScoreChoice(Engine& engine, const GenerationRequest& r, const Choice& c,
                                      std::vector<int32_t> routing) {
  GenerationRequest s;
  s.prompt = r.prompt;
  s.score_tokens = c.tokens;
  s.max_tokens = 0;
  s.sampling.temperature = r.sampling.temperature;
  s.score_routing = std::move(routing);
  auto out = engine.Generate(s);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  std::vector<float> lp;
  if (out.ok()) {
    for (const SampledToken& t : (*out)[0].samples) lp.push_back(t.logprob);
  }
  return lp;
}

}  // namespace flashroll::engine::testing
