# Shell helpers for the guest-side scenario scripts (tests/interop/scenarios/*.sh), which run with
# `sh -eu` inside the guest. The run directory $R is shared with the host test over 9p (in a
# series of scenarios on one boot, each scenario's own directory: guest_init.sh).
R=${R:-/run/interop}

# Each line carries the guest's uptime in seconds: where a scenario spends its time.
say() { echo "interop: [$(cut -d' ' -f1 /proc/uptime)] $*"; }
fail() {
  echo "interop: [$(cut -d' ' -f1 /proc/uptime)] FAIL: $*"
  exit 1
}

# Time as the guest's uptime in seconds. A store delay the host injects bounds when a write the
# gateway received can land: after_ms MS is the time MS from now, ms_until T the milliseconds left
# until T (negative once past), ms_since T those gone by since T, and sleep_until T waits for T,
# when every write received before the bound was taken has left the store.
now() { cut -d' ' -f1 /proc/uptime; }
after_ms() { echo "$(now) $1" | awk '{ printf "%.2f", $1 + $2 / 1000 }'; }
ms_until() { echo "$1 $(now)" | awk '{ printf "%d", ($1 - $2) * 1000 }'; }
ms_since() { echo "$((-$(ms_until "$1")))"; }
sleep_until() {
  left=$(ms_until "$1")
  [ "$left" -le 0 ] || sleep "$(echo "$left" | awk '{ printf "%.2f", $1 / 1000 }')"
}

# step NAME [SECONDS]: tells the host this point is reached, then waits until the host answers
# (tests/interop/guest.py Guest.step); the host's answer, if any, is printed.
step() {
  say "step $1"
  : >"$R/$1.ready"
  i=0
  while [ ! -e "$R/$1.go" ]; do
    i=$((i + 1))
    [ "$i" -le $((${2:-600} * 10)) ] || fail "host never answered step $1"
    sleep 0.1
  done
  cat "$R/$1.go"
}

# expect_eq WHAT GOT WANT
expect_eq() {
  [ "$2" = "$3" ] || fail "$1: got '$2', want '$3'"
  say "ok $1 = $2"
}

# The SCSI disk (sdX) behind the session logged in to target $1, LUN ${2:-0}, polled for udev.
disk_of() {
  i=0
  while :; do
    for d in /sys/class/iscsi_session/session*/device/target*/*:*:*:"${2:-0}"/block/*; do
      [ -e "$d" ] || continue
      s=${d%%/device/*}
      if [ "$(cat "$s/targetname")" = "$1" ]; then
        basename "$d"
        return 0
      fi
    done
    i=$((i + 1))
    [ "$i" -le 300 ] || fail "no disk for $1 LUN ${2:-0}"
    sleep 0.1
  done
}

# fio random write with crc32c verification at QD16, O_DIRECT, on file or device $1.
fio_verify() {
  fio --name=verify --filename="$1" --size="${2:-64M}" --rw=randwrite --bs=4k --iodepth=16 \
    --ioengine=libaio --direct=1 --verify=crc32c --verify_fatal=1 --do_verify=1 \
    ${3:-} --output-format=terse --minimal >/tmp/fio.out || { cat /tmp/fio.out; fail "fio verify on $1"; }
  say "fio verify on $1 passed"
}

# The iSCSI sessions (sessionN) logged in to target $1, one a line.
sessions_of() {
  for s in /sys/class/iscsi_session/session*; do
    [ -e "$s" ] && [ "$(cat "$s/targetname")" = "$1" ] && basename "$s"
  done
  return 0
}

# The SCSI disk (sdX) of session $1 (sessionN), LUN ${2:-0}, polled for udev.
session_disk() {
  i=0
  while :; do
    for d in /sys/class/iscsi_session/"$1"/device/target*/*:*:*:"${2:-0}"/block/*; do
      [ -e "$d" ] && { basename "$d"; return 0; }
    done
    i=$((i + 1))
    [ "$i" -le 300 ] || fail "no disk for $1 LUN ${2:-0}"
    sleep 0.1
  done
}

# Discovery and login to $TARGET through $PORTAL with the recovery timeouts the tests use: NOP-Out
# every 2 s, a 2 s NOP timeout, and 30 s for the kernel to re-establish the session.
login_for_recovery() {
  iscsiadm -m discovery -t sendtargets -p "$PORTAL" >/dev/null
  for kv in 'node.conn[0].timeo.noop_out_interval=2' 'node.conn[0].timeo.noop_out_timeout=2' \
    'node.session.timeo.replacement_timeout=30'; do
    iscsiadm -m node -T "$TARGET" -p "$PORTAL" -o update -n "${kv%%=*}" -v "${kv#*=}"
  done
  iscsiadm -m node -T "$TARGET" -p "$PORTAL" --login
}

# fio verify passes on block device $1 (16 MiB each, written at QD16 and read back), one after
# another until loop_stop: I/O that spans each act of a scenario whatever its length. Each pass has
# a seed of its own, which orders its writes too (--randrepeat=0; fio's default keeps one order for
# every seed). fio checks a write job's block by the number of the write in its header, not by the
# seed (a job that only writes skips that check, fio 3.33 verify.c), so a write lost in pass N
# leaves pass N-1's block, written at another place in the order, which fails pass N's verify
# ("bad header numberio"), as does an old pass's write that lands late. A write that reaches the
# LUN twice within one pass (on a failed path, again on another) carries the same data and is no
# error.
# $2: more fio options. $3: a path prefix; pass N then logs every I/O's completion latency to
# ${3}_N_clat.1.log.
loop_start() {
  rm -f /tmp/stop /tmp/loop.ended
  echo 0 >/tmp/passes
  seed_base=$(($(date +%s) * 1000))
  (
    trap ': >/tmp/loop.ended' EXIT
    while [ ! -e /tmp/stop ]; do
      p=$(($(cat /tmp/passes) + 1))
      fio_verify "$1" 16M "--randseed=$((seed_base + p)) --randrepeat=0 ${2:-}${3:+ --write_lat_log=${3}_$p --log_avg_msec=0}"
      echo "$p" >/tmp/passes
    done
  ) &
  loop_pid=$!
}
passes() { cat /tmp/passes; }
# Waits until $1 more passes have completed since now, for at most $2 seconds ($3: what for).
more_passes() {
  want=$(($(passes) + $1))
  n=0
  until [ "$(passes)" -ge "$want" ]; do
    [ ! -e /tmp/loop.ended ] || { wait "$loop_pid" || true; fail "fio verify failed ($3)"; }
    n=$((n + 1))
    [ "$n" -le $(($2 * 10)) ] || fail "no fio pass completed in $2 s ($3)"
    sleep 0.1
  done
}
# Ends the loop after its current pass; fails if a pass failed ($1: what the passes spanned).
loop_stop() {
  : >/tmp/stop
  wait "$loop_pid" || fail "fio verify failed ($1)"
  say "$(passes) fio verify passes during $1"
}
writes() { awk '{ print $5 }' "/sys/block/$1/stat"; }  # field 5: write requests completed

# wait_path DISK STATE SECONDS: polls `multipathd show paths` until DISK's line starts with STATE
# (fields %t %T: dm state, checker state, e.g. "failed" or "active ready").
wait_path() {
  n=0
  until multipathd show paths raw format "%d %t %T" | grep -q "^$1 $2"; do
    n=$((n + 1))
    [ "$n" -le $(($3 * 10)) ] || { multipathd show paths; fail "$1 not $2 after $3 s"; }
    sleep 0.1
  done
}
