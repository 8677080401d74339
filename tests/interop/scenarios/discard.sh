# c. Discard: fstrim on a mounted ext4 turns into UNMAP, and the gateway's file gives the space
# back (the host reads iscsigw_store_allocated_bytes at the steps). Env: PORTAL TARGET.
. /suite/lib.sh

iscsiadm -m discovery -t sendtargets -p "$PORTAL" >/dev/null
iscsiadm -m node -T "$TARGET" -p "$PORTAL" --login
d=$(disk_of "$TARGET")
mkdir -p /mnt/fs
# nodiscard: space comes back through fstrim only, which is what this checks.
mkfs.ext4 -q -F -E nodiscard "/dev/$d"
mount -o nodiscard "/dev/$d" /mnt/fs
dd if=/dev/urandom of=/mnt/fs/data bs=1M count=96 oflag=direct status=none
sync
step written
rm /mnt/fs/data
sync
trimmed=$(fstrim -v /mnt/fs)
say "$trimmed"
step trimmed
umount /mnt/fs
e2fsck -fn "/dev/$d" || fail "e2fsck found errors after fstrim"
iscsiadm -m node -T "$TARGET" -p "$PORTAL" --logout
