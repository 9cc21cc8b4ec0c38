#include "scheduler/teacher.h"

#include "engine/models/model_tokenizer.h"
#include "engine/server/serve.h"

namespace flashroll {

Result<std::unique_ptr<Teacher>> Teacher::Start(const JobConfig& config, const engine::Tokenizer& student,
                                                const std::string& api_key) {
  const JobConfig::Training::Teacher& t = config.training.teacher;
  auto teacher = std::unique_ptr<Teacher>(new Teacher());
  if (!t.url.empty()) {
    teacher->url_ = t.url;
    teacher->name_ = t.name;
    teacher->token_file_ = t.token_file;
    return teacher;
  }
  auto model = engine::Model::Load(t.model);
  if (!model.ok()) return model.status().Wrap("training.teacher.model");
  teacher->model_ = std::move(*model);
  auto tokenizer = engine::LoadModelTokenizer(*teacher->model_);
  if (!tokenizer.ok()) return tokenizer.status().Wrap("training.teacher.model");
  teacher->tokenizer_ = std::move(*tokenizer);
  // The config check compared tokenizer files; a GGUF teacher or student
  // carries its own, compared here by what the scores depend on.
  if (teacher->tokenizer_->vocab_size() != student.vocab_size()) {
    return Status::InvalidArgument("training.teacher.model: " + t.model + " has a vocabulary of " +
                                   std::to_string(teacher->tokenizer_->vocab_size()) + " tokens, model.path's " +
                                   std::to_string(student.vocab_size()) + ": the teacher must share the student's "
                                   "tokenizer");
  }
  engine::EngineOptions engine_options;
  engine_options.threads = static_cast<int>(t.threads);
  engine_options.kv_memory_bytes = static_cast<int64_t>(t.kv_memory_bytes);
  auto engine = engine::Engine::Start(*teacher->model_, teacher->tokenizer_.get(), engine_options);
  if (!engine.ok()) return engine.status().Wrap("training.teacher.model");
  teacher->engine_ = std::move(*engine);
  engine::OpenAiServerOptions server_options;
  server_options.host = "127.0.0.1";
  server_options.port = 0;  // a free port, chosen by the kernel when the server binds
  server_options.api_keys = {api_key};
  server_options.model_name = engine::DefaultServedModelName(t.model);
  auto server = engine::OpenAiServer::Start(teacher->engine_.get(), teacher->tokenizer_.get(), server_options);
  if (!server.ok()) return server.status().Wrap("training.teacher: serving " + t.model);
  teacher->server_ = std::move(*server);
  teacher->url_ = teacher->server_->base_url();
  teacher->name_ = server_options.model_name;
  teacher->token_file_ = config.trainer_api.token_file;
  return teacher;
}

}  // namespace flashroll
