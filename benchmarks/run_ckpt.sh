#!/bin/sh
# benchmarks/run_ckpt.sh - checkpoint write and read speed against the raw
# sequential speed of the same disk, measured in the same run:
#   bench_ckpt on the first rank count (its file size sets dd's size), then
#   dd R times into the same directory: write (conv=fsync) and read back,
#   through the page cache and with O_DIRECT (oflag/iflag=direct),
#   then bench_ckpt on the other rank counts;
# then one table of medians: ranks, layout, size, write s and MB/s and their
# ratio to dd's write, read s and MB/s and their ratio to dd's read, and
# both ratios to dd's O_DIRECT write and read.
# Builds nothing (`make bench` builds bench_ckpt). Everything goes to the
# terminal and to OUT/ckpt.txt, bench_ckpt's rows to OUT/ckpt.csv, dd's to
# OUT/dd.csv.
#
# usage: benchmarks/run_ckpt.sh [options] [-- extra options for bench_ckpt]
#   --builddir DIR   built build directory (default: the one holding this
#                    script's Makefile, else the current directory)
#   --out DIR        results directory (default BUILDDIR/runs/ckpt-DATE)
#   --dir DIR        where the checkpoints and dd's file go (default OUT)
#   --mpiexec CMD    launcher (default $MPIEXEC, else mpiexec)
#   --data FILE.h5   token file (default BUILDDIR/data/kjv.h5 when it exists,
#                    else tests/data/genesis.txt ingested into OUT)
#   --ranks LIST     rank counts, comma-separated (default 1,2,4)
#   --layouts LIST   bench_ckpt's --layouts (default tp: dp=1 pp=1 tp=ranks)
#   --repeats R      rounds of every measurement (default 3)
#   --max-time S     bench_ckpt starts no further round of a layout once its
#                    rounds took S seconds (default 60; 0: always R rounds).
#                    Oversubscribed writes can take minutes each: this keeps
#                    the whole run to a few minutes
#   --cache MODE     before every read: fadvise (default; posix_fadvise
#                    DONTNEED on the file, dd iflag=nocache count=0 for dd's),
#                    drop (sync; echo 3 > /proc/sys/vm/drop_caches: root) or
#                    warm (read from the page cache)
#   -h, --help       this text
#
# One thread per rank (OMP_NUM_THREADS=1; bench_ckpt sets backend.threads=1).
# With more ranks than cores the ranks take turns on the cores (4 ranks on a
# 2-core machine): the table says so.
# Exit status: 0 when every run worked and every row is VALID, 1 otherwise.
set -u

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)
builddir=
out=
dir=
launcher=${MPIEXEC:-mpiexec}
data=
ranks=1,2,4
layouts=tp
repeats=3
max_time=60
cache=fadvise
need() { # OPTION ARGS...: the option needs a value
  [ $# -ge 2 ] || { echo "run_ckpt.sh: option $1 needs a value (see --help)" >&2; exit 2; }
}
while [ $# -gt 0 ]; do
  case $1 in
    --builddir|--out|--dir|--mpiexec|--data|--ranks|--layouts|--repeats|--max-time|--cache) need "$@" ;;
  esac
  case $1 in
    --builddir) builddir=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --mpiexec) launcher=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --layouts) layouts=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --max-time) max_time=$2; shift 2 ;;
    --cache) cache=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    --) shift; break ;;
    *) echo "run_ckpt.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case $cache in fadvise|drop|warm) ;; *) echo "run_ckpt.sh: --cache fadvise|drop|warm" >&2; exit 2 ;; esac
case $repeats in ''|*[!0-9]*|0) echo "run_ckpt.sh: --repeats wants a positive integer" >&2; exit 2 ;; esac
ranks=$(echo "$ranks" | tr ',' ' ')
for n in $ranks; do
  case $n in ''|*[!0-9]*|0) echo "run_ckpt.sh: --ranks wants positive integers, e.g. 1,2,4" >&2; exit 2 ;; esac
done

if [ -z "$builddir" ]; then
  if [ -f "$here/../Makefile" ]; then builddir=$here/..; else builddir=$(pwd); fi
fi
builddir=$(cd "$builddir" && pwd) || exit 2
case $out in ""|/*) ;; *) out=$(pwd)/$out ;; esac
case $dir in ""|/*) ;; *) dir=$(pwd)/$dir ;; esac
case $data in ""|/*) ;; *) data=$(pwd)/$data ;; esac
cd "$builddir" || exit 2
bench=$builddir/benchmarks/bench_ckpt
[ -x "$bench" ] || {
  echo "run_ckpt.sh: $bench is missing; run 'make bench' in $builddir (or pass --builddir)" >&2
  exit 2
}

[ -n "$out" ] || out=runs/ckpt-$(date +%Y%m%d-%H%M%S)
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)
[ -n "$dir" ] || dir=$out
mkdir -p "$dir" || exit 1
dir=$(cd "$dir" && pwd)
log=$out/ckpt.txt
: > "$log"
say() { echo "$*" | tee -a "$log"; }

if [ -z "$data" ]; then
  data=$builddir/data/kjv.h5
  if [ ! -f "$data" ]; then # no `make data` here: Genesis is enough tokens
    data=$out/genesis.h5
    say "== $builddir/data/kjv.h5 is missing: ingesting $src/tests/data/genesis.txt into $data"
    "$builddir/gridtrain" ingest text "$src/tests/data/genesis.txt" -o "$data" \
      --val-fraction 0 >/dev/null || { echo "run_ckpt.sh: ingest failed; pass --data FILE.h5" >&2; exit 1; }
  fi
fi

LC_ALL=C; export LC_ALL
t_start=$(date +%s)
OMP_NUM_THREADS=1; export OMP_NUM_THREADS
if [ -z "${OPENBLAS_CORETYPE+set}" ] && grep -q avx512f /proc/cpuinfo 2>/dev/null; then
  OPENBLAS_CORETYPE=SkylakeX; export OPENBLAS_CORETYPE
fi
cores=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
ompi=0
$launcher --version 2>&1 | grep -q "Open MPI" && ompi=1

say "# run_ckpt.sh, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), host $(hostname), $(uname -sr)"
say "# $cores cores ($(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -n 1)), $(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo) memory, load average $(cut -d' ' -f1-3 /proc/loadavg)"
say "# directory $dir on $(df -PT "$dir" | awk 'NR == 2 { print $1 " (" $2 ", " $5 " kB free)" }')"
say "# ranks $ranks; layouts $layouts; $repeats rounds each (fewer after $max_time s); cache before reads: $cache; data $data"
[ -n "$*" ] && say "# extra bench_ckpt options: $*"

status=0
csv=$out/ckpt.csv
first=1
run_bench() { # RANKS [EXTRA OPTIONS...]
  n=$1; shift
  extra=
  [ $ompi = 1 ] && [ "$n" -gt "$cores" ] && extra=--oversubscribe
  append=--append
  [ $first = 1 ] && append= && first=0
  say "== bench_ckpt on $n rank(s)$([ "$n" -gt "$cores" ] && echo " (oversubscribed: $n ranks on $cores cores)")"
  say "+ $launcher -n $n${extra:+ $extra} $bench --layouts $layouts --repeats $repeats --max-time $max_time --cache $cache --dir $dir --data $data --csv $csv $append $*"
  { $launcher -n "$n" $extra "$bench" --layouts "$layouts" --repeats "$repeats" \
      --max-time "$max_time" --cache "$cache" --dir "$dir" --data "$data" --csv "$csv" $append "$@"
    echo $? > "$out/.rc"; } 2>&1 | tee -a "$log"
  rc=$(cat "$out/.rc"); rm -f "$out/.rc"
  [ "$rc" = 0 ] || { say "run_ckpt.sh: bench_ckpt on $n rank(s): exit status $rc"; status=1; }
}

# column NAME of the CSV file: its number
col() { head -n 1 "$1" | tr ',' '\n' | grep -n -x "$2" | cut -d: -f1; }

# dd: the raw sequential write (fsync'ed before dd exits) and read of SIZE bytes
evict() { # FILE
  case $cache in
    fadvise) dd if="$1" iflag=nocache count=0 2>/dev/null ;;
    drop) sync; echo 3 > /proc/sys/vm/drop_caches ;;
    warm) ;;
  esac
}
cached_pct() { # FILE: percent of it in the page cache, or ?
  command -v fincore >/dev/null || { echo "?"; return; }
  fincore -b -n -o RES,SIZE "$1" 2>/dev/null | awk '{ if ($2 > 0) { p = 100 * $1 / $2; printf "%.0f", (p > 100 ? 100 : p) } else print "?" }'
}
secs() { sed -n 's/.* copied, \([0-9.e+-]*\) s,.*/\1/p' | tail -n 1; }
run_dd() { # SIZE
  size=$1
  f=$dir/ddtest
  say "== dd: $repeats x write $size bytes to $f (bs=8M, conv=fsync), then read it (bs=8M) after --cache $cache; then the same with oflag=direct / iflag=direct"
  echo "round,bytes,write_s,write_MBps,cached_before_read_pct,read_s,read_MBps,direct_write_s,direct_write_MBps,direct_read_s,direct_read_MBps" > "$out/dd.csv"
  i=1
  while [ $i -le "$repeats" ]; do
    rm -f "$f"
    ws=$(dd if=/dev/zero of="$f" bs=8M count="$size" iflag=count_bytes conv=fsync 2>&1 | secs)
    evict "$f"
    pct=$(cached_pct "$f")
    rs=$(dd if="$f" of=/dev/null bs=8M 2>&1 | secs)
    # past the page cache (what gridtrain's writes do where the file system
    # takes O_DIRECT); "nan" where it does not
    rm -f "$f"
    dws=$(dd if=/dev/zero of="$f" bs=8M count="$size" iflag=count_bytes oflag=direct conv=fsync 2>&1 | secs)
    drs=$(dd if="$f" of=/dev/null bs=8M iflag=direct 2>&1 | secs)
    if [ -z "$ws" ] || [ -z "$rs" ]; then
      say "run_ckpt.sh: dd failed"; status=1; rm -f "$f"; return 1
    fi
    echo "$i,$size,$ws,$rs,${dws:-nan},${drs:-nan}" | awk -F, -v pct="$pct" '{ printf "%d,%s,%s,%.1f,%s,%s,%.1f,%s,%.1f,%s,%.1f\n", $1, $2, $3, $2 / $3 / 1e6, pct, $4, $2 / $4 / 1e6, $5, $2 / $5 / 1e6, $6, $2 / $6 / 1e6 }' >> "$out/dd.csv"
    awk -F, -v i=$i 'NR == i + 1 { printf "#   round %d: write %.3f s (%.1f MB/s), read %.3f s (%.1f MB/s); in page cache before read %s%%; O_DIRECT write %.3f s (%.1f MB/s), read %.3f s (%.1f MB/s)\n", $1, $3, $4, $6, $7, $5, $8, $9, $10, $11 }' "$out/dd.csv" | tee -a "$log"
    i=$((i + 1))
  done
  rm -f "$f"
}
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

first_ranks=${ranks%% *}
run_bench "$first_ranks" "$@"
[ -s "$csv" ] || { say "run_ckpt.sh: no rows from bench_ckpt; stopping"; exit 1; }
size=$(awk -F, -v c="$(col "$csv" file_bytes)" 'NR == 2 { print $c }' "$csv")
run_dd "$size"
for n in $ranks; do
  [ "$n" = "$first_ranks" ] || run_bench "$n" "$@"
done

# ---- the table ------------------------------------------------------------------------------
[ -s "$out/dd.csv" ] || { say "run_ckpt.sh: no dd numbers"; exit 1; }
dd_w=$(awk -F, 'NR > 1 { print $3 }' "$out/dd.csv" | median)
dd_r=$(awk -F, 'NR > 1 { print $6 }' "$out/dd.csv" | median)
ddmb_w=$(awk -v s="$size" -v t="$dd_w" 'BEGIN { printf "%.1f", s / t / 1e6 }')
ddmb_r=$(awk -v s="$size" -v t="$dd_r" 'BEGIN { printf "%.1f", s / t / 1e6 }')
dio_w=$(awk -F, 'NR > 1 { print $8 }' "$out/dd.csv" | median)
dio_r=$(awk -F, 'NR > 1 { print $10 }' "$out/dd.csv" | median)
diomb_w=$(awk -v s="$size" -v t="$dio_w" 'BEGIN { printf "%.1f", s / t / 1e6 }')
diomb_r=$(awk -v s="$size" -v t="$dio_r" 'BEGIN { printf "%.1f", s / t / 1e6 }')
say ""
say "# Checkpoint I/O: medians of n rounds (at most $repeats); MB = 10^6 bytes; ratio = checkpoint MB/s / dd MB/s"
say "# dd (raw, $size bytes, same directory): write $dd_w s = $ddmb_w MB/s (conv=fsync), read $dd_r s = $ddmb_r MB/s (cache before read: $cache)"
say "# dd with O_DIRECT (oflag/iflag=direct): write $dio_w s = $diomb_w MB/s, read $dio_r s = $diomb_r MB/s; w_dio, r_dio = checkpoint MB/s / these"
say "# layout = dp x pp x tp; '*' = more ranks than the $cores cores (oversubscribed)"
hdr=$(printf "%-6s %-9s %8s %3s %8s %10s %7s %8s %10s %7s %6s %6s %7s  %s" ranks layout size_MB n write_s write_MB/s w_ratio read_s read_MB/s r_ratio w_dio r_dio cached check)
say "$hdr"
awk -F, -v ddw="$ddmb_w" -v ddr="$ddmb_r" -v dw="$diomb_w" -v dr="$diomb_r" \
  -v cr="$(col "$csv" ranks)" -v cd="$(col "$csv" dp)" -v cp="$(col "$csv" pp)" -v ct="$(col "$csv" tp)" \
  -v cb="$(col "$csv" file_bytes)" -v cw="$(col "$csv" write_s_median)" -v cr2="$(col "$csv" read_s_median)" \
  -v cn="$(col "$csv" rounds)" -v cc="$(col "$csv" cached_before_read_max)" -v co="$(col "$csv" oversubscribed)" -v ck="$(col "$csv" check)" '
  NR > 1 {
    wm = $cb / $cw / 1e6; rm = $cb / $cr2 / 1e6
    printf "%-6s %-9s %8.1f %3d %8.3f %10.1f %7.2f %8.3f %10.1f %7.2f %6.2f %6.2f %6.0f%%  %s\n",
      $cr ($co == 1 ? "*" : ""), $cd "x" $cp "x" $ct, $cb / 1e6, $cn, $cw, wm, wm / ddw, $cr2, rm, rm / ddr,
      wm / dw, rm / dr, 100 * $cc, $ck
  }' "$csv" | tee -a "$log"
grep -q ",INVALID$" "$csv" && status=1
say "== $(($(date +%s) - t_start)) s; results in $out (ckpt.txt: everything; ckpt.csv: bench_ckpt rows; dd.csv: dd rounds)"
exit $status
