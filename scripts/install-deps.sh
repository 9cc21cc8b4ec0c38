#!/usr/bin/env bash
# Installs the Debian packages Flashroll needs to build, test and benchmark,
# then the test dependencies of tests/openai with npm (the openai client, pinned
# by its package-lock.json). Idempotent: installs only what is missing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config ccache git
  libyaml-cpp-dev nlohmann-json3-dev libcpp-httplib-dev libssl-dev libsqlite3-dev sqlite3
  # The TLS tests make self-signed certificates with the openssl command.
  openssl
  libgtest-dev libgmock-dev libbenchmark-dev libfmt-dev
  libseccomp-dev libarchive-dev libbpf-dev bpftool clang llvm libclang-rt-14-dev
  busybox-static iproute2 crun runc bubblewrap
  # apparmor_parser: the sandbox tests compile generated profiles with it.
  apparmor
  python3-numpy
  # The trainer side (python/): PyTorch and pytest from Debian, and OpenBLAS,
  # which Debian's torch uses through libblas.so.3 (about 13x the reference
  # BLAS it falls back to without it).
  python3-torch python3-pytest libopenblas0-pthread
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
# Node.js runs the openai client tests; a node already on the PATH (any
# distribution, 18 or newer) will do.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
else
  echo "install-deps: installing ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: not root; run: sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The openai client tests' packages, exactly as package-lock.json pins them;
# skipped while node_modules is newer than the lock file.
openai_tests="$(cd "$(dirname "$0")/.." && pwd)/tests/openai"
if [ ! -f "$openai_tests/node_modules/.package-lock.json" ] ||
   [ "$openai_tests/package-lock.json" -nt "$openai_tests/node_modules/.package-lock.json" ]; then
  echo "install-deps: npm ci in tests/openai"
  (cd "$openai_tests" && npm ci --no-audit --no-fund --loglevel=error)
fi
