#!/usr/bin/env bash
# Installs the Debian packages Flashroll needs to build, test and benchmark.
# Idempotent: installs only what is missing. Never downloads anything but Debian packages.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config ccache git
  libyaml-cpp-dev nlohmann-json3-dev libcpp-httplib-dev libssl-dev libsqlite3-dev sqlite3
  libgtest-dev libgmock-dev libbenchmark-dev libfmt-dev
  libseccomp-dev libarchive-dev libbpf-dev bpftool clang llvm libclang-rt-14-dev
  busybox-static iproute2 crun runc bubblewrap
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: not root; run: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
