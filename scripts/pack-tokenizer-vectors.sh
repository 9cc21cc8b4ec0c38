#!/usr/bin/env bash
# Packs tests/data/tokenizer-vectors (all but README.md and the licence, which
# stay tracked beside it) into tests/data/tokenizer-vectors.tar.xz, the form
# the repository keeps them in: 25 MB of vocabularies are 5 MB packed, which
# keeps the working tree small enough to travel to the GPU machine. CMake
# unpacks the archive at configure time (CMakeLists.txt). Run this after
# scripts/gen_tokenizer_references.py has rewritten the vectors.
set -euo pipefail
cd "$(dirname "$0")/../tests/data"
find tokenizer-vectors -mindepth 1 -maxdepth 1 ! -name README.md ! -name LICENSE-llama.cpp -printf '%p\n' |
  LC_ALL=C sort |
  tar --create --xz --file tokenizer-vectors.tar.xz --sort=name --owner=0 --group=0 --numeric-owner \
      --mtime=@0 --files-from=-
echo "packed $(du -h tokenizer-vectors.tar.xz | cut -f1) into tests/data/tokenizer-vectors.tar.xz"
