#!/usr/bin/env bash
# Builds llama.cpp with CUDA on the GPU machine, for the side-by-side
# measurements of docs/BENCHMARKS.md (issue 24). llama.cpp is never
# committed: its source is the tree node-llama-cpp 3.21.1 bundles, packed
# here into the ignored .gpu/ folder, which the `run` call carries:
#
#   (here)   npm pack node-llama-cpp@3.21.1 && tar xzf node-llama-cpp-3.21.1.tgz
#            git clone package/llama/gitRelease.bundle fr-llama.cpp
#            tar -C fr-llama.cpp -cf - CMakeLists.txt cmake common ggml include src tools vendor \
#              gguf-py conversion convert_hf_to_gguf.py licenses LICENSE | xz > /work/main/.gpu/llama-src.tar.xz
#   (device) bash .gpu/gpu_llama_build.sh [SRC_TAR] [OUT_DIR]
#
# Unpacks to /tmp/llama, builds llama-bench and llama-batched-bench for
# sm_90 with 16 jobs into /tmp/llama/pack/{bin,lib} (the time goes to
# OUT_DIR/llama-build.txt). Measured 2026-12-04: 242 s. The binaries and
# libraries, stripped, are 42 MB even as .tar.xz, more than a `run` call can
# carry beside this repository (64 MiB in all), so each lease builds again.
set -euo pipefail
src="${1:-.gpu/llama-src.tar.xz}"
out="${2:-${OUT:-/tmp/out}}"
mkdir -p /tmp/llama "$out"
[[ -f /tmp/llama/CMakeLists.txt ]] || tar -C /tmp/llama -xJf "$src"
start=$(date +%s)
cmake -S /tmp/llama -B /tmp/llama/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
  -DLLAMA_BUILD_APP=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF >/tmp/llama/configure.log 2>&1
cmake --build /tmp/llama/build -j16 --target llama-bench llama-batched-bench >/tmp/llama/build.log 2>&1
echo "llama.cpp (node-llama-cpp 3.21.1's tree) built for sm_90 in $(( $(date +%s) - start )) s with -j16" \
  | tee "$out/llama-build.txt"
mkdir -p /tmp/llama/pack/bin /tmp/llama/pack/lib
cp /tmp/llama/build/bin/llama-bench /tmp/llama/build/bin/llama-batched-bench /tmp/llama/pack/bin/
find /tmp/llama/build -name '*.so*' -exec cp -P {} /tmp/llama/pack/lib/ \;
