#!/bin/sh
# man/make-man.sh BINARY HELP2MAN INCLUDE VERSION - write gridtrain's man
# page to standard output: help2man on BINARY --help (HELP2MAN ':' when it
# is missing), with INCLUDE (man/gridtrain.h2m) and a COMMANDS section that
# holds every command's --help; without help2man, or when it fails, the same
# texts as they are in a page of our own. When BINARY cannot run at all (an
# MPI program on a login node that forbids it), a short page that points to
# --help, so that the build never fails for want of a man page.
set -u
bin=$1 help2man=$2 include=$3 version=$4
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
commands="train ingest ckpt sample score plan flight plot"
# roff: backslashes and lines that start with a control character
esc() { sed -e 's/\\/\\e/g' -e "s/^[.']/\\\\\\&&/"; }

if "$bin" --help >"$tmp/help" 2>/dev/null; then
  {
    echo "[COMMANDS]"
    for c in $commands; do
      echo ".SS \"gridtrain $c\""
      echo ".nf"
      "$bin" "$c" --help 2>/dev/null | esc
      echo ".fi"
    done
  } >"$tmp/commands.h2m"
  if [ "$help2man" != ":" ] &&
    "$help2man" -N --no-discard-stderr --version-string="$version" \
      --include="$include" --include="$tmp/commands.h2m" -o "$tmp/page" "$bin" 2>"$tmp/err" &&
    [ -s "$tmp/page" ]; then
    cat "$tmp/page"
    exit 0
  fi
  [ -s "$tmp/err" ] && sed 's/^/make-man.sh: help2man: /' "$tmp/err" >&2
  cat <<PAGE
.TH GRIDTRAIN 1 "" "gridtrain $version" "User Commands"
.SH NAME
gridtrain \\- MPI-first training of neural networks with data, pipeline and tensor parallelism
.SH SYNOPSIS
.B gridtrain
\\fICOMMAND\\fR [\\fIARGS\\fR]
.SH DESCRIPTION
.nf
PAGE
  esc <"$tmp/help"
  echo ".fi"
  sed -n '/^\[COMMANDS\]/,$p' "$tmp/commands.h2m" | sed '1s/.*/.SH COMMANDS/'
  exit 0
fi
echo "make-man.sh: '$bin --help' does not run here; writing a short man page" >&2
cat <<PAGE
.TH GRIDTRAIN 1 "" "gridtrain $version" "User Commands"
.SH NAME
gridtrain \\- MPI-first training of neural networks with data, pipeline and tensor parallelism
.SH DESCRIPTION
Run
.B gridtrain --help
and
.B gridtrain
.I COMMAND
.B --help
for the commands and their options, and see the documentation in
.IR PREFIX/share/doc/gridtrain/ .
PAGE
