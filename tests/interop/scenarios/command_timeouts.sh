# f. Command timeouts: the LUN's store holds some writes longer than the disk's SCSI timeout. The
# kernel aborts them (ABORT TASK) and retries; a retry that times out again sends its error
# handler to LOGICAL UNIT RESET. The gateway answers each once the held writes have landed, so
# nothing hangs, the session is never dropped, the disk stays online and fio's verify passes.
# A retry carries the data of the write it retries, so fio cannot see a held write land after the
# abort or reset was answered. The held writes touch byte HELD_OFFSET and leave the store HOLD_MS
# after they arrived: the scenario writes that block again, with other data, once fio is done, and
# reads it once no held write could still be waiting. A gateway that answered ABORT TASK or
# LOGICAL UNIT RESET before its held write left the store shows fio's data there.
# Env: PORTAL TARGET SCSI_TIMEOUT ABORT_TIMEOUT FIO_SIZE HELD_OFFSET HOLD_MS.
. /suite/lib.sh

iscsiadm -m discovery -t sendtargets -p "$PORTAL" >/dev/null
iscsiadm -m node -T "$TARGET" -p "$PORTAL" -o update -n node.session.err_timeo.abort_timeout -v "$ABORT_TIMEOUT"
iscsiadm -m node -T "$TARGET" -p "$PORTAL" --login
disk=$(disk_of "$TARGET")
echo "$SCSI_TIMEOUT" >"/sys/block/$disk/device/timeout"
# libiscsi's error-handler trace ("aborting [sc", "LU Reset", "dev reset result") goes to the
# kernel log: it is what shows, from this side, which task management the kernel sent.
echo 1 >/sys/module/libiscsi/parameters/debug_libiscsi_eh
say "logged in, LUN 0 is $disk, SCSI timeout ${SCSI_TIMEOUT}s, abort timeout ${ABORT_TIMEOUT}s"

ua() { dmesg | grep -c "Power-on or device reset occurred" || true; }
ua_before=$(ua)
start=$(date +%s)
fio_verify "/dev/$disk" "$FIO_SIZE"
say "fio took $(($(date +%s) - start))s"
# Every held write (the first and its retry) arrived before fio ended.
held_until=$(after_ms "$HOLD_MS")
dd if=/dev/urandom of=/tmp/after bs=4096 count=1 status=none
dd if=/tmp/after of="/dev/$disk" bs=4096 count=1 seek=$((HELD_OFFSET / 4096)) oflag=direct \
  status=none || fail "the write after fio's"
echo 0 >/sys/module/libiscsi/parameters/debug_libiscsi_eh

expect_eq "device state" "$(cat "/sys/block/$disk/device/state")" running
aborts=$(dmesg | grep -c "iscsi_eh_abort aborting \[sc" || true)
resets=$(dmesg | grep -c "iscsi_eh_device_reset LU Reset" || true)
say "the error handler sent $aborts ABORT TASK and $resets LOGICAL UNIT RESET"
[ "$aborts" -ge 1 ] || fail "the kernel sent no ABORT TASK"
[ "$resets" -ge 1 ] || fail "the kernel sent no LOGICAL UNIT RESET"
# SAM-5 6.3: after a LOGICAL UNIT RESET the next command meets a unit attention (29h/00h).
[ "$(ua)" -gt "$ua_before" ] || fail "no unit attention after the LOGICAL UNIT RESET"
! dmesg | grep -q "dev reset result = FAILED" || fail "a LOGICAL UNIT RESET failed"
! dmesg | grep -q "abort failed" || fail "an ABORT TASK failed"
! dmesg | grep -q "detected conn error" || fail "the kernel dropped the connection"
say "waiting $(ms_until "$held_until") ms for the held writes' store delay to run out"
sleep_until "$held_until"
dd if="/dev/$disk" of=/tmp/back bs=4096 count=1 skip=$((HELD_OFFSET / 4096)) iflag=direct \
  status=none
cmp /tmp/after /tmp/back || fail "a held write landed after the ABORT TASK or LUN RESET"
say "no held write landed after the task management that ended it"
step fio-done
iscsiadm -m node -T "$TARGET" -p "$PORTAL" --logout
