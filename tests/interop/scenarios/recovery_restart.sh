# e. Recovery from a gateway killed (SIGKILL) during I/O and started again on the same state
# directory and portal: the kernel reconnects by itself, the ext4 mounted on the LUN goes on
# working (fio's verified writes to a file on it run across the restart; files written before and
# after it read back intact from the disk), and e2fsck finds the file system clean.
# Env: PORTAL TARGET FIO_SIZE FIO_RATE.
. /suite/lib.sh

login_for_recovery
node() { iscsiadm -m node -T "$TARGET" -p "$PORTAL" "$@"; }
disk=$(disk_of "$TARGET")
say "logged in, LUN 0 is $disk"
mkfs.ext4 -q "/dev/$disk"
mkdir -p /mnt/lun
mount "/dev/$disk" /mnt/lun

# write_files PREFIX: eight 1 MiB files of random data, their checksums kept outside the LUN.
write_files() {
  for n in 1 2 3 4 5 6 7 8; do
    dd if=/dev/urandom of="/mnt/lun/$1.$n" bs=64k count=16 status=none
  done
  (cd /mnt/lun && sha256sum "$1".*) >>/tmp/sums
}
write_files before
sync

# The write phase is paced (FIO_RATE IOPS) so that it is still running when the gateway dies.
fio --name=verify --filename=/mnt/lun/fio.dat --size="$FIO_SIZE" --rw=randwrite --bs=4k \
  --iodepth=16 --ioengine=libaio --direct=1 --verify=crc32c --verify_fatal=1 --do_verify=1 \
  --rate_iops="$FIO_RATE" --output-format=terse --minimal >/tmp/fio.out 2>&1 &
fio=$!
writes() { awk '{ print $5 }' "/sys/block/$disk/stat"; }
start=$(writes)
i=0
while [ "$(writes)" -lt $((start + 200)) ]; do
  i=$((i + 1))
  [ "$i" -le 600 ] || fail "fio wrote nothing in 60s"
  sleep 0.1
done
errors_before=$(dmesg | grep -c "detected conn error" || true)
kill -0 "$fio" 2>/dev/null || fail "fio ended before the gateway was killed"
step writing
# The host killed the gateway and started it again.
i=0
while [ "$(dmesg | grep -c "detected conn error" || true)" -le "$errors_before" ]; do
  i=$((i + 1))
  [ "$i" -le 300 ] || fail "the kernel did not notice the killed gateway in 30s"
  sleep 0.1
done
if ! wait "$fio"; then
  cat /tmp/fio.out
  fail "fio verify across the restart"
fi
say "fio verify across the restart passed"
dmesg | grep -E "connection[0-9]+:0|session[0-9]+" | tail -n 20 || true
expect_eq "device state" "$(cat "/sys/block/$disk/device/state")" running
step reconnected

write_files after
sync
# What is read back now comes from the LUN, not from the page cache.
echo 3 >/proc/sys/vm/drop_caches
(cd /mnt/lun && sha256sum -c --quiet /tmp/sums) || fail "files differ from what was written"
say "16 files read back intact"
umount /mnt/lun
e2fsck -fn "/dev/$disk" || fail "e2fsck -fn /dev/$disk exited $?"
say "e2fsck clean"
node --logout
