# e. Recovery from a stalled gateway: with NOP-Out every 2 s and a 2 s NOP timeout, the host stops
# the gateway (SIGSTOP) in the middle of fio's verified random writes for longer than that. The
# kernel drops the connection, logs in again (session reinstatement) and retries what was in
# flight; the session and its disk are the same afterwards and fio's verify passes.
# Env: PORTAL TARGET FIO_SIZE FIO_RATE.
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
i=0
while [ "$(writes)" -lt 200 ]; do
  i=$((i + 1))
  [ "$i" -le 600 ] || fail "fio wrote nothing in 60s"
  sleep 0.1
done
errors_before=$(dmesg | grep -c "detected conn error" || true)
step writing
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
if ! wait "$fio"; then
  cat /tmp/fio.out
  fail "fio verify across the stall"
fi
say "fio verify across the stall passed"

dmesg | grep -E "connection[0-9]+:0|session[0-9]+" | tail -n 20 || true
expect_eq "session after recovery" "$(session_of "$disk")" "$session"
expect_eq "session state" "$(cat /sys/class/iscsi_session/$session/state)" LOGGED_IN
expect_eq "device state" "$(cat "/sys/block/$disk/device/state")" running
node --logout
