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
# sm_90 with 16 jobs (the time goes to $OUT/llama-build.txt), and packs the
# binaries and their shared libraries into OUT_DIR/llama-bin.tar.xz.part-*
# (15 MB parts, the most a file of $OUT brings back is 16 MiB), so a later
# call can carry them instead of building again (gpu_llama_bench.sh unpacks
# them).
set -euo pipefail
src="${1:-.gpu/llama-src.tar.xz}"
out="${2:-${OUT:-/tmp/out}}"
mkdir -p /tmp/llama "$out"
tar -C /tmp/llama -xJf "$src"
start=$(date +%s)
cmake -S /tmp/llama -B /tmp/llama/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
  -DLLAMA_BUILD_APP=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF >/tmp/llama/configure.log 2>&1
cmake --build /tmp/llama/build -j16 --target llama-bench llama-batched-bench >/tmp/llama/build.log 2>&1
echo "llama.cpp (node-llama-cpp 3.21.1's tree) built for sm_90 in $(( $(date +%s) - start )) s with -j16" \
  | tee "$out/llama-build.txt"
bin=/tmp/llama/build/bin
mkdir -p /tmp/llama/pack/bin /tmp/llama/pack/lib
cp "$bin"/llama-bench "$bin"/llama-batched-bench /tmp/llama/pack/bin/
find /tmp/llama/build -name '*.so*' -exec cp -P {} /tmp/llama/pack/lib/ \;
strip /tmp/llama/pack/bin/* /tmp/llama/pack/lib/*.so* 2>/dev/null || true
tar -C /tmp/llama/pack -cf - bin lib | xz -T16 -6 | split -b 15000000 - "$out/llama-bin.tar.xz.part-"
ls -la "$out" | tee -a "$out/llama-build.txt"
