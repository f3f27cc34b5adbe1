#!/bin/sh
# tests/install/test_install.sh - `make install` as a site or a package does
# it, from this build tree:
#   a. staged: make install DESTDIR=$T/stage prefix=/opt/gridtrain puts the
#      binary, the plot script, the decks, the job scripts, the docs, the man
#      page and the Lmod modulefile where docs/install.md says, with
#      /opt/gridtrain written into the job scripts and the modulefile; the
#      staged binary runs (--version) and finds its own plot script;
#      make uninstall takes every file away again;
#   b. in place: make install prefix=$T/prefix, then with only the module
#      loaded (Lmod; nothing of the build tree on PATH): gridtrain is the
#      installed one, its man page renders, ingest + a 2-step train of the
#      tiny deck run, the installed scaling.sbatch runs a point without Slurm
#      from a directory with no ./gridtrain, and train.sbatch hands the
#      installed binary and deck to srun (a shim that records its arguments).
# Lmod checks are skipped when Lmod is not installed (Debian: lmod), the plot
# when matplotlib is missing. About 30 s.
# gt-test: tier=full
. "$GT_SRCDIR/tests/lib.sh"

T=$(cd "$GT_TMP" && pwd)
S=$T/stage
P=$T/prefix
deck="$GT_SRCDIR/tests/decks/tiny.in"
for v in $(env | sed -n -E 's/^((SLURM|SBATCH|SRUN|SALLOC)_[A-Za-z0-9_]*)=.*/\1/p'); do
  unset "$v"
done
have_mpl=0
/usr/bin/python3 -c 'import matplotlib, numpy' 2>/dev/null && have_mpl=1

# ---- a. staged -----------------------------------------------------------------------
make -C "$GT_BUILDDIR" install DESTDIR="$S" prefix=/opt/gridtrain >"$T/stage.out" 2>&1
rc=$?
ok $rc "make install DESTDIR=\$T/stage prefix=/opt/gridtrain (exit $rc)"
[ $rc -eq 0 ] || { tail -n 20 "$T/stage.out" | sed 's/^/#   /'; bail "make install failed"; }
R=$S/opt/gridtrain
missing=
for f in bin/gridtrain libexec/gridtrain/gridtrain-plot.py \
  share/gridtrain/inputs/default.in share/gridtrain/inputs/gpt2-124m.in \
  share/gridtrain/inputs/clusters/h100-sxm.in \
  share/gridtrain/jobscripts/train.sbatch share/gridtrain/jobscripts/train-multinode.sbatch \
  share/gridtrain/jobscripts/train-requeue.sbatch share/gridtrain/jobscripts/scaling.sbatch \
  share/gridtrain/jobscripts/chain.sh share/gridtrain/jobscripts/train-elastic.sbatch \
  share/gridtrain/jobscripts/elastic.sh share/doc/gridtrain/README.md \
  share/doc/gridtrain/install.md share/doc/gridtrain/plots.md share/doc/gridtrain/errors.md \
  share/man/man1/gridtrain.1 share/modulefiles/gridtrain/0.2.0.lua; do
  [ -s "$R/$f" ] || missing="$missing $f"
done
[ -z "$missing" ]
ok $? "the layout: binary, plot script, decks, job scripts, docs, man page, modulefile${missing:+ (missing:$missing)}"
v=$(sed -n 's/^AC_INIT(\[gridtrain\], \[\([^]]*\)\].*/\1/p' "$GT_SRCDIR/configure.ac")
[ "$v" = 0.2.0 ]
ok $? "the modulefile is named after the version in configure.ac ($v)"
n=0
for f in train.sbatch train-multinode.sbatch train-requeue.sbatch scaling.sbatch chain.sh \
  train-elastic.sbatch elastic.sh; do
  [ -x "$R/share/gridtrain/jobscripts/$f" ] && bash -n "$R/share/gridtrain/jobscripts/$f" &&
    n=$((n + 1))
done
[ $n -eq 7 ]
ok $? "the 7 installed job scripts are executable and parse (bash -n): $n"
n=0
for f in train.sbatch train-multinode.sbatch train-requeue.sbatch train-elastic.sbatch; do
  grep -qx "gt_bin='/opt/gridtrain/bin/gridtrain'" "$R/share/gridtrain/jobscripts/$f" &&
    grep -qx "gt_inputs='/opt/gridtrain/share/gridtrain/inputs'" "$R/share/gridtrain/jobscripts/$f" &&
    n=$((n + 1))
done
grep -qx "gt_bin='/opt/gridtrain/bin/gridtrain'" "$R/share/gridtrain/jobscripts/scaling.sbatch" &&
  n=$((n + 1))
[ $n -eq 5 ]
ok $? "the installed job scripts name /opt/gridtrain/bin/gridtrain (and its decks): $n of 5"
m=$R/share/modulefiles/gridtrain/0.2.0.lua
! grep -q '@[a-zA-Z]*@' "$m" &&
  grep -q 'prepend_path("PATH", "/opt/gridtrain/bin")' "$m" &&
  grep -q 'prepend_path("MANPATH", "/opt/gridtrain/share/man")' "$m" &&
  grep -q 'setenv("GRIDTRAIN_ROOT", root)' "$m" && grep -q 'local root = "/opt/gridtrain"' "$m" &&
  grep -q 'setenv("GRIDTRAIN_DATA", "/opt/gridtrain/share/gridtrain")' "$m" &&
  grep -q '^whatis(' "$m" && grep -q '^help(' "$m"
ok $? "the modulefile: PATH, MANPATH, GRIDTRAIN_ROOT, GRIDTRAIN_DATA of /opt/gridtrain; whatis, help; no @placeholders@"
"$R/bin/gridtrain" --version >"$T/version.out" 2>&1 && head -n 1 "$T/version.out" | grep -qx "gridtrain $v"
ok $? "the staged binary runs: --version says gridtrain $v"
if [ $have_mpl -eq 1 ]; then
  printf '{"step":0,"loss":5.5,"step_ms":10,"tokens_per_s":38400}\n{"step":1,"loss":5.0,"step_ms":10,"tokens_per_s":38400}\n' >"$T/two.jsonl"
  "$R/bin/gridtrain" plot "$T/two.jsonl" -o "$T/staged.png" >"$T/staged.out" 2>&1 &&
    [ -s "$T/staged.png" ]
  ok $? "the staged binary finds its own plot script (beside it: ../libexec/gridtrain)"
else
  skip 1 "/usr/bin/python3 lacks matplotlib"
fi
make -C "$GT_BUILDDIR" uninstall DESTDIR="$S" prefix=/opt/gridtrain >"$T/uninstall.out" 2>&1
left=$(find "$S" -type f | sed "s|^$S||" | head -n 5)
[ -z "$left" ]
ok $? "make uninstall removes every installed file${left:+ (left: $left)}"

# ---- b. in place, with the module --------------------------------------------------------
make -C "$GT_BUILDDIR" install prefix="$P" >"$T/install.out" 2>&1
rc=$?
ok $rc "make install prefix=\$T/prefix (exit $rc)"
[ $rc -eq 0 ] || { tail -n 20 "$T/install.out" | sed 's/^/#   /'; bail "make install failed"; }
# the environment of a user: system directories only, then what the module adds
PATH=/usr/local/bin:/usr/bin:/bin
export PATH
unset GRIDTRAIN MANPATH
lmod_init=
for f in /usr/share/lmod/lmod/init/bash /etc/profile.d/lmod.sh; do
  [ -r "$f" ] && lmod_init=$f && break
done
if [ -n "$lmod_init" ]; then
  got=$(bash -c ". $lmod_init && module use '$P/share/modulefiles' && module load gridtrain &&
    echo \"\$(command -v gridtrain) \$GRIDTRAIN_ROOT \$GRIDTRAIN_DATA\"" 2>"$T/module.err")
  [ "$got" = "$P/bin/gridtrain $P $P/share/gridtrain" ]
  ok $? "module load gridtrain: gridtrain is \$T/prefix/bin/gridtrain, GRIDTRAIN_ROOT and _DATA set (got '$got')"
  [ -s "$T/module.err" ] && sed 's/^/#   /' "$T/module.err"
  man_path=$(bash -c ". $lmod_init && module use '$P/share/modulefiles' && module load gridtrain &&
    man -w gridtrain" 2>/dev/null)
  [ "$man_path" = "$P/share/man/man1/gridtrain.1" ]
  ok $? "module load gridtrain: man finds the installed page (got '$man_path')"
else
  skip 2 "Lmod is not installed (apt-get install lmod)"
fi
# the rest as the module would set it up
PATH=$P/bin:$PATH
command -v gridtrain >/dev/null && [ "$(command -v gridtrain)" = "$P/bin/gridtrain" ]
ok $? "on PATH: gridtrain is the installed binary"
page=$P/share/man/man1/gridtrain.1
LC_ALL=C.UTF-8 MANWIDTH=100 man -l "$page" >"$T/man.txt" 2>"$T/man.err" &&
  [ ! -s "$T/man.err" ] && grep -q '^NAME' "$T/man.txt" && grep -q '^COMMANDS' "$T/man.txt" &&
  grep -q 'gridtrain plot' "$T/man.txt" && grep -q 'usage: gridtrain train DECK' "$T/man.txt"
ok $? "the man page renders (man -l, no warnings): NAME, COMMANDS with train's and plot's help"
[ -s "$T/man.err" ] && head -n 5 "$T/man.err" | sed 's/^/#   /'

mkdir -p "$T/work" && cd "$T/work" || bail "no $T/work"
gridtrain ingest text "$GT_SRCDIR/tests/data/genesis.txt" -o data.h5 --val-fraction 0.05 \
  >ingest.out 2>&1
ok $? "the installed ingest makes a dataset"
timeout 120 gridtrain train "$deck" data.train=data.h5 run.steps=2 run.metrics=run.jsonl \
  >train.out 2>&1 && grep -q '^gridtrain: done: 2 steps' train.out &&
  [ "$(grep -c '"step"' run.jsonl)" -eq 2 ]
ok $? "the installed train runs 2 steps of the tiny deck and writes 2 step records"
if [ $have_mpl -eq 1 ]; then
  gridtrain plot run.jsonl -o run.png >plot.out 2>&1 && [ -s run.png ]
  ok $? "the installed plot draws the run"
else
  skip 1 "/usr/bin/python3 lacks matplotlib"
fi

# scaling.sbatch without Slurm, one point; GRIDTRAIN unset and no ./gridtrain here:
# it must run the binary make install wrote into it. PATH without gridtrain proves it.
printf '#deck\t%s\n#set\tdata.train=%s/data.h5 run.steps=2\nindex\tname\tmode\tranks\tdp\tpp\ttp\tm\tschedule\tzero\tbatch\n0\tp0\tstrong\t1\t1\t1\t1\t1\t1f1b\t0\t12\n' \
  "$deck" "$T/work" >sweep.tsv
[ ! -e ./gridtrain ] &&
  PATH=/usr/bin:/bin SCALING_CPU_TIME=0 SCALING_TIMEOUT=120 MPIEXEC="$MPIEXEC" \
    bash "$P/share/gridtrain/jobscripts/scaling.sbatch" sweep.tsv out >scaling.out 2>&1 &&
  grep -q '^rc=0$' out/p0.status && [ "$(grep -c '"step"' out/p0.jsonl)" -eq 2 ]
ok $? "the installed scaling.sbatch runs a point without Slurm with the installed binary"
[ -f out/p0.status ] || tail -n 5 scaling.out | sed 's/^/#   /'

# train.sbatch: srun is a shim that records its arguments; the binary and the
# default deck must be the installed ones
mkdir -p shim
printf '#!/bin/sh\nprintf "%%s\\n" "$@" >"%s/srun.args"\n' "$T/work" >shim/srun
chmod +x shim/srun
PATH=$T/work/shim:/usr/bin:/bin SLURM_JOB_ID=7 SLURM_JOB_NAME=t SLURM_JOB_NODELIST=n1 \
  SLURM_NTASKS=1 bash "$P/share/gridtrain/jobscripts/train.sbatch" >sbatch.out 2>&1 &&
  grep -qx "$P/bin/gridtrain" srun.args && grep -qx "$P/share/gridtrain/inputs/default.in" srun.args
ok $? "the installed train.sbatch hands srun the installed binary and default deck"
GRIDTRAIN=/x/gridtrain PATH=$T/work/shim:/usr/bin:/bin SLURM_JOB_ID=7 SLURM_JOB_NAME=t \
  SLURM_JOB_NODELIST=n1 SLURM_NTASKS=1 bash "$P/share/gridtrain/jobscripts/train.sbatch" \
  d.in >sbatch2.out 2>&1 && grep -qx /x/gridtrain srun.args && grep -qx d.in srun.args
ok $? "GRIDTRAIN and a deck on the command line still win"

cd "$T" && make -C "$GT_BUILDDIR" uninstall prefix="$P" >/dev/null 2>&1
done_testing
