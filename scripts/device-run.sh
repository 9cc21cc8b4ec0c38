#!/usr/bin/env bash
# Stages a CUDA build of flashroll for the GPU machine of this workplace's
# `device` tool (docs/GPU.md).
#
# The tool copies the coordinator's checkout (/work/main) plus the paths named
# in `carry`; this script builds the targets in THIS tree, strips them, adds
# the shared libraries the GPU machine's image lacks (not the CUDA runtime:
# it is linked statically, and the driver's libcuda is there) and packs them
# into ONE archive, <checkout>/.gpu/bundle.tar.xz, with an unpacking runner
# .gpu/run.sh beside it. Then it prints the `run` call to make.
#
#   scripts/device-run.sh [--build DIR] [--stage CHECKOUT] [--no-build] [--targets "flashroll cuda_tests"]
#
# On the GPU machine `bash .gpu/run.sh CMD...` unpacks into .gpu/bin and
# .gpu/lib, puts them on PATH / LD_LIBRARY_PATH and runs CMD from the
# repository root (the tests read tests/data and models/ from there).
set -euo pipefail

build=build
stage=/work/main
do_build=1
targets=(flashroll cuda_tests engine_tests)
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --stage) stage="$2"; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --targets) read -r -a targets <<<"$2"; shift 2 ;;
    *) echo "device-run.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
if [[ $do_build == 1 ]]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build" -j2 --target "${targets[@]}"
fi

out="$stage/.gpu"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin" "$tmp/lib" "$out"
for t in "${targets[@]}"; do
  if [[ $t == flashroll ]]; then cp "$build/flashroll" "$tmp/bin/"; else cp "$build/tests/$t" "$tmp/bin/"; fi
done
strip "$tmp"/bin/*

# Every shared library the binaries load except glibc's own and the C++
# runtime, which the GPU machine's (newer) image provides.
for b in "$tmp"/bin/*; do
  ldd "$b" | awk '/=> \//{print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libstdc++.so*|libgcc_s.so*) ;;
    *) cp -L "$lib" "$tmp/lib/" ;;
  esac
done

tar -C "$tmp" -I 'xz -9 -T2' -cf "$out/bundle.tar.xz" bin lib
cat >"$out/run.sh" <<'EOF'
#!/usr/bin/env bash
# Unpacks bundle.tar.xz (scripts/device-run.sh) and runs "$@" with it.
set -e
here="$(cd "$(dirname "$0")" && pwd)"
if [[ ! -x "$here/bin/flashroll" ]]; then
  tar -C "$here" -xJf "$here/bundle.tar.xz"
fi
export PATH="$here/bin:$PATH" LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
exec "$@"
EOF
chmod +x "$out/run.sh"
cp scripts/gpu_wide_parity.py scripts/gpu_bench_all.sh scripts/gpu_llama_build.sh scripts/gpu_llama_bench.sh \
  scripts/gguf_no_vocab.py "$out/"
echo "staged $(du -h "$out/bundle.tar.xz" | cut -f1) in $out (carry limit: about 14 MiB)"
echo 'run: carry [".gpu"], command: bash .gpu/run.sh cuda_tests  (results: write them under $OUT)'
