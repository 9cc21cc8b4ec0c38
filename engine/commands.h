// The engine's subcommands:
//   flashroll logits --model PATH --tokens "ID ID ..." [--routing]
//   flashroll generate --model PATH (--tokens "ID ..." | --prompt TEXT)
//                      [--max-tokens N] [--temperature T] [--seed S] [--json]
//   flashroll model-info PATH [--json]
// PATH is a Hugging Face model directory or a GGUF file. Bad input (flags,
// token ids, model files) exits 2 with one line naming the file and the
// tensor or key; see engine/commands.cc for the output formats.
//
// Thread safety: registration happens once at start-up.
#pragma once

#include "common/command.h"

namespace flashroll {

void RegisterEngineCommands(Registry& registry);

}  // namespace flashroll
