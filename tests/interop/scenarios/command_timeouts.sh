# f. Command timeouts: the LUN's store holds some writes longer than the disk's SCSI timeout. The
# kernel aborts them (ABORT TASK) and retries; a retry that times out again sends its error
# handler to LOGICAL UNIT RESET. The gateway answers each once the held writes have landed, so
# nothing hangs, the session is never dropped, the disk stays online and fio's verify passes.
# Env: PORTAL TARGET SCSI_TIMEOUT ABORT_TIMEOUT FIO_SIZE.
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
step fio-done
iscsiadm -m node -T "$TARGET" -p "$PORTAL" --logout
