# h. Persistent reservations from the Linux kernel side, in the order Pacemaker's fence_scsi issues
# them with sg_persist: two ifaces with their own initiator names give two I_T nexuses (two sd
# devices) to one LUN; each node registers its key (REGISTER AND IGNORE EXISTING KEY), one holds a
# Write Exclusive, Registrants Only reservation, the other fences it with PREEMPT AND ABORT, after
# which the fenced node's writes fail with RESERVATION CONFLICT; RELEASE and CLEAR end it. Round two
# fences a node while it is writing. The host checks the gateway's count of conflicts at the steps
# round-one and done.
# Env: PORTAL TARGET IQN_A IQN_B STORE_DELAY_MS.
. /suite/lib.sh

KEY_A=0x7a8b0001
KEY_B=0x7a8b0002
WERO="type: Write Exclusive, registrants only"
NO_KEYS="there are NO registered reservation keys"

for n in a b; do
  iscsiadm -m iface -I "if$n" -o new
  [ "$n" = a ] && name=$IQN_A || name=$IQN_B
  iscsiadm -m iface -I "if$n" -o update -n iface.initiatorname -v "$name"
done
iscsiadm -m discovery -t sendtargets -p "$PORTAL" -I ifa -I ifb >/dev/null
iscsiadm -m node -T "$TARGET" -p "$PORTAL" -I ifa --login
iscsiadm -m node -T "$TARGET" -p "$PORTAL" -I ifb --login
for s in $(sessions_of "$TARGET"); do
  case $(cat "/sys/class/iscsi_session/$s/initiatorname") in
    "$IQN_A") da=$(session_disk "$s") ;;
    "$IQN_B") db=$(session_disk "$s") ;;
  esac
done
[ -n "${da:-}" ] && [ -n "${db:-}" ] || fail "want a disk for each of $IQN_A and $IQN_B"
say "node A is $da, node B is $db"
expect_eq "WWID of $db" "$(/lib/udev/scsi_id -g -u "/dev/$db")" "$(/lib/udev/scsi_id -g -u "/dev/$da")"

# PERSISTENT RESERVE IN through disk $2 (--read-keys or --read-reservation), on one line. Opened
# read-only: closing a disk opened for writing makes udev probe it (its inotify watch), and the
# probe's reads would take the unit attentions this scenario looks for.
pr_in() {
  sg_persist --readonly --no-inquiry --in "$1" "/dev/$2" | sed 's/^ *//; s/  */ /g' | paste -sd ';'
}
# PERSISTENT RESERVE OUT through disk $1 with the rest of the arguments.
pr_out() {
  d=$1
  shift
  sg_persist --no-inquiry --out "$@" "/dev/$d" || fail "sg_persist --out $* on $d"
}
dd if=/dev/urandom of=/tmp/block bs=4096 count=1 status=none
# A 4 KiB O_DIRECT write at LBA 0 through the kernel's sd driver.
write() { dd if=/tmp/block of="/dev/$1" bs=4096 count=1 oflag=direct status=none 2>/tmp/dd.err; }
read4k() { dd if="/dev/$1" of=/dev/null bs=4096 count=1 iflag=direct status=none; }
# WRITE(10) of one block at LBA 8 by SG_IO, past the sd driver's retries: sg_raw's report.
raw_write() {
  dd if=/dev/zero of=/tmp/sector bs=512 count=1 status=none
  sg_raw -s 512 -i /tmp/sector "/dev/$1" 2a 00 00 00 00 08 00 00 01 00 2>&1 || true
}
conflicts() { dmesg | grep -c "reservation conflict" || true; }

for d in $da $db; do
  expect_eq "keys via $d" "$(pr_in --read-keys "$d")" "PR generation=0x0, $NO_KEYS"
done

# fence_scsi "on" for node A: register (ignoring any old key), then reserve as nobody holds it.
pr_out "$da" --register-ignore --param-sark="$KEY_A"
pr_out "$da" --reserve --param-rk="$KEY_A" --prout-type=5
expect_eq "reservation via $db" "$(pr_in --read-reservation "$db")" \
  "PR generation=0x1, Reservation follows:;Key=$KEY_A;scope: LU_SCOPE, $WERO"
# SBC-3 4.17 (table 13): under Write Exclusive, Registrants Only an I_T nexus that is not
# registered may read but not write.
read4k "$db" || fail "unregistered node B cannot read under A's reservation"
before=$(conflicts)
if write "$db"; then fail "unregistered node B wrote under A's Write Exclusive, Registrants Only"; fi
say "node B, unregistered: $(cat /tmp/dd.err)"
expect_eq "kernel saw a reservation conflict" "$(($(conflicts) > before))" 1
raw_write "$db" | grep -q "Reservation Conflict" || fail "WRITE from unregistered node B: $(raw_write "$db")"
write "$da" || fail "node A, the holder, cannot write: $(cat /tmp/dd.err)"

# fence_scsi "on" for node B: registered, B writes too.
pr_out "$db" --register-ignore --param-sark="$KEY_B"
write "$db" || fail "registered node B cannot write: $(cat /tmp/dd.err)"
for d in $da $db; do
  expect_eq "keys via $d" "$(pr_in --read-keys "$d")" \
    "PR generation=0x2, 2 registered reservation keys follow:;$KEY_A;$KEY_B"
done

# fence_scsi "off" for node A, from node B: PREEMPT AND ABORT A's key. B takes the reservation
# (SPC-4 5.13.11.4: the preempted key was the holder's). udev first finishes probing A's disk
# after A's last write, so that nothing but the check below sends A a command.
udevadm settle --timeout=60
pr_out "$db" --preempt-abort --param-rk="$KEY_B" --param-sark="$KEY_A" --prout-type=5
# SPC-4 5.13.11.4: the preempted nexus gets a unit attention, REGISTRATIONS PREEMPTED (2Ah/05h),
# reported to its next command (TEST UNIT READY here, by SG_IO so that the sd driver does not
# retry it away).
out=$(sg_raw --readonly "/dev/$da" 00 00 00 00 00 00 2>&1 || true)
echo "$out" | grep -q -i "Registrations preempted" \
  || fail "node A's first command after PREEMPT AND ABORT: $out"
say "node A: unit attention, registrations preempted"
for d in $da $db; do
  expect_eq "keys via $d" "$(pr_in --read-keys "$d")" \
    "PR generation=0x3, 1 registered reservation key follows:;$KEY_B"
  expect_eq "reservation via $d" "$(pr_in --read-reservation "$d")" \
    "PR generation=0x3, Reservation follows:;Key=$KEY_B;scope: LU_SCOPE, $WERO"
done
before=$(conflicts)
if write "$da"; then fail "fenced node A wrote after PREEMPT AND ABORT"; fi
say "node A, fenced: $(cat /tmp/dd.err)"
expect_eq "kernel saw a reservation conflict" "$(($(conflicts) > before))" 1
raw_write "$da" | grep -q "Reservation Conflict" || fail "WRITE from fenced node A: $(raw_write "$da")"
read4k "$da" || fail "fenced node A cannot read"
write "$db" || fail "node B, the new holder, cannot write: $(cat /tmp/dd.err)"
# A fenced node cannot take the reservation back without a key.
if sg_persist --no-inquiry --out --reserve --param-rk="$KEY_A" --prout-type=5 "/dev/$da" \
  >/tmp/pr.out 2>&1; then
  fail "fenced node A reserved with its preempted key"
fi
grep -q -i "reservation conflict" /tmp/pr.out || fail "RESERVE from fenced node A: $(cat /tmp/pr.out)"

# B releases, then clears every registration.
pr_out "$db" --release --param-rk="$KEY_B" --prout-type=5
expect_eq "reservation via $da" "$(pr_in --read-reservation "$da")" \
  "PR generation=0x3, there is NO reservation held"
pr_out "$db" --clear --param-rk="$KEY_B"
for d in $da $db; do
  expect_eq "keys via $d" "$(pr_in --read-keys "$d")" "PR generation=0x4, $NO_KEYS"
done
write "$da" || fail "node A cannot write once the reservation is cleared: $(cat /tmp/dd.err)"
# The host compares the gateway's count of RESERVATION CONFLICTs with the kernel's, which logs
# each one.
udevadm settle --timeout=60
conflicts >"$R/conflicts"
step round-one

# Round two, as fencing happens in a cluster: node B holds the reservation and is writing (fio,
# QD16) when node A fences it. PREEMPT AND ABORT aborts B's commands in the gateway; with TAS=0 in
# the control mode page they end without status (SAM-5), so B's sd driver times them out and
# recovers (ABORT TASK, LOGICAL UNIT RESET), its retries then conflicting. Once A's PREEMPT AND
# ABORT has completed no write of B may reach the LUN (SPC-4 5.13.11.2.4). The store starts each
# write STORE_DELAY_MS after it arrived (the host's fault injection), so B's aborted writes are
# still waiting when the fencing is answered, unless the gateway waits for them. A reads B's region
# as soon as the fencing is answered, before any such write could have left the store, and again
# once B's writer has ended (long after): any difference is a write of B that landed after
# PREEMPT AND ABORT completed. A fixed delay keeps the store's writes in order, so an overwrite by
# A could not show this: B's aborted writes would always land before it.
pr_out "$db" --register-ignore --param-sark="$KEY_B"
pr_out "$db" --reserve --param-rk="$KEY_B" --prout-type=5
pr_out "$da" --register-ignore --param-sark="$KEY_A"
echo 10 >"/sys/block/$db/device/timeout"
(
  trap ': >/tmp/fenced.ended' EXIT
  fio --name=fenced --filename="/dev/$db" --size=4M --rw=randwrite --bs=4k --iodepth=16 \
    --ioengine=libaio --direct=1 --time_based --runtime=600 --output-format=terse --minimal \
    >/tmp/fenced.out 2>&1
) &
fenced_pid=$!
writes_of() { awk '{ print $5 }' "/sys/block/$1/stat"; }
# Two queues' worth of writes have completed: B's queue is full of writes in the gateway.
w0=$(writes_of "$db")
n=0
until [ $(($(writes_of "$db") - w0)) -ge 32 ]; do
  n=$((n + 1))
  [ "$n" -le 600 ] || fail "node B's writer did not start"
  sleep 0.1
done
t0=$(now)
settled=$(after_ms "$STORE_DELAY_MS")
pr_out "$da" --preempt-abort --param-rk="$KEY_A" --param-sark="$KEY_B" --prout-type=5
dd if="/dev/$da" of=/tmp/region.fenced bs=1M count=4 iflag=direct status=none \
  || fail "fenced node B's region cannot be read"
say "node A fenced node B and read its region in $(ms_since "$t0") ms," \
  "B had written $(($(writes_of "$db") - w0)) times"
n=0
until [ -e /tmp/fenced.ended ]; do
  n=$((n + 1))
  [ "$n" -le 1800 ] || fail "node B's writer still running 180 s after it was fenced"
  sleep 0.1
done
rc=0
wait "$fenced_pid" || rc=$?
say "node B's writer ended $(ms_since "$t0") ms after the fencing, status $rc:" \
  "$(grep -v '^3;' /tmp/fenced.out | head -3)"
[ "$rc" -ne 0 ] || fail "fenced node B's writer finished without an error"
# Every write the fencing aborted arrived before t0, so it leaves the store before t0 plus the
# delay; B's writer ends after its SCSI timeout (10 s), by when that has passed.
sleep_until "$settled"
dd if="/dev/$da" of=/tmp/region.later bs=1M count=4 iflag=direct status=none
cmp /tmp/region.fenced /tmp/region.later \
  || fail "a write of fenced node B reached the LUN after PREEMPT AND ABORT completed"
say "no write of fenced node B landed after the fencing"
# The new holder writes B's region.
dd if=/dev/urandom of=/tmp/region bs=1M count=4 status=none
dd if=/tmp/region of="/dev/$da" bs=1M oflag=direct status=none || fail "node A, the new holder, cannot write"
dd if="/dev/$da" of=/tmp/region.back bs=1M count=4 iflag=direct status=none
cmp /tmp/region /tmp/region.back || fail "node A's write of B's region did not read back"
pr_out "$da" --release --param-rk="$KEY_A" --prout-type=5
pr_out "$da" --clear --param-rk="$KEY_A"
expect_eq "keys via $db" "$(pr_in --read-keys "$db")" "PR generation=0x8, $NO_KEYS"
conflicts >"$R/conflicts"
step done
