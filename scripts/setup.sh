#!/usr/bin/env bash
# Installs the Debian 12 packages diskformer builds against, then configures and builds it in ./build.
# Usage: scripts/setup.sh            (as root, or with sudo available)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev liburing-dev libpcre2-dev libcurl4-openssl-dev libcpp-httplib-dev
  nginx-light clang libclang-rt-14-dev
  chromium
)
# The server's client tests run node (Debian's, unless one is installed already).
command -v node >/dev/null || packages+=(nodejs)
command -v npm >/dev/null || packages+=(npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The clients the server's tests drive (the openai package, playwright-core for chromium), at the versions of
# tests/server/node/package-lock.json; the tests skip where they are absent.
npm ci --prefix tests/server/node --no-audit --no-fund --loglevel=error || echo "npm ci failed: the client tests will skip"

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
echo "built: build/diskformer"
