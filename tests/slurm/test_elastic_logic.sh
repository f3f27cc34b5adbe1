#!/bin/sh
# test_elastic_logic.sh - jobscripts/elastic.sh's decisions, without Slurm
# and without training: the launcher is a stub that records the layout it
# was given and exits with the status the test scripts for each try; the
# probe says which nodes are healthy. The layouts are checked by the real
# `gridtrain plan --memory`. Checks: the first start on all nodes; after a
# failure a node that fails its probe is left out and dp shrinks with more
# micro-batches of the same size (global batch 12: dp 3 x 2 of 2 becomes
# dp 2 x 3 of 2); a rerun after a failure with every node healthy keeps the
# layout; the tries run out (status 1, one "giving up" line); no layout fits
# the nodes left (status 1); bad input (status 2) and a signal's checkpoint
# (status 3) are not restarted; the deck's own grid.*/data.microbatches
# overrides are replaced, not repeated. 2-6 s.
# gt-test: tier=full
. "$GT_SRCDIR/tests/lib.sh"

if ! command -v bash >/dev/null 2>&1; then
  echo "1..0 # SKIP bash is missing"
  exit 0
fi
T=$(cd "$GT_TMP" && pwd)
deck="$GT_SRCDIR/tests/decks/tiny.in"
elastic="$GT_SRCDIR/jobscripts/elastic.sh"
# The stub launcher: logs "nodes ntasks tpn ARGS" and exits with the next
# status of $T/statuses (one a line; 0 when none is left).
cat >"$T/launch.sh" <<'SH'
#!/bin/sh
echo "$LNODES $LNTASKS $LTPN $*" >>"$STUB_DIR/launches"
s=$(head -n 1 "$STUB_DIR/statuses" 2>/dev/null)
sed -i 1d "$STUB_DIR/statuses" 2>/dev/null
exit "${s:-0}"
SH
chmod +x "$T/launch.sh"
export STUB_DIR="$T"

# el NAME STATUSES HEALTHY [ARGS...] -- [OVERRIDES...]: elastic.sh on nodes
# a,b,c x 4 tasks with pp=2 x tp=2, the stub exiting with STATUSES (a
# space-separated list) in turn; HEALTHY: the nodes whose probe passes.
# OVERRIDES replace the default data.microbatches=2.
el() {
  e_name=$1
  # shellcheck disable=SC2086 # one status a line
  printf '%s\n' $2 >"$T/statuses"
  e_healthy=$3
  shift 3
  e_opts=""
  while [ $# -gt 0 ] && [ "$1" != -- ]; do
    e_opts="$e_opts $1"
    shift
  done
  [ $# -gt 0 ] && shift
  : >"$T/launches"
  # shellcheck disable=SC2016,SC2086 # $nodes...: elastic.sh's; $e_opts: several words
  HEALTHY=" $e_healthy " timeout 60 bash "$elastic" --nodes a,b,c --tasks-per-node 4 \
    --gridtrain "$GT_BIN" --probe-timeout 5 $e_opts \
    --launch 'LNODES=$nodes LNTASKS=$ntasks LTPN=$tpn '"$T/launch.sh" \
    --probe 'case $HEALTHY in *" $node "*) true ;; *) false ;; esac' \
    -- "$deck" data.train=x.h5 grid.pp=2 grid.tp=2 "${@:-data.microbatches=2}" >"$T/$e_name.out" 2>&1
  e_rc=$?
  cp "$T/launches" "$T/$e_name.launches"
}
# launch N: the layout of the Nth launch ("a,b,c 12 4 dp=3 pp=2 tp=2 micro=2")
launch() {
  sed -n "${1}p" "$T/launches" | awk '{
    for (i = 4; i <= NF; i++) if ($i ~ /^(grid\.(dp|pp|tp)|data\.microbatches)=/) { sub(/^grid\./, "", $i); sub(/^data\.microbatches/, "micro", $i); l = l " " $i }
    print $1, $2, $3 l }'
}

el shrink "137 0" "a b"
[ $e_rc -eq 0 ] && [ "$(launch 1)" = "a,b,c 12 4 dp=3 pp=2 tp=2 micro=2" ] &&
  [ "$(launch 2)" = "a,b 8 4 dp=2 pp=2 tp=2 micro=3" ] && [ "$(wc -l <"$T/launches")" -eq 2 ] &&
  grep -q "^elastic: .* node c is not healthy" "$T/shrink.out" &&
  grep -q "^elastic: .* restart 1 of 3, .* global batch 12 = dp 2 x 3 micro-batches of 2" "$T/shrink.out"
ok $? "a failed step restarts without the unhealthy node: dp 3 x 2 micro-batches becomes dp 2 x 3 of the same size"
[ $e_rc -eq 0 ] || sed 's/^/# /' "$T/shrink.out" "$T/shrink.launches" | tail -n 15

el same "1 4 0" "a b c"
[ $e_rc -eq 0 ] && [ "$(wc -l <"$T/launches")" -eq 3 ] &&
  [ "$(launch 3)" = "a,b,c 12 4 dp=3 pp=2 tp=2 micro=2" ]
ok $? "failures with every node healthy (status 1, the watchdog's 4) rerun the same layout"

el tries "9 9 9" "a b c" --tries 2
[ $e_rc -eq 1 ] && [ "$(wc -l <"$T/launches")" -eq 3 ] &&
  [ "$(grep -c "^elastic: .* giving up: 2 restart(s) already" "$T/tries.out")" -eq 1 ]
ok $? "--tries 2: after the third failure, one 'giving up' line and status 1 ($e_rc)"

el none "9" "" --tries 3
[ $e_rc -eq 1 ] && [ "$(wc -l <"$T/launches")" -eq 1 ] &&
  grep -q "^elastic: .* giving up: no layout of pp=2 x tp=2 fits 0 node(s) of 4 tasks" "$T/none.out"
ok $? "no healthy node left: 'giving up: no layout ... fits', status 1 ($e_rc)"

el batch "9 0" "a b" -- data.batch=9
[ $e_rc -eq 0 ] && [ "$(launch 1)" = "a,b,c 12 4 dp=3 pp=2 tp=2 micro=1" ] &&
  [ "$(launch 2)" = "a 4 4 dp=1 pp=2 tp=2 micro=3" ]
ok $? "batch 9 at dp=3: dp=2 does not divide it, so one node at dp=1 x 3 micro-batches of 3"

el bad "2" "a b c"
[ $e_rc -eq 2 ] && [ "$(wc -l <"$T/launches")" -eq 1 ]
ok $? "bad input (status 2) is not restarted ($e_rc)"

el signal "3" "a b c"
[ $e_rc -eq 3 ] && [ "$(wc -l <"$T/launches")" -eq 1 ]
ok $? "a signal's checkpoint (status 3) ends the loop with status 3 for the job script to requeue"

grep -c "grid.pp=" "$T/shrink.launches" | grep -qx 2 &&
  [ "$(sed -n 1p "$T/shrink.launches" | grep -o "grid.pp=" | wc -l)" -eq 1 ]
ok $? "the caller's grid.* and data.microbatches are replaced by the chosen layout, not repeated"

el deck "0" "a b c" -- data.batch=10
[ $e_rc -eq 2 ] && grep -q "does not run on 3 nodes x 4 tasks: .*batch=10" "$T/deck.out"
ok $? "a deck that does not fit all the nodes is bad input (status 2, the resolver's message)"

done_testing
