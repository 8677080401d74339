#!/usr/bin/env bash
# Builds (once per machine) the Debian 12 guest that runs the Linux kernel initiator for
# tests/interop: a debootstrapped bookworm root with the kernel, open-iscsi and the tools the
# scenarios use, written into an ext4 disk image with `mkfs.ext4 -d` (no loop device), plus the
# kernel taken out of its /boot and an initrd of its own (below).
#
#   tests/interop/guest_image.sh        as root; prints the image directory on its last line
#
# The image is cached outside the build tree, in $ISCSIGW_INTEROP_CACHE (default
# /var/tmp/iscsigw-interop), under a key made of the package list, the guest's boot stub and its
# initrd's /init and modules, so a change to any of them builds a new one and nothing else does.
# Guests boot it with -snapshot, so it is never written. Scenarios themselves are not in the
# image: the guest mounts tests/interop over 9p.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

packages=(
  linux-image-amd64 open-iscsi e2fsprogs xfsprogs fio sg3-utils multipath-tools iproute2 kmod udev
  util-linux procps
  # The initrd's shell and tools (below): one static binary.
  busybox-static
  # iscsigw-csi's shared libraries: the node plugin runs in the guest (test_csi_lifecycle.py).
  libgrpc++1.51 libgrpc29 libprotobuf32 libspdlog1.10 libfmt9 libabsl20220623 libc-ares2 libre2-9
  libssl3
)

# PID 1 of the guest: mounts what the scenario driver needs, then hands over to it. Everything
# else (network, iscsid, the scenario) lives in tests/interop/guest_init.sh, read over 9p.
boot_stub='#!/bin/sh
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mkdir -p /dev/pts /run /tmp /suite /run/interop
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
mkdir -p /run/interop
modprobe 9pnet_virtio
mount -t 9p -o trans=virtio,version=9p2000.L,ro suite /suite
mount -t 9p -o trans=virtio,version=9p2000.L run /run/interop
exec /bin/sh /suite/guest_init.sh
'

# The initrd's /init. Debian's own initrd (initramfs-tools: every storage driver, udev, 37 MB
# compressed) takes a TCG guest 8 s to reach the root; this one loads the modules the root disk
# needs (/mods/order, in dependency order), mounts it and hands over to the boot stub, in under 1 s.
initrd_init='#!/bin/busybox sh
/bin/busybox mount -t devtmpfs dev /dev
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sys /sys
halt() { echo "initrd: $*"; /bin/busybox poweroff -f; }
for m in $(/bin/busybox cat /mods/order); do /bin/busybox insmod "/mods/$m" || halt "insmod $m failed"; done
i=0
while [ ! -b /dev/vda ]; do
  i=$((i + 1))
  [ "$i" -le 200 ] || halt "no /dev/vda"
  /bin/busybox usleep 50000
done
/bin/busybox mount -t ext4 /dev/vda /root || halt "cannot mount /dev/vda"
for d in dev proc sys; do /bin/busybox mount --move "/$d" "/root/$d"; done
exec /bin/busybox switch_root /root /sbin/interop-init
'
# What the root disk needs: virtio over PCI, the virtio block driver and ext4, with their
# dependencies (--show-depends); crc32c for ext4's checksums in its generic form too, whatever
# the CPU offers.
initrd_modules="crc32c_generic virtio_pci virtio_blk ext4"

cache=${ISCSIGW_INTEROP_CACHE:-/var/tmp/iscsigw-interop}
key=$(printf '%s\n' "${packages[@]}" "$boot_stub" "$initrd_init" "$initrd_modules" \
  | sha256sum | cut -c1-16)
dir="$cache/guest-$key"
if [ -f "$dir/.complete" ]; then
  echo "$dir"
  exit 0
fi
[ "$(id -u)" -eq 0 ] || { echo "guest_image.sh: needs root (debootstrap, chroot)" >&2; exit 1; }
for tool in debootstrap mkfs.ext4; do
  command -v "$tool" >/dev/null 2>&1 || { echo "guest_image.sh: $tool missing (scripts/install-deps.sh)" >&2; exit 1; }
done

mkdir -p "$cache"
# The mirror the host's apt uses, so the guest root comes from where the host's packages come.
mirror=$(grep -hoE 'https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null \
  | head -1 | tr -d ' ' || true)
mirror=${mirror:-http://deb.debian.org/debian}

work=$(mktemp -d "$cache/build.XXXXXX")
root="$work/root"
mounted=()
cleanup() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[$i]}" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
log="$cache/build-$key.log"
echo "guest_image.sh: building the guest image (log: $log)" >&2
start=$SECONDS
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$log" 2>&1 \
  || { tail -20 "$log" >&2; echo "guest_image.sh: debootstrap failed" >&2; exit 1; }
for m in proc sys dev dev/pts; do
  mount --bind "/$m" "$root/$m"; mounted+=("$root/$m")
done
cp /etc/resolv.conf "$root/etc/resolv.conf"
cat >"$root/etc/apt/sources.list" <<SRC
deb $mirror bookworm main
deb $mirror bookworm-updates main
SRC
if ! chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
  sh -c "apt-get update -qq && apt-get install -y -qq --no-install-recommends ${packages[*]} && apt-get clean" \
  >>"$log" 2>&1; then
  tail -20 "$log" >&2
  echo "guest_image.sh: package install failed" >&2
  exit 1
fi
for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[$i]}"; done
mounted=()

# The initrd: busybox, the modules of $initrd_modules with their dependencies, /init; an
# uncompressed cpio the kernel unpacks at once.
kver=$(basename "$(ls -d "$root"/lib/modules/*)")
initrd="$root/tmp/initrd"
mkdir -p "$initrd"/{bin,mods,dev,proc,sys,root}
cp "$root/bin/busybox" "$initrd/bin/busybox"
printf '%s' "$initrd_init" >"$initrd/init"
chmod 755 "$initrd/init"
# shellcheck disable=SC2086
chroot "$root" /sbin/modprobe -S "$kver" --all --show-depends $initrd_modules \
  | awk '$1 == "insmod" && !seen[$2]++ { print $2 }' >"$work/modules"
[ -s "$work/modules" ] || { echo "guest_image.sh: no modules for the initrd" >&2; exit 1; }
while read -r ko; do
  cp "$root$ko" "$initrd/mods/"
  basename "$ko" >>"$initrd/mods/order"
done <"$work/modules"
chroot "$root" /bin/sh -c 'cd /tmp/initrd && find . | /bin/busybox cpio -o -H newc' \
  >"$work/initrd.img" 2>>"$log"
[ -s "$work/initrd.img" ] || { echo "guest_image.sh: no initrd (log: $log)" >&2; exit 1; }
rm -rf "$initrd"

printf '%s' "$boot_stub" >"$root/sbin/interop-init"
chmod 755 "$root/sbin/interop-init"
echo "iscsigw-guest" >"$root/etc/hostname"
# The guest's own name is set per run (guest_init.sh); the package's generated one is removed so
# that no two images share it by accident.
rm -f "$root/etc/iscsi/initiatorname.iscsi"
rm -rf "$root/usr/share/doc" "$root/usr/share/man" "$root/usr/share/locale" "$root/var/lib/apt/lists"/*

mkdir -p "$work/out"
cp "$root"/boot/vmlinuz-* "$work/out/vmlinuz"
mv "$work/initrd.img" "$work/out/initrd.img"
mkfs.ext4 -q -F -L interop-root -d "$root" "$work/out/disk.img" 3G >>"$log" 2>&1 \
  || { tail -20 "$log" >&2; echo "guest_image.sh: mkfs.ext4 -d failed" >&2; exit 1; }
printf '%s\n' "${packages[@]}" >"$work/out/packages"
touch "$work/out/.complete"
rm -rf "$dir"
mv "$work/out" "$dir"
echo "guest_image.sh: built in $((SECONDS - start)) s" >&2
echo "$dir"
