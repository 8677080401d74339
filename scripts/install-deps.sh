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
  python3-minimal  # configure: tests/CMakeLists.txt registers the Python tests
)
test_pkgs=(
  libiscsi-bin tgt prometheus python3 procps
  # The kernel initiator tests (tests/interop): a Debian 12 guest under QEMU, its root file
  # system made with debootstrap and mkfs.ext4 -d.
  qemu-system-x86 debootstrap e2fsprogs
  # scripts/fuzz.sh: libFuzzer and the sanitizer runtimes.
  clang-14 libclang-rt-14-dev
)

# Manifest checks (tests/packaging/check_manifests.sh, also a ctest test): kustomize output and
# the Helm chart rendered with Go text/template + sprig, yamllint, API schema validation (npm).
manifest_pkgs=(
  yamllint python3-yaml nodejs
  golang-go golang-github-masterminds-sprig-dev golang-k8s-sigs-yaml-dev
  golang-github-xeipuuv-gojsonschema-dev
)
# A Node.js that bundles npm, or a kubectl from elsewhere, is kept: Debian's only when missing.
command -v npm >/dev/null 2>&1 || manifest_pkgs+=(npm)
command -v kubectl >/dev/null 2>&1 || manifest_pkgs+=(kubernetes-client)
# Container checks (tests/packaging/run_all.sh): image build and run, podman kube play.
packaging_pkgs=(
  podman buildah runc catatonit debootstrap uidmap python3-grpcio
)

# Benchmarks (tests/bench, not part of the tests): tgtd to compare against, fio for the device.
bench_pkgs=(
  tgt fio libiscsi-bin
)

# --build-only: what compiling needs (the Dockerfile's build stage uses it).
# --packaging: everything, plus the container tools.
# --bench: everything, plus what the benchmarks drive.
want=("${build_pkgs[@]}")
if [ "${1:-}" != "--build-only" ]; then
  want+=("${test_pkgs[@]}" "${manifest_pkgs[@]}")
fi
if [ "${1:-}" = "--packaging" ]; then
  want+=("${packaging_pkgs[@]}")
fi
if [ "${1:-}" = "--bench" ]; then
  want+=("${bench_pkgs[@]}")
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
