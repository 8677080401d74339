# e. Recovery from a stalled gateway: with NOP-Out every 2 s and a 2 s NOP timeout, the host stops
# the gateway (SIGSTOP) in the middle of fio's verified random writes for longer than that. The
# kernel drops the connection, logs in again (session reinstatement) and retries what was in
# flight; the session and its disk are the same afterwards and fio's verify passes.
# A retry carries the data of the write it retries, so fio cannot see the write the gateway still
# held land after it. Beside fio, one write is held: the store starts the first write touching
# byte HELD_OFFSET HOLD_MS late (the host's fault injection), and it is in the gateway when the
# gateway stops. The reinstated session's login may be answered only once it has left the store
# (RFC 7143 6.3.5); the scenario then writes that block again, with other data, as soon as the
# retry has completed, and reads it once the held write could no longer be waiting: a gateway
# that answered the login before the held write left the store shows the old data.
# Env: PORTAL TARGET FIO_SIZE FIO_RATE HELD_OFFSET HOLD_MS.
. /suite/lib.sh

login_for_recovery
node() { iscsiadm -m node -T "$TARGET" -p "$PORTAL" "$@"; }
disk=$(disk_of "$TARGET")
# The iSCSI session (sessionN) the disk hangs from.
session_of() {
  for d in /sys/class/iscsi_session/session*/device/target*/*/block/"$1"; do
    [ -e "$d" ] && { s=${d%%/device/*}; basename "$s"; return 0; }
  done
  fail "no session for $1"
}
session=$(session_of "$disk")
say "logged in, LUN 0 is $disk on $session"

# The write phase is paced (FIO_RATE IOPS) so that it is still running when the gateway stops.
fio --name=verify --filename="/dev/$disk" --size="$FIO_SIZE" --rw=randwrite --bs=4k --iodepth=16 \
  --ioengine=libaio --direct=1 --verify=crc32c --verify_fatal=1 --do_verify=1 \
  --rate_iops="$FIO_RATE" --output-format=terse --minimal >/tmp/fio.out 2>&1 &
fio=$!
writes() { awk '{ print $5 }' "/sys/block/$disk/stat"; }
# wait_writes N: until N writes have completed on the disk.
wait_writes() {
  i=0
  while [ "$(writes)" -lt "$1" ]; do
    i=$((i + 1))
    [ "$i" -le 600 ] || fail "fewer than $1 writes completed in 60s"
    sleep 0.1
  done
}
wait_writes 100
# The held write, then 100 more of fio's: they were sent after it on the same connection, so the
# gateway has received it when they complete (and stops with it in the store).
dd if=/dev/urandom of=/tmp/held bs=4096 count=1 status=none
dd if=/dev/urandom of=/tmp/after bs=4096 count=1 status=none
block_write() {
  dd if="$1" of="/dev/$disk" bs=4096 count=1 seek=$((HELD_OFFSET / 4096)) oflag=direct status=none
}
block_write /tmp/held 2>/tmp/held.err &
held=$!
wait_writes 200
errors_before=$(dmesg | grep -c "detected conn error" || true)
step writing
# The host stopped the gateway before answering: the held write arrived before now, so it leaves
# the store before now + HOLD_MS.
held_until=$(after_ms "$HOLD_MS")
# The host has stopped the gateway. Within the NOP-Out interval and timeout (2 + 2 s) the kernel
# finds the connection dead and drops it; the gateway stays stopped until then.
i=0
while [ "$(dmesg | grep -c "detected conn error" || true)" -le "$errors_before" ]; do
  i=$((i + 1))
  [ "$i" -le 300 ] || fail "the kernel did not drop the connection to the stopped gateway in 30s"
  sleep 0.1
done
dmesg | grep -q "ping timeout of 2 secs expired" || fail "no NOP-Out ping timeout in dmesg"
kill -0 "$fio" 2>/dev/null || fail "fio ended while the gateway was stopped"
step dropped
wait "$held" || fail "the held write across the stall: $(cat /tmp/held.err)"
block_write /tmp/after || fail "the write after the held one"
say "the held write completed and its block was written again," \
  "$(ms_until "$held_until") ms before the held write's store delay runs out"
if ! wait "$fio"; then
  cat /tmp/fio.out
  fail "fio verify across the stall"
fi
say "fio verify across the stall passed"
sleep_until "$held_until"
dd if="/dev/$disk" of=/tmp/back bs=4096 count=1 skip=$((HELD_OFFSET / 4096)) iflag=direct status=none
cmp /tmp/after /tmp/back \
  || fail "the write held across the stall landed after the session was reinstated"
say "the held write did not land after the session was reinstated"

dmesg | grep -E "connection[0-9]+:0|session[0-9]+" | tail -n 20 || true
expect_eq "session after recovery" "$(session_of "$disk")" "$session"
expect_eq "session state" "$(cat /sys/class/iscsi_session/$session/state)" LOGGED_IN
expect_eq "device state" "$(cat "/sys/block/$disk/device/state")" running
node --logout
