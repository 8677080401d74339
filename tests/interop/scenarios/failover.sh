# h. Two gateways on one rbd image, dm-multipath by ALUA (tests/interop/multipath.conf): one path
# through each gateway, each its own target port group; once written, the holder of the image's
# exclusive lock is active/optimized and carries the I/O, the other stands by active/non-optimized.
# fio verify passes (O_DIRECT and O_SYNC: every write durable when it completes) run while the
# host kills the optimized gateway with -9: the I/O moves to the other path, which takes the lock
# over and becomes optimized, no verified write is lost, and the killed gateway's path comes back
# (non-optimized) when the host restarts it. The longest write fio saw is the I/O pause. Before
# that, sg_persist through one gateway's path fences writes through the other's.
# Env: PORTALS ("A B": gateway 1, gateway 2), TARGET, LUN_BYTES.
. /suite/lib.sh

p1=${PORTALS%% *}
p2=${PORTALS##* }
tag=0
for p in "$p1" "$p2"; do
  tag=$((tag + 1))  # each gateway's portal group tag is its gateway id
  expect_eq "SendTargets of $p" "$(iscsiadm -m discovery -t sendtargets -p "$p")" "$p,$tag $TARGET"
  iscsiadm -m node -T "$TARGET" -p "$p" -o update -n node.session.timeo.replacement_timeout -v 10
  iscsiadm -m node -T "$TARGET" -p "$p" -o update -n 'node.conn[0].timeo.noop_out_interval' -v 2
  iscsiadm -m node -T "$TARGET" -p "$p" -o update -n 'node.conn[0].timeo.noop_out_timeout' -v 5
  iscsiadm -m node -T "$TARGET" -p "$p" --login
done
# The disk behind the session to portal $1.
disk_via() {
  for s in $(sessions_of "$TARGET"); do
    c=/sys/class/iscsi_connection/connection${s#session}:0
    if [ "$(cat "$c/persistent_address"):$(cat "$c/persistent_port")" = "$1" ]; then
      session_disk "$s"
      return 0
    fi
  done
  fail "no session to $1"
}
d1=$(disk_via "$p1")
d2=$(disk_via "$p2")
say "gateway 1: $d1, gateway 2: $d2"
expect_eq "TPGS" "$(sg_inq "/dev/$d1" | grep -o 'TPGS=[0-9]')" "TPGS=1"
wwid=$(/lib/udev/scsi_id -g -u "/dev/$d1")
expect_eq "WWID of $d2" "$(/lib/udev/scsi_id -g -u "/dev/$d2")" "$wwid"
# group DISK: the target port group sg_rtpg reports; state DISK: its access state.
group() { sg_rtpg -d "/dev/$1" | sed -n 's/.*target port group id *: *0x\([0-9a-f]*\).*/\1/p'; }
state() {
  sg_rtpg -d "/dev/$1" | grep -o 'active/optimized\|active/non optimized' | head -n 1
}
expect_eq "$d1 target port group" "$(group "$d1")" 1
expect_eq "$d2 target port group" "$(group "$d2")" 2

# sg_persist fencing across the gateways. The two sessions are two I_T nexuses (one target port
# each): a Write Exclusive reservation taken through gateway 1 fences writes through gateway 2
# from the moment it completes; reads pass.
KEY=0xa1
pr_out() { sg_persist --no-inquiry --out "$@" || fail "sg_persist --out $*"; }
pr_out --register --param-sark=$KEY "/dev/$d1"
pr_out --reserve --param-rk=$KEY --prout-type=1 "/dev/$d1"
sg_persist --readonly --no-inquiry --in --read-reservation "/dev/$d2" >/tmp/pr.out
grep -q "Key=$KEY" /tmp/pr.out || fail "reservation via $d2: $(cat /tmp/pr.out)"
dd if=/dev/urandom of=/tmp/block bs=4096 count=1 status=none
write() { dd if=/tmp/block of="/dev/$1" bs=4096 count=1 oflag=direct status=none 2>/tmp/dd.err; }
if write "$d2"; then fail "a write through gateway 2 passed gateway 1's reservation"; fi
dd if=/dev/zero of=/tmp/sector bs=512 count=1 status=none
out=$(sg_raw -s 512 -i /tmp/sector "/dev/$d2" 2a 00 00 00 00 08 00 00 01 00 2>&1 || true)
echo "$out" | grep -q "Reservation Conflict" || fail "WRITE through gateway 2: $out"
dd if="/dev/$d2" of=/dev/null bs=4096 count=1 iflag=direct status=none || fail "no read via $d2"
write "$d1" || fail "the holder cannot write through gateway 1: $(cat /tmp/dd.err)"
pr_out --release --param-rk=$KEY --prout-type=1 "/dev/$d1"
pr_out --register --param-rk=$KEY --param-sark=0 "/dev/$d1"
write "$d2" || fail "no write through gateway 2 once released: $(cat /tmp/dd.err)"
say "a reservation through gateway 1 fenced writes through gateway 2"

mkdir -p /etc/multipath/conf.d
cp /suite/multipath.conf /etc/multipath/conf.d/iscsigw.conf
cat >/etc/multipath.conf <<'EOF'
defaults {
	user_friendly_names yes
	find_multipaths yes
}
EOF
multipathd
n=0
until map=$(multipathd show maps raw format "%n %w" 2>/dev/null | awk -v w="$wwid" '$2 == w { print $1 }') \
    && [ -n "$map" ] && [ -b "/dev/mapper/$map" ]; do
  n=$((n + 1))
  [ "$n" -le 600 ] || { multipath -ll; fail "no multipath map for $wwid"; }
  sleep 0.1
done
expect_eq "map size (512-byte sectors)" "$(blockdev --getsz "/dev/mapper/$map")" "$((LUN_BYTES / 512))"

# The first write takes the lock: its gateway stays optimized, the other becomes non-optimized,
# and multipathd splits the map into two path groups of priorities 50 and 10 (prio alua).
dd if=/dev/urandom of="/dev/mapper/$map" bs=64k count=16 oflag=direct,sync status=none
# Waits until the map has two path groups, the optimized one (prio 50) first, for $1 seconds.
groups_split() {
  n=0
  while :; do
    prios=$(multipath -ll "$map" | sed -n "s/.*policy='[^']*' prio=\([0-9]*\) status=\([a-z]*\).*/\1 \2/p" | tr '\n' ' ')
    case "$prios" in
      "50 active 10 enabled "|"50 enabled 10 enabled "|"10 enabled 50 active ") return 0 ;;
    esac
    n=$((n + 1))
    [ "$n" -le $(($1 * 10)) ] || { multipath -ll "$map"; fail "path groups '$prios' after $1 s"; }
    sleep 0.1
  done
}
groups_split 60
multipath -ll "$map"
if [ "$(state "$d1")" = "active/optimized" ]; then owner=$p1 owner_disk=$d1 standby=$d2; else owner=$p2 owner_disk=$d2 standby=$d1; fi
expect_eq "$standby access state" "$(state "$standby")" "active/non optimized"
expect_eq "$owner_disk access state" "$(state "$owner_disk")" "active/optimized"

# fio verify passes (lib.sh), durable writes (O_SYNC), each logging every write's latency.
rm -f /tmp/lat_*
loop_start "/dev/mapper/$map" --sync=1 /tmp/lat
more_passes 1 300 "before the kill"
w=$(writes "$standby")
more_passes 1 300 "before the kill"
expect_eq "writes through the non-optimized path" "$(($(writes "$standby") - w))" 0
before=$(passes)
echo "$owner" >"$R/owner"
step io-running
# The host has killed the gateway behind $owner. Its path fails; the I/O goes to the other.
wait_path "$owner_disk" failed 60
w=$(writes "$standby")
more_passes 2 300 "after the kill"
[ "$(writes "$standby")" -gt "$w" ] || fail "$standby took no writes after the kill"
expect_eq "$standby access state after the failover" "$(state "$standby")" "active/optimized"
step restart
# The host has restarted the killed gateway on its portal: its path returns, non-optimized.
wait_path "$owner_disk" "active ready" 180
expect_eq "$owner_disk access state after the restart" "$(state "$owner_disk")" "active/non optimized"
more_passes 1 300 "after the restart"
loop_stop "the failover"
total=$(passes)
# Verified writes of the passes from the one the kill fell in to the end; the longest of them.
lat=$(cat $(seq -f /tmp/lat_%g_clat.1.log $((before + 1)) "$total") \
  | awk -F', ' '$3 == 1 { n++; if ($2 > m) m = $2 } END { printf "%d %.3f", n, m / 1e9 }')
say "result: $total passes, $((total - before)) from the kill on: ${lat% *} verified writes, longest write ${lat#* } s"
echo "$lat" >"$R/result.failover"
multipath -ll "$map"
