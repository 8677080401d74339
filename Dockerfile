# iscsigw container image: iscsigwd (the gateway), iscsigwctl (its gRPC client) and iscsigw-csi
# (the CSI driver iscsi.iscsigw.io, which the Helm chart runs with csi.enabled).
#
#   podman build --format docker -t iscsigw:dev .      (docker build -t iscsigw:dev . works too)
#
# VERSION and REVISION (build arguments) label the image; REVISION is also the commit the binaries
# report (--version, iscsigw_build_info), which they cannot learn here otherwise: the context leaves
# .git out. Without it they say "unknown". tests/packaging/build_image.sh passes both, VERSION
# from CMakeLists.txt and REVISION as `git rev-parse --short=12 HEAD`.
#
# Stage 1 builds with the same install script as the README; stage 2 is bookworm-slim with only the
# shared libraries the binaries link (found with ldd + dpkg -S, so a new library dependency is
# picked up without editing this file). --format docker keeps HEALTHCHECK, which the OCI image
# format has no field for. tests/packaging/container_test.sh builds and drives this image.
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${BASE_IMAGE} AS build
ARG BUILD_TYPE=Release
ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /src
# The dependency layer only changes when the install script does.
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN scripts/install-deps.sh --build-only && rm -rf /var/lib/apt/lists/*
COPY . .
ARG REVISION=
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE} -DISCSIGW_COMMIT=${REVISION} \
 && cmake --build /build --target iscsigwd iscsigwctl iscsigw-csi \
 && install -d /out/bin \
 && install -m 0755 -s /build/bin/iscsigwd /build/bin/iscsigwctl /build/bin/iscsigw-csi /out/bin/ \
 && for lib in $(ldd /out/bin/* | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u); do \
      dpkg -S "$lib" 2>/dev/null || dpkg -S "$(readlink -f "$lib")" 2>/dev/null \
        || dpkg -S "$(readlink -f "$lib" | sed 's|^/usr||')" \
        || { echo "no package owns $lib" >&2; exit 1; }; \
    done | cut -d: -f1 | sort -u > /out/runtime-packages \
 && echo "runtime packages: $(tr '\n' ' ' < /out/runtime-packages)"

FROM ${BASE_IMAGE}
ARG VERSION=dev
ARG REVISION=unknown
ARG CREATED=unknown
ARG SOURCE=
LABEL org.opencontainers.image.title="iscsigw" \
      org.opencontainers.image.description="iSCSI gateway: iscsigwd exports block volumes over iSCSI, managed over gRPC" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="docker.io/library/debian:bookworm-slim"
COPY --from=build /out/runtime-packages /usr/share/iscsigw/runtime-packages
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      $(cat /usr/share/iscsigw/runtime-packages) \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb \
 && groupadd --system --gid 10001 iscsigw \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/iscsigw --no-create-home \
      --shell /usr/sbin/nologin iscsigw \
 && install -d -o 10001 -g 10001 -m 0750 /var/lib/iscsigw
# iscsigw-csi --mode node runs iscsiadm, mount, mkfs and blkid on the node's host through nsenter
# (util-linux, part of every Debian image), so the image itself needs none of them.
COPY --from=build /out/bin/iscsigwd /out/bin/iscsigwctl /out/bin/iscsigw-csi /usr/local/bin/
COPY deploy/examples/demo.json /usr/share/iscsigw/demo.json
COPY LICENSE /usr/share/doc/iscsigw/LICENSE

# Every flag of iscsigwd has an ISCSIGW_* variable; these are the container defaults. gRPC listens
# on all interfaces so that Kubernetes' gRPC probes (which dial the pod IP) reach it, and without
# client certificates only because ISCSIGW_GRPC_INSECURE says so (docs/security.md): keep the port
# unpublished, or give ISCSIGW_TLS_CLIENT_CA as deploy/overlays/grpc-tls and helm/ (tls) do.
# File LUNs live only in ISCSIGW_LUN_DIR (and what ISCSIGW_BACKING_ALLOW adds; docs/security.md).
ENV ISCSIGW_STATE_DIR=/var/lib/iscsigw \
    ISCSIGW_LUN_DIR=/var/lib/iscsigw/luns \
    ISCSIGW_PORTAL=0.0.0.0:3260 \
    ISCSIGW_GRPC_LISTEN=0.0.0.0:50051 \
    ISCSIGW_GRPC_INSECURE=true \
    ISCSIGW_METRICS_LISTEN=0.0.0.0:9540 \
    ISCSIGW_LOG_FORMAT=json
VOLUME ["/var/lib/iscsigw"]
EXPOSE 3260/tcp 50051/tcp 9540/tcp
# 3260 is not a privileged port: no capability needed.
USER 10001:10001
WORKDIR /var/lib/iscsigw
# Asks the gateway over its own gRPC port (the port of ISCSIGW_GRPC_LISTEN, on loopback).
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
  CMD iscsigwctl --timeout 3 --server "127.0.0.1:${ISCSIGW_GRPC_LISTEN##*:}" gateway info >/dev/null || exit 1
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/iscsigwd"]
