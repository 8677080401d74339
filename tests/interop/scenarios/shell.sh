# A guest that runs what the host test asks, one command at a time (guest.py Guest.shell): each
# step cmdN answers with a command, run with sh -eu; its output and exit status go to cmdN.out and
# cmdN.rc in the run directory, and step cmdN+1 tells the host it is done. "exit" ends the
# scenario. For tests whose logic lives on the host (the CSI node plugin's lifecycle).
. /suite/lib.sh

# Not i: lib.sh's step counts in i.
cmd_n=0
while :; do
  step "cmd$cmd_n" >/dev/null
  cmd=$(cat "$R/cmd$cmd_n.go")
  [ "$cmd" != exit ] || break
  say "run: $cmd"
  rc=0
  sh -eu -c "$cmd" >"$R/cmd$cmd_n.out.tmp" 2>&1 || rc=$?
  mv "$R/cmd$cmd_n.out.tmp" "$R/cmd$cmd_n.out"
  echo "$rc" >"$R/cmd$cmd_n.rc"
  cmd_n=$((cmd_n + 1))
done
