#!/bin/sh
# gt-test: ranks=1 tier=quick
# test_layering.sh - the layers of src/ keep to themselves, and the headers
# say where their code lives (docs/architecture.md, "Layering").
#
# 1. No source file in src/ includes a file of another top-level folder of
#    src/ (a layer) through a relative path: `#include "../X/..."` with X
#    not its own layer (src/backend/cpu including "../backend.h" is inside
#    the backend layer and fine), nor anything outside src/. A piece that two
#    layers need moves down to the lower one, or into include/gridtrain/.
#    Each crossing is listed with file and line. The allow-list below holds
#    the documented exceptions; an entry that no longer matches anything is
#    reported (TODO: delete it), so the list only shrinks.
# 2. Every header of include/gridtrain/ has one row in its README.md table,
#    every row names a header and sources that exist, and each source lies in
#    its row's layer.
# 3. No source file includes a public header of a higher layer: each
#    `#include "gridtrain/X.h"` in src/LAYER/ names a header whose row's
#    layer is LAYER or one below it, in the order of docs/architecture.md
#    ("Layering"), LAYERS below.
# The checks first run on small synthetic trees with known faults, so that
# a check that finds nothing has been seen to find something.
. "$GT_SRCDIR/tests/lib.sh"

# The exceptions, one a line: the including file, the include as written,
# and after a '#' why it is allowed.
allowed() {
  cat <<'EOF'
EOF
}

# The layers from the bottom (docs/architecture.md, "Layering").
LAYERS="core backend comm layers model parallel optim io plan train cli"

# upward_includes ROOT LAYERS: one line "FILE LINE HEADER FROM TO" for each
# include of a gridtrain/ header whose layer (ROOT/include/gridtrain/
# README.md) comes after the including file's layer in LAYERS, or is not in
# the table ("?").
upward_includes() {
  readme="$1/include/gridtrain/README.md"
  find "$1/src" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cc' -o -name '*.cu' \
    -o -name '*.cuh' \) | LC_ALL=C sort | while IFS= read -r f; do
    grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"gridtrain/' "$f" |
      awk -v file="${f#"$1"/}" -v layers="$2" -v readme="$readme" '
        BEGIN {
          n = split(layers, l, " ")
          for (i = 1; i <= n; i++) rank[l[i]] = i
          while ((getline row < readme) > 0) {
            if (row !~ /^\| `/) continue
            split(row, c, "|")
            h = c[2]; gsub(/[` ]/, "", h)
            y = c[4]; gsub(/ /, "", y)
            layer_of[h] = y
          }
        }
        {
          line = $0; sub(/:.*/, "", line)
          h = $0; sub(/^[^"]*"gridtrain\//, "", h); sub(/".*/, "", h)
          split(file, d, "/")
          to = (h in layer_of) ? layer_of[h] : "?"
          if (to == "?" || rank[to] > rank[d[2]]) print file, line, h, d[2], to
        }'
  done
}

# cross_includes ROOT: one line "FILE LINE TARGET FROM TO" for each relative
# include in ROOT/src that leaves the including file's top-level folder
# (TO is "-" for a target outside src/).
cross_includes() {
  find "$1/src" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cc' -o -name '*.cu' \
    -o -name '*.cuh' \) | LC_ALL=C sort | while IFS= read -r f; do
    grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"\.\./' "$f" |
      awk -v file="${f#"$1"/}" '{
        line = $0; sub(/:.*/, "", line)
        target = $0; sub(/^[^"]*"/, "", target); sub(/".*/, "", target)
        n = split(file, d, "/")       # d[1] = "src", d[2] = the layer, d[n] = the file
        depth = n - 1
        for (i = 1; i <= depth; i++) p[i] = d[i]
        m = split(target, t, "/")
        out = 0
        for (i = 1; i < m; i++) {
          if (t[i] == "..") { if (depth > 0) depth--; else out = 1 }
          else if (t[i] != ".") p[++depth] = t[i]
        }
        to = (out || depth < 2 || p[1] != "src") ? "-" : p[2]
        if (to != d[2]) print file, line, target, d[2], to
      }'
  done
}

# header_problems ROOT: one line for each header of ROOT/include/gridtrain
# without exactly one row in its README.md, each row whose header or
# sources do not exist, and each source outside its row's layer.
header_problems() {
  readme="$1/include/gridtrain/README.md"
  [ -r "$readme" ] || { echo "no $readme"; return; }
  for h in "$1"/include/gridtrain/*.h; do
    b=$(basename "$h")
    n=$(grep -c "^| \`$b\` |" "$readme")
    [ "$n" -eq 1 ] || echo "$b: $n rows in include/gridtrain/README.md (want 1)"
  done
  grep '^| `' "$readme" | while IFS='|' read -r _ hdr srcs layer _; do
    hdr=$(printf '%s' "$hdr" | tr -d '` ')
    layer=$(printf '%s' "$layer" | tr -d ' ')
    [ -r "$1/include/gridtrain/$hdr" ] || echo "$hdr: a row, but no such header"
    [ -n "$layer" ] && [ -d "$1/src/$layer" ] || echo "$hdr: layer '$layer' is no folder of src/"
    case "$srcs" in *'header only'*) continue ;; esac
    list=$(printf '%s\n' "$srcs" | grep -o '`[^`]*`' | tr -d '`')
    [ -n "$list" ] || echo "$hdr: names no source (or 'header only')"
    for s in $list; do
      [ -e "$1/$s" ] || echo "$hdr: $s does not exist"
      case "$s" in "src/$layer/"*) ;; *) echo "$hdr: $s is not in layer $layer" ;; esac
    done
  done
}

# ---- the checks, on a tree with known faults ---------------------------------------------
fake="$GT_TMP/fake"
mkdir -p "$fake/src/a" "$fake/src/b/sub" "$fake/include/gridtrain" || bail "cannot make $fake"
printf '#include "../b/y.h"\n' >"$fake/src/a/x.c"                     # crosses a -> b
printf '#include "stdio.h"\n  # include "../../include/q.h"\n' >"$fake/src/a/w.c" # leaves src
printf '#include "../y.h"\n#include "../../b/y.h"\n' >"$fake/src/b/sub/z.c" # inside b
printf '#include "../a/u.h"\n' >"$fake/src/a/v.c"                     # a -> a
: >"$fake/include/gridtrain/one.h"
: >"$fake/include/gridtrain/two.h"
cat >"$fake/include/gridtrain/README.md" <<'EOF'
| `one.h` | `src/a/x.c`, `src/b/sub/z.c` | a |
| `gone.h` | header only | a |
| `one.h` | `src/a/none.c` | c |
EOF
cross_includes "$fake" >"$GT_TMP/fake-cross.txt"
printf '%s\n' "src/a/w.c 2 ../../include/q.h a -" "src/a/x.c 1 ../b/y.h a b" |
  cmp -s - "$GT_TMP/fake-cross.txt"
r=$?
ok $r "the include check finds what crosses a layer in a synthetic tree, and only that"
[ $r -eq 0 ] || sed 's/^/#   /' "$GT_TMP/fake-cross.txt"
header_problems "$fake" | LC_ALL=C sort >"$GT_TMP/fake-headers.txt"
LC_ALL=C sort >"$GT_TMP/fake-want.txt" <<'EOF'
gone.h: a row, but no such header
one.h: 2 rows in include/gridtrain/README.md (want 1)
one.h: layer 'c' is no folder of src/
one.h: src/a/none.c does not exist
one.h: src/a/none.c is not in layer c
one.h: src/b/sub/z.c is not in layer a
two.h: 0 rows in include/gridtrain/README.md (want 1)
EOF
cmp -s "$GT_TMP/fake-want.txt" "$GT_TMP/fake-headers.txt"
r=$?
ok $r "the header check finds the faults of a synthetic table"
[ $r -eq 0 ] || diff "$GT_TMP/fake-want.txt" "$GT_TMP/fake-headers.txt" | sed 's/^/#   /'

fake2="$GT_TMP/fake2"
mkdir -p "$fake2/src/lo" "$fake2/src/hi" "$fake2/include/gridtrain" || bail "cannot make $fake2"
printf '#include "gridtrain/hi.h"\n#include "gridtrain/lo.h"\n' >"$fake2/src/lo/a.c" # lo -> hi
printf '#include "gridtrain/lo.h"\n#include "gridtrain/nowhere.h"\n' >"$fake2/src/hi/b.c"
cat >"$fake2/include/gridtrain/README.md" <<'EOF'
| `lo.h` | `src/lo/a.c` | lo |
| `hi.h` | `src/hi/b.c` | hi |
EOF
upward_includes "$fake2" "lo hi" >"$GT_TMP/fake-up.txt"
printf '%s\n' "src/hi/b.c 2 nowhere.h hi ?" "src/lo/a.c 1 hi.h lo hi" |
  cmp -s - "$GT_TMP/fake-up.txt"
r=$?
ok $r "the direction check finds an include of a higher layer's header in a synthetic tree"
[ $r -eq 0 ] || sed 's/^/#   /' "$GT_TMP/fake-up.txt"

# ---- the tree ----------------------------------------------------------------------------
cross_includes "$GT_SRCDIR" >"$GT_TMP/cross.txt"
allowed | sed 's/ *#.*//' >"$GT_TMP/allowed.txt"
bad=0
while read -r file line target from to; do
  grep -qxF "$file $target" "$GT_TMP/allowed.txt" && continue
  where="layer $to"
  [ "$to" != - ] || where="outside src/"
  diag "$file:$line: #include \"$target\" goes from layer $from to $where"
  bad=$((bad + 1))
done <"$GT_TMP/cross.txt"
[ $bad -eq 0 ]
ok $? "no include in src/ crosses a layer through a relative path ($bad outside the allow-list)"
while read -r file target; do
  if awk -v f="$file" -v t="$target" '$1 == f && $3 == t { found = 1 } END { exit !found }' \
    "$GT_TMP/cross.txt"; then
    ok 0 "allow-list: $file still includes $target"
  else
    # not a failure: the exception is gone; the list should lose it too
    gt_tap_n=$((gt_tap_n + 1))
    echo "not ok $gt_tap_n - allow-list: $file no longer includes $target # TODO delete the entry"
  fi
done <"$GT_TMP/allowed.txt"

upward_includes "$GT_SRCDIR" "$LAYERS" >"$GT_TMP/up.txt"
[ ! -s "$GT_TMP/up.txt" ]
ok $? "no source includes a public header of a layer above its own ($LAYERS)"
while read -r file line header from to; do
  diag "$file:$line: #include \"gridtrain/$header\" goes from layer $from up to layer $to"
done <"$GT_TMP/up.txt"

header_problems "$GT_SRCDIR" >"$GT_TMP/headers.txt"
[ ! -s "$GT_TMP/headers.txt" ]
ok $? "include/gridtrain/README.md has one true row for every header"
sed 's/^/#   /' "$GT_TMP/headers.txt"

done_testing
