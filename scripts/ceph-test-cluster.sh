#!/usr/bin/env bash
# A throwaway one-node Ceph cluster for tests: one mon and one OSD on 127.0.0.1, Debian 12's
# packaged daemons (ceph-mon, ceph-osd, ceph-common), data in RAM (memstore), no mgr, no auth.
#
#   scripts/ceph-test-cluster.sh start DIR   # last line of stdout: DIR/ceph.conf
#   scripts/ceph-test-cluster.sh stop DIR    # kills the daemons, waits for them; DIR can go
#
# Everything lives under DIR: the conf, the mon's store, the OSD's directory, logs, admin sockets,
# pid files. Nothing is read from or written to /etc/ceph, /var/lib/ceph or /var/run/ceph, so any
# number of clusters can run side by side, each in its own DIR and on its own ports. Clients use
# the cluster with `-c DIR/ceph.conf` (rados, rbd, ceph; librados' conf_read_file). It leaves a
# pool `rbd` with the rbd application enabled.
#
# start gives up after CEPH_TEST_START_TIMEOUT seconds (default 60), stops what it started and
# prints the tail of the daemons' logs. The OSD keeps its objects in RAM, capped at
# CEPH_TEST_MEMSTORE_BYTES (default 1 GiB): keep test images small.
set -euo pipefail

usage() {
  echo "usage: $0 start|stop DIR" >&2
  exit 2
}
[ $# -eq 2 ] || usage
cmd=$1
case "$cmd" in
  start) mkdir -p "$2" ;;
  stop) [ -d "$2" ] || exit 0 ;;
  *) usage ;;
esac
dir=$(cd "$2" && pwd)
conf=$dir/ceph.conf
start_timeout=${CEPH_TEST_START_TIMEOUT:-60}
memstore_bytes=${CEPH_TEST_MEMSTORE_BYTES:-$((1 << 30))}
# Ports a cluster takes: the mon's, then a window for the OSD's four msgr2 listeners (public,
# cluster, two heartbeats), which it picks from itself when it binds.
port_window=16

log() { echo "ceph-test-cluster: $*" >&2; }

now_ms() { date +%s%3N; }

# The pids of the daemons started with this DIR's conf (all of them, or those named $1: ceph-osd,
# ceph-mon): their pid files, and any process whose command line names the conf (a daemon that
# died before writing its pid file...). A zombie counts as gone: it holds no port or file, and
# this machine's init may take seconds to reap it.
cluster_pids() {
  local only=${1:-} f pid
  {
    for f in "$dir"/run/*.pid; do
      [ -f "$f" ] && cat "$f" 2>/dev/null
    done
    # One grep over every command line (-z: NUL-separated arguments, -x: the whole argument); it
    # finds itself too, hence the check of the name.
    for f in $(grep -lzxF -- "$conf" /proc/[0-9]*/cmdline 2>/dev/null); do
      pid=${f#/proc/}
      echo "${pid%/cmdline}"
    done
  } | sort -u | while read -r pid; do
    case "$(cat "/proc/$pid/comm" 2>/dev/null)" in
      ceph-mon | ceph-osd) ;;
      *) continue ;;
    esac
    [ -z "$only" ] || [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$only" ] || continue
    grep -q '^State:[[:space:]]*Z' "/proc/$pid/status" 2>/dev/null || echo "$pid"
  done
}

# SIGTERM, then SIGKILL after 10 s; waits until they are gone.
kill_and_wait() {
  local pids deadline
  pids=$(cluster_pids "${1:-}")
  [ -n "$pids" ] || return 0
  kill -TERM $pids 2>/dev/null || true
  deadline=$(($(now_ms) + 10000))
  while pids=$(cluster_pids "${1:-}") && [ -n "$pids" ]; do
    if [ "$(now_ms)" -ge "$deadline" ]; then
      log "still running after 10 s, killing: $pids"
      kill -KILL $pids 2>/dev/null || true
      deadline=$(($(now_ms) + 10000))
    fi
    sleep 0.02
  done
}

# The OSD first: it tells the mon it is going down and would wait for an answer from a mon gone
# already (osd_mon_shutdown_timeout, 5 s). What the daemons hold is thrown away.
stop_cluster() {
  kill_and_wait ceph-osd
  kill_and_wait
  rm -f "$dir"/run/*.pid
}

log_tails() {
  local f
  for f in "$dir"/log/ceph-mon.*.log "$dir"/log/ceph-osd.*.log "$dir"/log/*.out; do
    [ -s "$f" ] || continue
    echo "---- last lines of $f ----" >&2
    tail -n 25 "$f" >&2
  done
}

fail() {
  log "start failed: $*"
  log_tails
  stop_cluster
  exit 1
}

deadline_ms=0
remaining_s() {
  local ms=$((deadline_ms - $(now_ms)))
  [ "$ms" -gt 0 ] || ms=0
  echo $(((ms + 999) / 1000))
}

# A port P such that P..P+port_window are all free on 127.0.0.1, picked at random below the
# kernel's ephemeral range so that outgoing connections do not take it meanwhile. Two starts that
# pick the same port notice when the mon cannot bind it, and pick again.
free_port_window() {
  /usr/bin/python3 - "$port_window" <<'EOF'
import random, socket, sys
window = int(sys.argv[1])
for _ in range(200):
    base = random.randrange(10000, 32000 - window)
    held = []
    try:
        for p in range(base, base + window + 1):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            held.append(s)
            s.bind(("127.0.0.1", p))
    except OSError:
        continue
    finally:
        for s in held:
            s.close()
    print(base)
    sys.exit(0)
sys.exit("no free port window found")
EOF
}

write_conf() {
  local fsid=$1 port=$2
  cat >"$conf" <<EOF
# Throwaway test cluster made by scripts/ceph-test-cluster.sh; everything it keeps is under
# $dir.
[global]
fsid = $fsid
mon host = [v2:127.0.0.1:$port]
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind msgr1 = false
# One try: a taken port fails the daemon at once (not three tries 5 s apart), and start picks
# other ports.
ms bind retry count = 1
ms bind port min = $((port + 1))
ms bind port max = $((port + port_window))
auth cluster required = none
auth service required = none
auth client required = none
run dir = $dir/run
crash dir = $dir/crash
keyring = $dir/keyring
# A dead mon fails a client in seconds, not after 300.
client mount timeout = 15
# One OSD: pools of one replica, no health warnings about it.
osd pool default size = 1
osd pool default min size = 1
osd pool default pg autoscale mode = off
mon allow pool size one = true
mon warn on pool no redundancy = false
mon warn on insecure global id reclaim = false
mon warn on insecure global id reclaim allowed = false
osd crush chooseleaf type = 0

[mon]
mon data = $dir/mon/\$cluster-\$id
admin socket = $dir/run/\$cluster-\$name.asok
log file = $dir/log/\$cluster-\$name.log
pid file = $dir/run/\$name.pid
mon cluster log file = $dir/log/\$cluster.log
# Without it every map change waits a second: start took ~11 s.
paxos propose interval = 0.05
mon data avail warn = 1
mon data avail crit = 0

[osd]
osd data = $dir/osd/\$cluster-\$id
admin socket = $dir/run/\$cluster-\$name.asok
log file = $dir/log/\$cluster-\$name.log
pid file = $dir/run/\$name.pid
osd objectstore = memstore
# Pages of 4 KiB: the default page size wastes GBs on 4 KiB writes.
memstore page set = true
memstore page size = 4096
memstore device bytes = $memstore_bytes
# memstore's size in TiB would round the OSD's CRUSH weight to 0 and map no PG to it.
osd crush initial weight = 1
# As little of the machine as it can take: tests and benchmarks run beside it, where a real
# cluster's OSDs have machines of their own. Without op tracking and with a short PG log (a
# memstore OSD's log trimming grew to 20% of its CPU and its time per write more than doubled
# within a few hundred thousand writes).
osd enable op tracker = false
osd min pg log entries = 250
osd max pg log entries = 500
osd pg log dups tracked = 500

[client]
admin socket = $dir/run/\$cluster-\$name.\$pid.\$cctid.asok
log file = $dir/log/\$cluster-\$name.log
EOF
}

# Makes the mon's store with a monmap that holds exactly 127.0.0.1:PORT and starts it; returns 1
# when the port turned out to be taken, so that the caller picks another.
start_mon() {
  local fsid=$1 port=$2
  rm -rf "$dir/mon" "$dir/monmap"
  mkdir -p "$dir/mon"
  monmaptool --create --clobber --fsid "$fsid" --addv a "[v2:127.0.0.1:$port]" "$dir/monmap" \
    >>"$dir/log/mkfs.out" 2>&1 || fail "monmaptool"
  ceph-mon -c "$conf" -i a --mkfs --monmap "$dir/monmap" >>"$dir/log/mkfs.out" 2>&1 ||
    fail "ceph-mon --mkfs"
  # ceph-mon daemonizes once it has bound its port; it exits non-zero when it could not.
  if ! ceph-mon -c "$conf" -i a >"$dir/log/mon.out" 2>&1; then
    if grep -q "unable to bind" "$dir/log/mon.out"; then
      return 1
    fi
    fail "ceph-mon did not start"
  fi
}

# The OSD and the pool, in one python3 with librados (python3-rados, which the ceph CLI needs
# too): each `ceph` command would cost a third of a second of Python start-up. Then it waits until
# the OSD is active and the pool's PGs are all active+clean on it, asking the OSD's admin socket
# every 20 ms: there is no mgr to gather PG states (`ceph -s` shows none, `ceph pg stat` waits for
# a mgr). Debian's python3, whatever else comes first on PATH. Exits non-zero with the reason as
# its last line on stderr.
osd_and_pool() {
  /usr/bin/python3 - "$dir" "$conf" "$(remaining_s)" <<'EOF'
import json, os, socket, struct, subprocess, sys, time
import rados

d, conf, budget = sys.argv[1], sys.argv[2], float(sys.argv[3])
deadline = time.monotonic() + budget
PGS = 8

def left():
    return max(1, int(deadline - time.monotonic()))

def alive(name):
    try:
        with open(os.path.join(d, "run", name + ".pid")) as f:
            pid = int(f.read().strip())
        with open(f"/proc/{pid}/status") as f:
            return "\nState:\tZ" not in f.read()
    except (OSError, ValueError):
        return False

def mon(cluster, what, **args):
    ret, out, err = cluster.mon_command(json.dumps({"prefix": what, "format": "json", **args}),
                                        b"", timeout=left())
    if ret != 0:
        sys.exit(f"ceph {what}: {err} ({ret})")
    return out

def asok(cmd):
    # The admin socket's protocol: the command as JSON and a NUL; the answer's length (32-bit,
    # big endian) and the answer.
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(2)
    try:
        s.connect(os.path.join(d, "run", "ceph-osd.0.asok"))
        s.sendall(json.dumps({"prefix": cmd}).encode() + b"\0")
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack(">I", data[:4])[0]:
            chunk = s.recv(65536)
            if not chunk:
                return None
            data += chunk
        return json.loads(data[4:])
    except (OSError, ValueError):
        return None
    finally:
        s.close()

cluster = rados.Rados(conffile=conf)
try:
    # The first command waits for the mon to form its quorum of one.
    cluster.connect(timeout=left())
except rados.Error as e:
    sys.exit(f"no answer from the mon: {e}")
uuid = open("/proc/sys/kernel/random/uuid").read().strip()
osd_id = json.loads(mon(cluster, "osd new", uuid=uuid) or b"{}").get("osdid")
if osd_id != 0:
    sys.exit(f"ceph osd new gave osd {osd_id}, not 0")
os.makedirs(os.path.join(d, "osd", "ceph-0"), exist_ok=True)
with open(os.path.join(d, "log", "mkfs.out"), "ab") as out:
    if subprocess.run(["ceph-osd", "-c", conf, "-i", "0", "--mkfs", "--osd-uuid", uuid],
                      stdout=out, stderr=out).returncode != 0:
        sys.exit("ceph-osd --mkfs failed")
with open(os.path.join(d, "log", "osd.out"), "ab") as out:
    # ceph-osd daemonizes once it has bound its ports.
    if subprocess.run(["ceph-osd", "-c", conf, "-i", "0"], stdout=out, stderr=out).returncode != 0:
        sys.exit("ceph-osd did not start")
# The pool while the OSD boots.
mon(cluster, "osd pool create", pool="rbd", pg_num=PGS, pgp_num=PGS)
mon(cluster, "osd pool application enable", pool="rbd", app="rbd")
cluster.shutdown()

last = "no answer from the OSD's admin socket"
while time.monotonic() < deadline:
    for name in ("mon.a", "osd.0"):
        if not alive(name):
            sys.exit(f"ceph-{name.split('.')[0]} exited")
    status = asok("status")
    if status and status.get("state") == "active":
        pgs = (asok("dump_pgstate_history") or {}).get("pgs", [])
        clean = [p for p in pgs if p.get("currently") == "Started/Primary/Active/Clean"]
        if len(clean) >= PGS:
            sys.exit(0)
        last = f"{len(clean)} of {PGS} PGs active+clean: " + ", ".join(
            f"{p.get('pg')} {p.get('currently')}" for p in pgs)
    elif status:
        last = f"OSD state {status.get('state')}"
    time.sleep(0.02)
sys.exit("not ready: " + last)
EOF
}

start() {
  local t0 fsid port attempt
  t0=$(now_ms)
  deadline_ms=$((t0 + start_timeout * 1000))
  if [ -n "$(cluster_pids)" ]; then
    log "a cluster is already running in $dir; stop it first"
    exit 1
  fi
  rm -rf "$dir/mon" "$dir/osd" "$dir/run" "$dir/log" "$dir/crash" "$dir/monmap" "$conf"
  mkdir -p "$dir/run" "$dir/log" "$dir/crash" "$dir/osd"
  : >"$dir/keyring"
  fsid=$(cat /proc/sys/kernel/random/uuid)

  for attempt in 1 2 3 4 5; do
    port=$(free_port_window) || fail "no free ports"
    write_conf "$fsid" "$port"
    if start_mon "$fsid" "$port"; then
      break
    fi
    log "port $port taken meanwhile, picking another"
    [ "$attempt" -lt 5 ] || fail "no port the mon could bind"
  done
  echo "$port" >"$dir/port"

  osd_and_pool 2>"$dir/log/osd-and-pool.out" ||
    fail "$(tail -n 1 "$dir/log/osd-and-pool.out") (deadline ${start_timeout} s)"
  log "up in $(($(now_ms) - t0)) ms: mon on 127.0.0.1:$port, $dir"
  echo "$conf"
}

case "$cmd" in
  start) start ;;
  stop)
    t0=$(now_ms)
    stop_cluster
    log "stopped in $(($(now_ms) - t0)) ms: $dir"
    ;;
  *) usage ;;
esac
