# d. Online resize: the host grows the LUN with iscsigwctl; a session rescan shows the new size and
# resize2fs grows the mounted file system, whose data survives. Env: PORTAL TARGET OLD_BYTES NEW_BYTES.
. /suite/lib.sh

iscsiadm -m discovery -t sendtargets -p "$PORTAL" >/dev/null
iscsiadm -m node -T "$TARGET" -p "$PORTAL" --login
d=$(disk_of "$TARGET")
expect_eq "size before" "$(($(cat /sys/block/$d/size) * 512))" "$OLD_BYTES"
mkdir -p /mnt/fs
mkfs.ext4 -q -F "/dev/$d"
mount "/dev/$d" /mnt/fs
dd if=/dev/urandom of=/mnt/fs/before bs=1M count=16 status=none
sync
before_kb=$(df -k --output=size /mnt/fs | tail -1)
step grow
iscsiadm -m session -R
i=0
while [ "$(($(cat /sys/block/$d/size) * 512))" != "$NEW_BYTES" ]; do
  i=$((i + 1))
  [ "$i" -le 100 ] || fail "size after rescan: $(($(cat /sys/block/$d/size) * 512)), want $NEW_BYTES"
  sleep 0.1
done
say "rescan shows $NEW_BYTES bytes"
resize2fs "/dev/$d"
after_kb=$(df -k --output=size /mnt/fs | tail -1)
[ "$after_kb" -gt $((before_kb * 3 / 2)) ] || fail "file system did not grow: $before_kb KiB -> $after_kb KiB"
say "ext4 grew online: $before_kb KiB -> $after_kb KiB"
dd if=/dev/urandom of=/mnt/fs/after bs=1M count=16 status=none
sync
sha=$(sha256sum /mnt/fs/before | cut -d' ' -f1)
umount /mnt/fs
e2fsck -fn "/dev/$d" || fail "e2fsck found errors after the online resize"
mount "/dev/$d" /mnt/fs
expect_eq "data written before the resize" "$(sha256sum /mnt/fs/before | cut -d' ' -f1)" "$sha"
umount /mnt/fs
iscsiadm -m node -T "$TARGET" -p "$PORTAL" --logout
