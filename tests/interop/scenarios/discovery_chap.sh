# a. Discovery and login (and i. logout and cleanup): SendTargets (with discovery CHAP) returns the advertised portal, the
# discovered record logs in with CHAP and mutual CHAP set through iscsiadm's node.session.auth.*,
# a wrong secret is refused, and the LUN answers I/O. Env: PORTAL TARGET, CHAP_* secrets.
. /suite/lib.sh

iscsiadm -m discoverydb -t sendtargets -p "$PORTAL" -o new
iscsiadm -m discoverydb -t sendtargets -p "$PORTAL" -o update -n discovery.sendtargets.auth.authmethod -v CHAP
iscsiadm -m discoverydb -t sendtargets -p "$PORTAL" -o update -n discovery.sendtargets.auth.username -v "$DISC_USER"
iscsiadm -m discoverydb -t sendtargets -p "$PORTAL" -o update -n discovery.sendtargets.auth.password -v "$DISC_SECRET"
found=$(iscsiadm -m discoverydb -t sendtargets -p "$PORTAL" --discover)
say "discovered: $found"
# Only the advertised address, with the target's portal group tag: the guest cannot reach the
# 127.0.0.1 the gateway listens on.
expect_eq "SendTargets" "$found" "$PORTAL,1 $TARGET"

set_auth() {
  iscsiadm -m node -T "$TARGET" -p "$PORTAL" -o update -n node.session.auth.authmethod -v CHAP
  iscsiadm -m node -T "$TARGET" -p "$PORTAL" -o update -n node.session.auth.username -v "$CHAP_USER"
  iscsiadm -m node -T "$TARGET" -p "$PORTAL" -o update -n node.session.auth.password -v "$1"
  iscsiadm -m node -T "$TARGET" -p "$PORTAL" -o update -n node.session.auth.username_in -v "$MUTUAL_USER"
  iscsiadm -m node -T "$TARGET" -p "$PORTAL" -o update -n node.session.auth.password_in -v "$MUTUAL_SECRET"
}

# A wrong secret: the gateway fails the login (authentication failure), nothing is attached.
set_auth "wrong-secret-0123456789"
if iscsiadm -m node -T "$TARGET" -p "$PORTAL" --login; then fail "login with a wrong CHAP secret succeeded"; fi
[ -z "$(ls /sys/class/iscsi_session 2>/dev/null)" ] || fail "a session exists after the refused login"
say "wrong secret refused"

set_auth "$CHAP_SECRET"
iscsiadm -m node -T "$TARGET" -p "$PORTAL" --login
disk=$(disk_of "$TARGET")
say "logged in, LUN 0 is $disk"
expect_eq "capacity (512-byte sectors)" "$(cat /sys/block/$disk/size)" "$((LUN_BYTES / 512))"
dd if=/dev/urandom of=/tmp/pattern bs=4096 count=256 status=none
dd if=/tmp/pattern of=/dev/$disk bs=4096 oflag=direct status=none
dd if=/dev/$disk of=/tmp/back bs=4096 count=256 iflag=direct status=none
cmp /tmp/pattern /tmp/back || fail "read back differs from what was written"
say "1 MiB written and read back"
step logged-in
# i. Logout and cleanup: the session goes, the node and discovery records are deleted, and the
# host then finds the gateway's session gauges back at 0.
iscsiadm -m node -T "$TARGET" -p "$PORTAL" --logout
[ -z "$(ls /sys/class/iscsi_session 2>/dev/null)" ] || fail "a session is left after logout"
[ ! -e "/dev/$disk" ] || fail "/dev/$disk is left after logout"
iscsiadm -m node -T "$TARGET" -p "$PORTAL" -o delete
iscsiadm -m discoverydb -t sendtargets -p "$PORTAL" -o delete
if iscsiadm -m node >/dev/null 2>&1; then fail "node records are left after delete"; fi
say "logged out, records deleted"
step logged-out
