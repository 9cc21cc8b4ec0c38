// Teacher: the model a distillation job (training.algorithm distill) scores
// the student's samples with. The distill trainer asks for the teacher's
// full-vocabulary log-probs of each sample through POST /v1/score, so the
// teacher is an OpenAI-compatible server: either one the user runs
// (training.teacher.url), or — training.teacher.model — one the job serves
// itself, in its own process, on an engine and server of its own bound to a
// free port of 127.0.0.1 and guarded by the trainer API's token.
//
// In the job's process the teacher lives and dies with the job: there is no
// separate process to supervise or restart, and a port is never handed
// from one process to another.
//
// Thread safety: the server answers from its own threads; the object is
// created and destroyed by the job's thread.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "engine/models/model.h"
#include "engine/server/openai_server.h"
#include "engine/serving/engine.h"
#include "engine/tokenizer/tokenizer.h"
#include "scheduler/job_config.h"

namespace flashroll {

class Teacher {
 public:
  // For training.teacher.url: nothing to start, the server is named. For
  // training.teacher.model: loads the model, checks its vocabulary is the
  // student's (`student` the student's tokenizer), starts an engine and an
  // OpenAI-compatible server requiring `api_key`, the trainer API's token
  // (the trainer has its file). Errors name training.teacher.model.
  static Result<std::unique_ptr<Teacher>> Start(const JobConfig& config, const engine::Tokenizer& student,
                                                const std::string& api_key);
  Teacher(const Teacher&) = delete;
  Teacher& operator=(const Teacher&) = delete;

  const std::string& url() const { return url_; }   // http://HOST:PORT
  const std::string& name() const { return name_; }  // the model name requests carry
  // The file holding the key the server wants ("" for none).
  const std::string& token_file() const { return token_file_; }

 private:
  Teacher() = default;

  // Destroyed in reverse order: the server stops before the engine it
  // serves, the engine before the model it runs.
  std::unique_ptr<engine::Model> model_;
  std::unique_ptr<engine::Tokenizer> tokenizer_;
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<engine::OpenAiServer> server_;
  std::string url_, name_, token_file_;
};

}  // namespace flashroll
