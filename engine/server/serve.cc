#include "engine/server/serve.h"

#include <pthread.h>
#include <signal.h>

#include <cstdio>

#include "common/command.h"
#include "common/config.h"
#include "common/http.h"
#include "common/log.h"
#include "engine/device/device_memory.h"
#include "engine/format/confined_path.h"
#include "engine/models/model.h"
#include "engine/models/model_tokenizer.h"
#include "engine/server/openai_server.h"
#include "engine/serving/engine.h"

namespace flashroll::engine {

std::string DefaultServedModelName(const std::string& model_path) {
  std::string path = model_path;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const size_t slash = path.rfind('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  const std::string gguf = ".gguf";
  if (name.size() > gguf.size() && name.compare(name.size() - gguf.size(), gguf.size(), gguf) == 0) {
    name.resize(name.size() - gguf.size());
  }
  return name;
}

namespace {

// Checks the flags that need no files; the first bad one, named.
Status CheckFlags(const ServeOptions& o) {
  if (o.model_path.empty()) return Status::InvalidArgument("--model: a model directory or GGUF file is required");
  if (o.port < 0 || o.port > 65535) return Status::InvalidArgument("--port: must be in 0-65535, got " + std::to_string(o.port));
  if (o.threads < 0) return Status::InvalidArgument("--threads: must not be negative, got " + std::to_string(o.threads));
  if (o.max_running < 1) return Status::InvalidArgument("--max-running: must be at least 1, got " + std::to_string(o.max_running));
  if (o.max_model_len < 0) {
    return Status::InvalidArgument("--max-model-len: must not be negative, got " + std::to_string(o.max_model_len));
  }
  if (o.max_connections < 1) {
    return Status::InvalidArgument("--max-connections: must be at least 1, got " + std::to_string(o.max_connections));
  }
  if (o.reprefill_older_than < -1) {
    return Status::InvalidArgument("--reprefill-older-than: must be at least 0 (or -1, off), got " +
                                   std::to_string(o.reprefill_older_than));
  }
  return Status::Ok();
}

}  // namespace

int RunServe(const ServeOptions& o) {
  if (Status s = CheckFlags(o); !s.ok()) return ReportFailure(s);
  EngineOptions engine_options;
  engine_options.threads = static_cast<int>(o.threads);
  engine_options.max_running = o.max_running;
  engine_options.max_model_len = o.max_model_len;
  engine_options.reprefill_older_than = o.reprefill_older_than;
  engine_options.persist_dir = o.persist_dir;
  Result<uint64_t> kv_memory = ParseByteSize(o.kv_memory);
  if (!kv_memory.ok()) return ReportFailure(kv_memory.status().Wrap("--kv-memory"));
  engine_options.kv_memory_bytes = static_cast<int64_t>(*kv_memory);
  if (!o.weight_memory.empty()) {
    Result<uint64_t> weight_memory = ParseByteSize(o.weight_memory);
    if (!weight_memory.ok()) return ReportFailure(weight_memory.status().Wrap("--weight-memory"));
    if (*weight_memory == 0) return ReportFailure(Status::InvalidArgument("--weight-memory: must be above 0"));
    engine_options.weight_memory_bytes = static_cast<int64_t>(*weight_memory);
  }
  Result<KvDType> kv_dtype = ParseKvDType(o.kv_dtype);
  if (!kv_dtype.ok()) return ReportFailure(kv_dtype.status().Wrap("--kv-dtype"));
  engine_options.kv_dtype = *kv_dtype;
  Result<DeviceSpec> device = ParseDevice(o.device);
  if (!device.ok()) return ReportFailure(device.status().Wrap("--device"));
  engine_options.device = *device;
  // A GPU that cannot run the model is reported before the weights load.
  const int64_t needed = DeviceWeightBytes(*device, o.model_path) + engine_options.kv_memory_bytes;
  if (Status st = CheckDevice(*device, needed); !st.ok()) return ReportFailure(st.Wrap("--device"));

  OpenAiServerOptions server_options;
  server_options.host = o.host;
  server_options.port = static_cast<int>(o.port);
  server_options.max_connections = static_cast<size_t>(o.max_connections);
  server_options.model_name = o.served_model_name.empty() ? DefaultServedModelName(o.model_path) : o.served_model_name;
  if (!o.api_key_file.empty()) {
    Result<std::vector<std::string>> keys = LoadTokenFileLines(o.api_key_file);
    if (!keys.ok()) return ReportFailure(keys.status().Wrap("--api-key-file"));
    server_options.api_keys = std::move(*keys);
  }
  if (!o.checkpoint_root.empty()) {
    // Bad input, found before the model loads; the server opens it again.
    Result<std::unique_ptr<ConfinedRoot>> root = ConfinedRoot::Open(o.checkpoint_root);
    if (!root.ok()) return ReportFailure(root.status().Wrap("--checkpoint-root"));
    server_options.checkpoint_root = o.checkpoint_root;
  }

  // Blocked before any thread starts, so that only sigwait sees them.
  sigset_t stop;
  sigemptyset(&stop);
  for (int sig : {SIGINT, SIGTERM}) sigaddset(&stop, sig);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  Result<std::unique_ptr<Model>> model = Model::Load(o.model_path);
  if (!model.ok()) return ReportFailure(model.status());
  Result<std::unique_ptr<Tokenizer>> tokenizer = LoadModelTokenizer(**model);
  if (!tokenizer.ok()) return ReportFailure(tokenizer.status());
  Result<std::unique_ptr<Engine>> engine = Engine::Start(**model, tokenizer->get(), engine_options);
  if (!engine.ok()) return ReportFailure(engine.status().Wrap("serve"));
  Result<std::unique_ptr<OpenAiServer>> server = OpenAiServer::Start(engine->get(), tokenizer->get(), server_options);
  if (!server.ok()) {
    // Bad input was ruled out above: failing to bind is the machine's state.
    Status s = server.status().code() == Code::kInvalidArgument ? server.status()
                                                                : Status::Unavailable(server.status().message());
    return ReportFailure(s.Wrap("serve"));
  }
  std::printf("serving %s on %s\n", server_options.model_name.c_str(), (*server)->base_url().c_str());
  std::fflush(stdout);
  log::Info("serving", {{"model", server_options.model_name},
                        {"url", (*server)->base_url()},
                        {"max_model_len", (*engine)->max_model_len()},
                        {"kv_dtype", KvDTypeName(engine_options.kv_dtype)}});

  int sig = 0;
  sigwait(&stop, &sig);
  log::Info("serve stopping", {{"signal", sig}});
  (*server)->Stop();
  server->reset();
  engine->reset();
  return 0;
}

}  // namespace flashroll::engine
