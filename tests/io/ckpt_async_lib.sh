# tests/io/ckpt_async_lib.sh - what test_ckpt_async.sh and
# test_ckpt_async_full.sh share (sourced after tests/lib.sh): the dataset,
# the deck and its common keys, and helpers for checkpoint directories and
# per-step losses.

data="$GT_TMP/genesis.h5"
make_dataset "$data" 0.1 || bail "cannot make the dataset"
deck="$GT_SRCDIR/tests/decks/tiny.in"
common="data.train=$data optim.warmup=0 optim.min_lr=3e-3 checkpoint.keep=0"
train_limit=120

show() { sed 's/^/#   /' "$1"; }
stepfile() { printf '%s/step_%08d.h5' "$1" "$2"; }
# losses JSONL FIRST LAST: the losses of steps FIRST..LAST, as printed (%.9g:
# every bit of a float)
losses() { sed -n 's/^{"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/p' "$1" |
  awk -v a="$2" -v b="$3" '$1 >= a && $1 <= b'; }
# resume_dir SRC DST STEP: DST holds SRC's checkpoints up to STEP, latest STEP
resume_dir() {
  rm -rf "$2"
  mkdir -p "$2"
  for f in "$1"/step_*.h5; do
    s=$(basename "$f" .h5)
    s=${s#step_}
    [ "$(expr "$s" + 0)" -le "$3" ] && cp "$f" "$2/"
  done
  printf 'step_%08d.h5\n' "$3" >"$2/latest"
}
