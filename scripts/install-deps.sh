#!/usr/bin/env bash
# Installs every package iscsigw needs to build, run and test, from Debian 12's apt.
# Idempotent: packages already present are left alone; apt-get update runs only when something is missing.
set -euo pipefail

build_pkgs=(
  build-essential cmake ninja-build pkg-config git
  libboost1.81-dev liburing-dev libisal-dev libssl-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  prometheus-cpp-dev libspdlog-dev libfmt-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  clang-format
)
test_pkgs=(
  libiscsi-bin tgt prometheus python3 procps
)

want=("${build_pkgs[@]}")
if [ "${1:-}" != "--build-only" ]; then
  want+=("${test_pkgs[@]}")
fi

missing=()
for p in "${want[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
