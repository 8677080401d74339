# g. dm-multipath over two portals with tests/interop/multipath.conf: SendTargets returns both
# advertised portals, a session to each gives two sd devices with one WWID, multipathd makes one
# map of them with both paths active, and fio verify on the map goes on through two path losses,
# after each of which the path returns and carries I/O again: the host killing one session
# (iscsigwctl session kill), then a network partition of one path.
# Env: PORTALS ("A B"), TARGET, LUN_BYTES.
. /suite/lib.sh

p1=${PORTALS%% *}
p2=${PORTALS##* }
found=$(iscsiadm -m discovery -t sendtargets -p "$p1" | sort)
say "discovered: $found"
expect_eq "SendTargets" "$found" "$(printf '%s,1 %s\n%s,1 %s\n' "$p1" "$TARGET" "$p2" "$TARGET" | sort)"

for p in "$p1" "$p2"; do
  # Short NOP-Out timers notice a dead connection within seconds; replacement_timeout is what
  # multipathd replaces with fast_io_fail_tmo (5), so a value of 10 here shows that it did.
  iscsiadm -m node -T "$TARGET" -p "$p" -o update -n node.session.timeo.replacement_timeout -v 10
  iscsiadm -m node -T "$TARGET" -p "$p" -o update -n 'node.conn[0].timeo.noop_out_interval' -v 2
  iscsiadm -m node -T "$TARGET" -p "$p" -o update -n 'node.conn[0].timeo.noop_out_timeout' -v 5
  iscsiadm -m node -T "$TARGET" -p "$p" --login
done
sessions=$(sessions_of "$TARGET")
expect_eq "sessions" "$(echo $sessions | wc -w)" 2
disks=""
for s in $sessions; do disks="$disks $(session_disk "$s")"; done
set -- $disks
say "paths: $*"
for d in "$@"; do
  read -r vendor <"/sys/block/$d/device/vendor"
  read -r model <"/sys/block/$d/device/model"
  expect_eq "$d vendor" "$vendor" "ISCSIGW"
  expect_eq "$d model" "$model" "iscsigw-lun"
done
# Implicit ALUA (TPGS=1): one target port group, the gateway's, active/optimized on every path.
expect_eq "$1 TPGS" "$(sg_inq "/dev/$1" | grep -o 'TPGS=[0-9]')" "TPGS=1"
for d in "$@"; do
  expect_eq "$d ALUA state" "$(sg_rtpg -d "/dev/$d" | grep -o 'active/optimized' | sort -u)" \
    "active/optimized"
done
wwid=$(/lib/udev/scsi_id -g -u "/dev/$1")
expect_eq "WWID of $2" "$(/lib/udev/scsi_id -g -u "/dev/$2")" "$wwid"

mkdir -p /etc/multipath/conf.d
cp /suite/multipath.conf /etc/multipath/conf.d/iscsigw.conf
cat >/etc/multipath.conf <<'EOF'
defaults {
	user_friendly_names yes
	find_multipaths yes
}
EOF
multipathd
# Polls `multipathd show paths` until both paths are in map $1 active and ready, or $2 seconds.
both_paths_active() {
  n=0
  while :; do
    up=$(multipathd show paths raw format "%m %t %T" 2>/dev/null | grep -c "^$1 active ready" || true)
    [ "$up" = 2 ] && return 0
    n=$((n + 1))
    [ "$n" -le $(($2 * 10)) ] \
      || { multipathd show paths; fail "map $1 has $up of 2 paths active after $2 s"; }
    sleep 0.1
  done
}
n=0
until map=$(multipathd show maps raw format "%n %w" 2>/dev/null | awk -v w="$wwid" '$2 == w { print $1 }') \
    && [ -n "$map" ]; do
  n=$((n + 1))
  [ "$n" -le 600 ] || { multipath -ll; fail "no multipath map for $wwid"; }
  sleep 0.1
done
both_paths_active "$map" 60
# udev makes /dev/mapper/NAME (55-dm.rules) after multipathd has loaded the table.
n=0
until [ -b "/dev/mapper/$map" ]; do
  n=$((n + 1))
  [ "$n" -le 600 ] || fail "no /dev/mapper/$map"
  sleep 0.1
done
expect_eq "map size (512-byte sectors)" "$(blockdev --getsz "/dev/mapper/$map")" "$((LUN_BYTES / 512))"
# The device section took effect: one group (multibus) under its selector, queueing while no path
# is left (no_path_retry), and fast_io_fail_tmo written into each session's recovery_tmo.
ll=$(multipath -ll "$map")
expect_eq "path groups" "$(echo "$ll" | grep -c "policy=")" 1
expect_eq "path selector" "$(echo "$ll" | grep -o "policy='[^']*'")" "policy='service-time 0'"
expect_eq "features" "$(echo "$ll" | grep -o "features='[^']*'")" "features='1 queue_if_no_path'"
for s in $sessions; do expect_eq "$s recovery_tmo" "$(cat /sys/class/iscsi_session/$s/recovery_tmo)" 5; done


# Act one: the host kills one session (iscsigwctl session kill) under I/O; open-iscsi answers the
# logout request, logs in again, and the path is back in the map.
loop_start "/dev/mapper/$map"
more_passes 1 300 "before the kill"
step io-running
# The host answers once the killed session is logged in again.
both_paths_active "$map" 120
for s in $sessions; do expect_eq "$s state" "$(cat /sys/class/iscsi_session/$s/state)" "LOGGED_IN"; done
# A full pass after the return, and both paths took writes in it.
set -- $disks
w1=$(writes "$1")
w2=$(writes "$2")
more_passes 2 300 "after the kill"
[ "$(writes "$1")" -gt "$w1" ] && [ "$(writes "$2")" -gt "$w2" ] \
  || fail "a path took no writes after the kill"
say "after the kill: $1 took $(($(writes "$1") - w1)) writes, $2 took $(($(writes "$2") - w2))"

# Act two: a partition of one path (its portal's packets dropped both ways), longer than the
# NOP-Out timeout plus fast_io_fail_tmo. dm-multipath fails the path and I/O goes on through the
# other; once the partition heals open-iscsi logs in again and multipathd reinstates the path.
s1=$(echo $sessions | cut -d ' ' -f 1)
lost=$(session_disk "$s1")
kept=$2
[ "$lost" = "$1" ] || kept=$1
port=$(cat /sys/class/iscsi_connection/connection${s1#session}:0/persistent_port)
tc qdisc add dev eth0 root handle 1: prio
tc filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip dport "$port" 0xffff action drop
tc qdisc add dev eth0 ingress
tc filter add dev eth0 parent ffff: protocol ip prio 1 u32 match ip sport "$port" 0xffff action drop
t0=$(date +%s)
say "partitioned $lost (portal port $port)"
wait_path "$lost" failed 90
say "$lost failed after $(($(date +%s) - t0)) s"
w=$(writes "$kept")
more_passes 2 300 "with $lost partitioned"
[ "$(writes "$kept")" -gt "$w" ] || fail "$kept took no writes while $lost was partitioned"
tc qdisc del dev eth0 root
tc qdisc del dev eth0 ingress
t0=$(date +%s)
both_paths_active "$map" 180
say "$lost back in the map $(($(date +%s) - t0)) s after the partition healed"
w=$(writes "$lost")
more_passes 2 300 "after the partition"
[ "$(writes "$lost")" -gt "$w" ] || fail "$lost took no writes after the partition healed"
loop_stop "the kill and the partition"
multipathd show paths
