#!/bin/sh
# The guest's PID 1 after the boot stub (guest_image.sh): brings up what a node running open-iscsi
# has (udev, the network, iscsid, the initiator name), runs the scenario the host asked for, saves
# its exit status and the kernel log into the run directory, and powers the guest off.
#
# The host shares two directories over 9p: /suite (tests/interop, read-only) and /run/interop
# (this run's directory: `scenario` names the script, `env` sets its variables; the guest writes
# `result`, `dmesg` and the step files of lib.sh there).
#
# A series (`scenario` says "series", guest.py GuestSeries): one boot serves several scenarios in
# turn, each in a directory of its own that the host creates when it wants it run: s0, s1, ...
# with the same files (`scenario`, `env`; the guest writes `result`, `dmesg` and the steps
# there, lib.sh's $R). "poweroff" as a scenario ends the series. Between two scenarios every
# session is logged out and every node record deleted, as on a node after its last volume left.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root
R=/run/interop
exec </dev/null >/dev/ttyS0 2>&1

# A line on the console with the guest's uptime (as lib.sh's say).
say() { echo "interop: [$(cut -d' ' -f1 /proc/uptime)] $*"; }

# A result file appears whole (written aside, then renamed): the host polls for it over 9p and
# reads it as soon as it exists.
put_result() {
  echo "$2" >"$1/result.tmp"
  mv "$1/result.tmp" "$1/result"
}

# Saves the result and powers off. Should the power-off not come, PID 1 exits: the kernel panics
# (panic=-1 reboots at once) and QEMU, started with -no-reboot, ends. Nothing after a finish runs.
finish() {
  dmesg >"$R/dmesg" 2>&1
  put_result "$R" "$1"
  sync
  say "scenario exited $1"
  echo o >/proc/sysrq-trigger
  sleep 10
  exit "$1"
}

say "init started"
hostname iscsigw-guest
# The modules a scenario needs are loaded by name, not found by a coldplug of every device (the
# initrd loaded only the root disk's: guest_image.sh).
modprobe virtio_net
modprobe iscsi_tcp
modprobe sg
modprobe dm_multipath
ip link set lo up
ip link set eth0 up || finish 92
ip addr add 10.0.2.15/24 dev eth0
ip route add default via 10.0.2.2
# udev for what appears from here on (the sd devices of each login, dm-multipath's maps and their
# /dev/mapper and /dev/disk links); of the devices already there, only the disks and the network
# interface are announced. Replaying every device's add event costs a TCG guest 4-5 s per boot.
mkdir -p /run/udev /run/lock /var/lock
/lib/systemd/systemd-udevd --daemon
udevadm trigger --action=add --subsystem-match=block --subsystem-match=net
udevadm settle --timeout=30

. "$R/env"
# The build tree's binaries, when the test shares them (guest.py Guest bin_dir).
if [ -n "${BIN_SHARE:-}" ]; then
  mkdir -p "$BIN_SHARE"
  mount -t 9p -o trans=virtio,version=9p2000.L,ro bin "$BIN_SHARE" || finish 91
fi
echo "InitiatorName=$INITIATOR_NAME" >/etc/iscsi/initiatorname.iscsi
# Node-like timeouts from iscsid.conf; scenarios change them per record with iscsiadm.
iscsid || finish 90
say "iscsid started"
scenario=$(cat "$R/scenario")
if [ "$scenario" != series ]; then
  say "scenario $scenario starting"
  sh -eu "/suite/scenarios/$scenario.sh"
  finish $?
fi

n=0
while :; do
  S=$R/s$n
  until [ -e "$S/scenario" ]; do sleep 0.05; done
  scenario=$(cat "$S/scenario")
  [ "$scenario" != poweroff ] || finish 0
  say "scenario $scenario starting (series, $n)"
  rc=0
  (
    . "$S/env"
    export R=$S
    exec sh -eu "/suite/scenarios/$scenario.sh"
  ) || rc=$?
  say "scenario $scenario exited $rc"
  # What a scenario may leave behind that the next one must not meet.
  for m in $(awk '$2 ~ /^\/mnt\// { print $2 }' /proc/mounts); do umount -l "$m" || true; done
  iscsiadm -m node --logoutall=all >/dev/null 2>&1 || true
  iscsiadm -m node -o delete >/dev/null 2>&1 || true
  iscsiadm -m discoverydb -t sendtargets -o delete >/dev/null 2>&1 || true
  dmesg -c >"$S/dmesg" 2>&1
  sync
  put_result "$S" "$rc"
  n=$((n + 1))
done
