# b. File systems and data on the kernel initiator: what the kernel takes from the LUN's VPD pages
# matches what they promise; ext4 on a 512-byte-block LUN (0) and xfs on a 4096-byte-block LUN (1)
# carry an fio crc32c verify (random write, QD16, O_DIRECT) and check clean. Env: PORTAL TARGET.
. /suite/lib.sh

iscsiadm -m discovery -t sendtargets -p "$PORTAL" >/dev/null
iscsiadm -m node -T "$TARGET" -p "$PORTAL" --login

vpd_field() {  # vpd_field PAGE "Label" DISK: the number after "Label:" in sg_vpd's output
  sg_vpd -p "$1" "/dev/$3" | sed -n "s/^ *$2: *\([0-9]*\).*/\1/p"
}
q() { cat "/sys/block/$1/queue/$2"; }

check_limits() {  # check_limits DISK BLOCK
  d=$1
  bs=$2
  expect_eq "$d logical_block_size" "$(q "$d" logical_block_size)" "$bs"
  # SBC-3 6.5.3 Block Limits as the sd driver applies them.
  expect_eq "$d optimal_io_size (OPTIMAL TRANSFER LENGTH)" "$(q "$d" optimal_io_size)" \
    "$(($(vpd_field bl "Optimal transfer length" "$d") * bs))"
  expect_eq "$d minimum_io_size (OPTIMAL TRANSFER LENGTH GRANULARITY)" "$(q "$d" minimum_io_size)" \
    "$(($(vpd_field bl "Optimal transfer length granularity" "$d") * bs))"
  expect_eq "$d max_sectors_kb (capped at the optimal transfer)" "$(q "$d" max_sectors_kb)" \
    "$(($(vpd_field bl "Optimal transfer length" "$d") * bs / 1024))"
  expect_eq "$d write_zeroes_max_bytes (MAXIMUM WRITE SAME LENGTH)" "$(q "$d" write_zeroes_max_bytes)" \
    "$(($(sg_vpd -p bl "/dev/$d" | sed -n 's/^ *Maximum write same length: *\(0x[0-9a-f]*\).*/\1/p') * bs))"
  # SBC-3 6.5.4 Logical Block Provisioning: UNMAP supported, so the kernel discards with UNMAP.
  expect_eq "$d LBPU" "$(vpd_field lbpv "Unmap command supported (LBPU)" "$d")" 1
  expect_eq "$d provisioning_mode" "$(cat /sys/block/$d/device/scsi_disk/*/provisioning_mode)" unmap
  expect_eq "$d discard_max_bytes (MAXIMUM UNMAP LBA COUNT)" "$(q "$d" discard_max_bytes)" \
    "$(($(vpd_field bl "Maximum unmap LBA count" "$d") * bs))"
  gran=$(($(vpd_field bl "Optimal unmap granularity" "$d") * bs))
  [ "$gran" -ge "$(q "$d" physical_block_size)" ] || gran=$(q "$d" physical_block_size)
  expect_eq "$d discard_granularity (OPTIMAL UNMAP GRANULARITY)" "$(q "$d" discard_granularity)" "$gran"
  # SBC-3 6.5.2 Block Device Characteristics: MEDIUM ROTATION RATE 1, non-rotating.
  sg_vpd -p bdc "/dev/$d" | grep -q "Non-rotating medium" || fail "$d: VPD B1h does not say non-rotating"
  expect_eq "$d rotational" "$(q "$d" rotational)" 0
  # The caching mode page's WCE=1 (the gateway's default): the kernel must send SYNCHRONIZE CACHE.
  expect_eq "$d write_cache" "$(q "$d" write_cache)" "write back"
}

d0=$(disk_of "$TARGET" 0)
d1=$(disk_of "$TARGET" 1)
check_limits "$d0" 512
check_limits "$d1" 4096

mkdir -p /mnt/ext4 /mnt/xfs
mkfs.ext4 -q -F "/dev/$d0"
mount "/dev/$d0" /mnt/ext4
mkfs.xfs -q -f "/dev/$d1"
mount "/dev/$d1" /mnt/xfs
fio_verify /mnt/ext4/verify.dat "$FIO_SIZE"
fio_verify /mnt/xfs/verify.dat "$FIO_SIZE"
umount /mnt/ext4
umount /mnt/xfs
e2fsck -fn "/dev/$d0" || fail "e2fsck found errors on $d0"
xfs_repair -n "/dev/$d1" || fail "xfs_repair -n found errors on $d1"
say "ext4 and xfs check clean"
iscsiadm -m node -T "$TARGET" -p "$PORTAL" --logout
