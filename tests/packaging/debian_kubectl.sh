#!/usr/bin/env bash
# Prints the path of Debian 12's kubectl (package kubernetes-client, 1.20 with kustomize v2.0.3),
# the one a fresh Debian machine has. When the kubectl on PATH is that package's, that is it;
# otherwise the package is downloaded from apt (not installed: it would replace the newer kubectl)
# and unpacked once under the packaging work directory.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
if k=$(command -v kubectl) && dpkg-query -S "$(readlink -f "$k")" 2>/dev/null | grep -q '^kubernetes-client:'; then
  echo "$k"
  exit 0
fi
dir="$pkg_work/kubernetes-client"
if [ ! -x "$dir/root/usr/bin/kubectl" ]; then
  rm -rf "$dir" && mkdir -p "$dir"
  # As root, apt's download sandbox user must be able to write here.
  if ! (cd "$dir" && apt-get download -o APT::Sandbox::User=root kubernetes-client >&2); then
    apt-get update -qq >&2
    (cd "$dir" && apt-get download -o APT::Sandbox::User=root kubernetes-client >&2)
  fi
  dpkg-deb -x "$dir"/kubernetes-client_*.deb "$dir/root"
fi
echo "$dir/root/usr/bin/kubectl"
