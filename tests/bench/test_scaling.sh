#!/bin/sh
# tests/bench/test_scaling.sh - the scaling sweep tooling end to end, small:
# benchmarks/scaling/gen_points.py makes 3 tiny strong-scaling points (1 and
# 2 ranks, 2 steps), jobscripts/scaling.sbatch runs them on its local path
# (mpiexec, no Slurm) and one as an array task (srun replaced by a shim that
# calls mpiexec), benchmarks/scaling/collect.py writes the CSV and PNGs; the
# CSV has one row per point with the promised columns and the 1-rank point
# has efficiency 1. The Amdahl fit is checked on its own, on speedups made
# from s = 0.1 and s = 0.35, which it must recover within 1e-6.
# Skipped when $PYTHON_REF lacks matplotlib or numpy. About 15 s.
# gt-test: tier=full
. "$GT_SRCDIR/tests/lib.sh"

if ! "$PYTHON_REF" -c 'import matplotlib, numpy' 2>/dev/null; then
  echo "1..0 # SKIP $PYTHON_REF lacks matplotlib or numpy (apt-get install python3-matplotlib python3-numpy)"
  exit 0
fi
# An outer Slurm job (make check under Slurm) must not turn the local path
# into srun.
for v in $(env | sed -n -E 's/^((SLURM|SBATCH|SRUN|SALLOC)_[A-Za-z0-9_]*)=.*/\1/p'); do
  unset "$v"
done

T=$(cd "$GT_TMP" && pwd)
S=$GT_SRCDIR/benchmarks/scaling
job=$GT_SRCDIR/jobscripts/scaling.sbatch
data=$T/genesis.h5
make_dataset "$data" 0 || bail "cannot make the dataset"

# ---- the points ------------------------------------------------------------------
"$PYTHON_REF" "$S/gen_points.py" --deck "$GT_SRCDIR/tests/decks/tiny.in" --ranks 1,2 \
  --mode strong --max-tp 1 --schedules 1f1b --zero 0 --full-at 1 --steps 2 --warmup 1 \
  --set data.train="$data" -o "$T/sweep.tsv" >"$T/gen.out" 2>&1
ok $? "gen_points.py writes a sweep"
pts=$(awk -F '\t' '!/^#/ && $1 != "index" { printf "%s:%s:%s:%s:%s ", $4, $5, $6, $7, $8 }' "$T/sweep.tsv")
[ "$pts" = "1:1:1:1:1 2:1:2:1:12 2:2:1:1:1 " ]
ok $? "3 points: 1 rank; 2 ranks as pp=2 (12 micro-batches) and dp=2 ($pts)"
grep -q "sbatch --array=0-2%1 --ntasks=2 " "$T/gen.out"
ok $? "gen_points.py prints the sbatch line with --array=0-2%1 --ntasks=2"

# ---- the local path: every point with mpiexec --------------------------------------
GRIDTRAIN=$GT_BIN SCALING_TIMEOUT=120 bash "$job" "$T/sweep.tsv" "$T/out" >"$T/local.out" 2>&1
rc=$?
ok $rc "scaling.sbatch without Slurm runs every point (exit $rc)"
[ $rc -eq 0 ] || sed 's/^/#   /' "$T/local.out" | tail -n 20
n=0
for f in "$T"/out/*.status; do
  grep -q '^rc=0$' "$f" && grep -q '^launcher=' "$f" && [ -s "${f%.status}.jsonl" ] && n=$((n + 1))
done
[ "$n" -eq 3 ]
ok $? "each point leaves rc=0 in NAME.status and its metrics in NAME.jsonl ($n of 3)"

# ---- an array task: SLURM_ARRAY_TASK_ID picks the point, srun launches it --------
mkdir -p "$T/bin"
cat >"$T/bin/srun" <<EOF
#!/bin/sh
# srun shim: drop srun's options, keep -n, launch with mpiexec
n=1
while [ \$# -gt 0 ]; do
  case \$1 in
    -n) n=\$2; shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
exec $MPIEXEC -n "\$n" "\$@"
EOF
chmod +x "$T/bin/srun"
PATH=$T/bin:$PATH SLURM_JOB_ID=41 SLURM_ARRAY_JOB_ID=41 SLURM_ARRAY_TASK_ID=2 SLURM_NTASKS=2 \
  SLURM_CPUS_PER_TASK=1 GRIDTRAIN=$GT_BIN bash "$job" "$T/sweep.tsv" "$T/array" >"$T/array.out" 2>&1
rc=$?
[ $rc -eq 0 ] && [ "$(find "$T/array" -name '*.status' | wc -l)" -eq 1 ] &&
  grep -q '^launcher=srun$' "$T/array/strong-n2-dp2-pp1-tp1-m1-1f1b-z0.status" &&
  grep -q '^job=41_2$' "$T/array/strong-n2-dp2-pp1-tp1-m1-1f1b-z0.status"
ok $? "array task 2 runs point 2 alone, with srun (exit $rc)"
PATH=$T/bin:$PATH SLURM_JOB_ID=41 SLURM_ARRAY_JOB_ID=41 SLURM_ARRAY_TASK_ID=7 SLURM_NTASKS=2 \
  GRIDTRAIN=$GT_BIN bash "$job" "$T/sweep.tsv" "$T/array7" >"$T/array7.out" 2>&1 &&
  grep -q "nothing to do" "$T/array7.out"
ok $? "an array task past the last point does nothing and exits 0"

# ---- the collector -----------------------------------------------------------------
"$PYTHON_REF" "$S/collect.py" "$T/sweep.tsv" "$T/out" --name tiny --results "$T/results" \
  >"$T/collect.out" 2>&1
rc=$?
ok $rc "collect.py reads every point (exit $rc)"
[ $rc -eq 0 ] || sed 's/^/#   /' "$T/collect.out" | tail -n 20
csv=$T/results/scaling-tiny.csv
"$PYTHON_REF" - "$csv" >"$T/csv-check.out" 2>&1 <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
need = ["ranks", "dp", "pp", "tp", "microbatches", "schedule", "zero", "mode", "tokens_per_s",
        "step_ms", "compute_ms", "comm_ms", "bubble_ms", "data_ms", "efficiency", "speedup"]
missing = [c for c in need if c not in rows[0]] if rows else need
bad = []
if missing:
    bad.append(f"missing columns {missing}")
got = sorted((int(r["ranks"]), int(r["dp"]), int(r["pp"]), int(r["tp"]), int(r["microbatches"]))
             for r in rows)
if got != [(1, 1, 1, 1, 1), (2, 1, 2, 1, 12), (2, 2, 1, 1, 1)]:
    bad.append(f"rows {got}")
for r in rows:
    if r.get("mode") != "strong" or r.get("status") != "ok" or not float(r["tokens_per_s"] or 0) > 0:
        bad.append(f"row {r.get('name')}: mode {r.get('mode')} status {r.get('status')} "
                   f"tokens/s {r.get('tokens_per_s')}")
    split = sum(float(r[k]) for k in ("compute_ms", "comm_ms", "bubble_ms", "data_ms", "other_ms"))
    if abs(split - float(r["step_ms"])) > 1e-3 * float(r["step_ms"]) + 1e-3:
        bad.append(f"row {r['name']}: split {split} != step {r['step_ms']}")
one = [r for r in rows if r["ranks"] == "1"]
if len(one) != 1 or abs(float(one[0]["efficiency"]) - 1) > 1e-9 or one[0]["best"] != "1":
    bad.append(f"1-rank efficiency {[r['efficiency'] for r in one]}")
for r in rows:
    if r["ranks"] == "2" and not 0 < float(r["efficiency"]) < 10:
        bad.append(f"2-rank efficiency {r['efficiency']}")
print("\n".join(bad) or "csv ok")
sys.exit(1 if bad else 0)
PY
rc=$?
ok $rc "the CSV: 3 rows with ranks/dp/pp/tp/micro-batches, tokens/s, the step split, efficiency 1 at 1 rank"
[ $rc -eq 0 ] || sed 's/^/#   /' "$T/csv-check.out"
if [ -x /usr/bin/time ]; then
  awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    !($(c["cores_used"]) > 0 && $(c["cpu_s"]) > 0) { bad = 1 } END { exit bad }' "$csv"
  ok $? "with /usr/bin/time: CPU seconds and cores used of every point in the CSV"
else
  skip 1 "/usr/bin/time is not installed (apt-get install time)"
fi
grep -q '^amdahl_s=' "$T/collect.out"
ok $? "collect.py prints the fitted serial fraction"
png=0
for f in "$T/results/scaling-tiny-throughput.png" "$T/results/scaling-tiny-split.png"; do
  [ "$(head -c 4 "$f" 2>/dev/null | od -An -c | tr -d ' ')" = '211PNG' ] && png=$((png + 1))
done
[ "$png" -eq 2 ]
ok $? "collect.py writes the throughput and split PNGs ($png of 2)"

# Two results directories are repeats: the array task's run of point 2 is a
# second run of it, and the faster of the two counts.
"$PYTHON_REF" "$S/collect.py" "$T/sweep.tsv" "$T/out" "$T/array" --name rep --no-plots \
  --results "$T/results" >"$T/collect-rep.out" 2>&1 &&
  "$PYTHON_REF" - "$T/results/scaling-rep.csv" "$T/array/strong-n2-dp2-pp1-tp1-m1-1f1b-z0.jsonl" \
    "$T/out/strong-n2-dp2-pp1-tp1-m1-1f1b-z0.jsonl" <<'PY'
import csv, json, statistics, sys
rows = {r["name"]: r for r in csv.DictReader(open(sys.argv[1]))}
med = [statistics.median(json.loads(l)["step_ms"] for l in open(f)
                         if '"step"' in l and json.loads(l)["step"] >= 1) for f in sys.argv[2:]]
r = rows["strong-n2-dp2-pp1-tp1-m1-1f1b-z0"]
ok = (len(rows) == 3 and r["runs"] == "2" and abs(float(r["step_ms"]) - min(med)) < 1e-3 and
      abs(float(r["step_ms_worst"]) - max(med)) < 1e-3 and
      all(x["runs"] == "1" for n, x in rows.items() if n != r["name"]))
sys.exit(0 if ok else 1)
PY
ok $? "collect.py over two results directories: the faster run of a repeated point counts"

# ---- the Amdahl fit on known data -----------------------------------------------------
for s in 0.1 0.35; do
  pairs=$(awk -v s="$s" 'BEGIN { split("1 2 3 4 6 8 16 64", n, " ");
    for (i = 1; i <= 8; i++) printf "%d:%.17g ", n[i], 1 / (s + (1 - s) / n[i]) }')
  got=$("$PYTHON_REF" "$S/collect.py" --fit "$pairs" | sed -n 's/^amdahl_s=//p')
  awk -v g="$got" -v s="$s" 'BEGIN { d = g - s; exit !(g != "" && d < 1e-6 && d > -1e-6) }'
  ok $? "the Amdahl fit recovers s = $s from exact speedups (got ${got:-nothing})"
done

done_testing
