// `flashroll serve`: loads a model, starts an Engine over it and serves the
// OpenAI-compatible API (openai_server.h) until SIGINT or SIGTERM.
//
// Once the server accepts connections it prints one line to stdout,
//   serving MODEL_NAME on http://HOST:PORT
// (PORT is the bound one when --port 0 asked for a free port), so a script
// can wait for it. Exit codes: 0 after a clean stop; 2 for bad input (a
// flag, the model or tokenizer files, the API key file, a checkpoint root
// that is not a directory, engine options the model cannot take); 1 when the server cannot start (the port is taken).
//
// Thread safety: call from the main thread, before other threads start (it
// blocks SIGINT and SIGTERM to wait for them).
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace flashroll::engine {

struct ServeOptions {
  std::string model_path;
  std::string host = "127.0.0.1";
  int64_t port = 8000;
  std::string api_key_file;       // empty: no authentication
  std::string served_model_name;  // empty: the model directory's or file's basename
  int64_t threads = 0;            // 0: all cores
  std::string device = "cpu";     // --device: cpu, cuda or cuda:N (device.h)
  int64_t max_running = 64;
  std::string kv_memory = "2G";
  std::string kv_dtype = "bf16";
  int64_t max_model_len = 0;      // 0: the model's
  int64_t max_connections = 64;
  std::string checkpoint_root;    // POST /v1/weights loads beneath it; empty: refused
  int64_t reprefill_older_than = -1;  // EngineOptions::reprefill_older_than; -1: off
  std::string persist_dir;        // EngineOptions::persist_dir; empty: pausing to disk is refused
  std::string weight_memory;        // EngineOptions::weight_memory_bytes, e.g. "64M"; empty: room for two versions
};

// The name a model is served under by default: the basename of its path
// without a trailing slash or a ".gguf" extension ("models/default/" ->
// "default", "/m/qwen.gguf" -> "qwen").
std::string DefaultServedModelName(const std::string& model_path);

// Runs the server; returns the process exit code. Failures are reported
// through ReportFailure (one line on stderr).
int RunServe(const ServeOptions& options);

}  // namespace flashroll::engine
