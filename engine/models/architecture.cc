#include "engine/models/architecture.h"

namespace flashroll::engine {

// Defined one per file, next to this one.
extern const Architecture kLlamaArchitecture;
extern const Architecture kQwen2Architecture;
extern const Architecture kQwen3Architecture;
extern const Architecture kQwen2MoeArchitecture;
extern const Architecture kQwen3MoeArchitecture;

namespace {

const Architecture* const kArchitectures[] = {
    &kLlamaArchitecture,    &kQwen2Architecture,    &kQwen3Architecture,
    &kQwen2MoeArchitecture, &kQwen3MoeArchitecture,
};

}  // namespace

const Architecture* FindArchitecture(std::string_view model_type) {
  for (const Architecture* a : kArchitectures) {
    if (model_type == a->model_type) return a;
  }
  return nullptr;
}

const Architecture* FindGgufArchitecture(std::string_view gguf_name) {
  for (const Architecture* a : kArchitectures) {
    if (gguf_name == a->gguf_name) return a;
  }
  return nullptr;
}

std::string ArchitectureNames() {
  std::string out;
  for (const Architecture* a : kArchitectures) {
    if (!out.empty()) out += ", ";
    out += a->model_type;
  }
  return out;
}

}  // namespace flashroll::engine
