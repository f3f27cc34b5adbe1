#!/bin/sh
# test_deck_errors.sh - every kind of bad input to `gridtrain train`, on 4
# ranks: exit status 2, exactly one "gridtrain: error:" line (from rank 0)
# that names the problem, and no hang (each run has a time limit).
# gt-test: tier=quick
. "$GT_SRCDIR/tests/lib.sh"

data="$GT_TMP/genesis.h5"
make_dataset "$data" 0.1 || bail "cannot make the dataset"
deck="$GT_SRCDIR/tests/decks/tiny.in"
printf 'not an HDF5 file\n' >"$GT_TMP/text.h5"

# expect DESCRIPTION NEEDLE ARGS...: run on 4 ranks, check status 2 and one
# error line containing NEEDLE.
expect() {
  desc=$1
  needle=$2
  shift 2
  run_mpi 4 120 "$GT_BIN" "$@" >"$GT_TMP/out" 2>"$GT_TMP/err"
  status=$?
  lines=$(grep -c '^gridtrain: error:' "$GT_TMP/err")
  found=$(grep '^gridtrain: error:' "$GT_TMP/err" | grep -cF -- "$needle")
  if [ $status -eq 2 ] && [ "$lines" -eq 1 ] && [ "$found" -eq 1 ]; then
    ok 0 "$desc"
  else
    ok 1 "$desc"
    diag "exit status $status (want 2; 124 means it hung), $lines error lines (want 1)," \
      "wanted: $needle"
    sed 's/^/# stderr: /' "$GT_TMP/err" | head -n 8
  fi
}

bad="$GT_TMP/bad.in"
# deck_with LINES...: a copy of the tiny deck with extra lines appended
deck_with() {
  cp "$deck" "$bad"
  for line in "$@"; do printf '%s\n' "$line" >>"$bad"; done
}

expect "missing deck file" "cannot open input deck '$GT_TMP/nope.in'" \
  train "$GT_TMP/nope.in"
deck_with "[modle]" "layers = 2"
expect "unknown section" "unknown section [modle]; valid sections: run, grid" train "$bad" data.train="$data"
deck_with "[model]" "head = 4"
expect "unknown key" "unknown key 'head' in [model]; valid keys: type, layers, heads" train "$bad" data.train="$data"
deck_with "[optim]" "beta1 = fast"
expect "not a number" "[optim] beta1 = 'fast' is not valid; expected a number in [0, 1)" train "$bad" data.train="$data"
expect "value out of range" "[model] layers = '5000' is not valid; expected an integer in [1, 1024]" \
  train "$deck" data.train="$data" model.layers=5000
expect "unknown choice" "[backend] device = 'gpu' is not valid; expected one of cpu, cpu-async, cpu-guard, cuda" \
  train "$deck" data.train="$data" backend.device=gpu
deck_with "[run]" "steps = 3"
expect "key set twice" "[run] steps is set twice (first on line 4)" train "$bad" data.train="$data"
expect "malformed override" "'model-layers=2' is not of the form section.key=value" \
  train "$deck" data.train="$data" model-layers=2
expect "override of an unknown key" "command line: unknown key 'lrate' in [optim]" \
  train "$deck" data.train="$data" optim.lrate=1
expect "required key missing" "[data] train is required" train "$deck"
expect "layout does not match the world" "layout dp=3 x pp=1 x tp=1 needs 3 ranks but the job has 4" \
  train "$deck" data.train="$data" grid.dp=3
expect "tp does not divide heads" "tp=4 does not divide [model] heads=6; choose tp in {1, 2, 3, 6}" \
  train "$deck" data.train="$data" model.heads=6 model.dim=96 grid.dp=1 grid.tp=4
expect "more stages than layers" "pp=4 pipeline stages need at least 4 layers but [model] layers=2" \
  train "$deck" data.train="$data" grid.dp=1 grid.pp=4
expect "sequence parallelism: tokens do not split over tp" \
  "[parallel] sequence_parallel = on: a micro-batch's 30 tokens" \
  train "$deck" data.train="$data" parallel.sequence_parallel=on grid.dp=1 grid.tp=4 \
  data.batch=1 model.seq_len=30
expect "sequence_parallel not on or off" "[parallel] sequence_parallel = 'yes' is not valid" \
  train "$deck" data.train="$data" parallel.sequence_parallel=yes
expect "experts: top_k above experts" "[model] top_k=3 is more than [model] experts=2" \
  train "$deck" data.train="$data" model.experts=2 model.top_k=3
expect "experts: shared experts without routed ones" \
  "[model] shared_experts=1 needs routed experts too" \
  train "$deck" data.train="$data" model.shared_experts=1
expect "experts: tp does not divide expert_ffn_dim" \
  "tp=4 does not divide [model] expert_ffn_dim=30" \
  train "$deck" data.train="$data" model.experts=4 model.expert_ffn_dim=30 grid.dp=1 grid.tp=4
expect "experts: not yet with sequence parallelism" \
  "[parallel] sequence_parallel = on does not take [model] experts yet" \
  train "$deck" data.train="$data" model.experts=4 parallel.sequence_parallel=on grid.dp=2 grid.tp=2
expect "experts: not yet with zb-h1" "[parallel] schedule = zb-h1 does not take [model] experts yet" \
  train "$deck" data.train="$data" model.experts=4 parallel.schedule=zb-h1 grid.dp=2 grid.pp=2 \
  data.microbatches=2
expect "batch does not split" "[data] batch=10 does not split over dp=4 x microbatches=1" \
  train "$deck" data.train="$data" data.batch=10
expect "explicit stage split that does not cover the layers" \
  "[parallel] stages = '1,2' covers 3 blocks but [model] layers = 2" \
  train "$deck" data.train="$data" grid.dp=2 grid.pp=2 parallel.stages=1,2
expect "unknown schedule" "[parallel] schedule = 'zigzag'" \
  train "$deck" data.train="$data" parallel.schedule=zigzag
expect "missing dataset file" "cannot open dataset file '$GT_TMP/none.h5'" \
  train "$deck" data.train="$GT_TMP/none.h5"
expect "dataset is not HDF5" "'$GT_TMP/text.h5' is not an HDF5 file" \
  train "$deck" data.train="$GT_TMP/text.h5"
expect "no such dataset in the file" "/nothing" train "$deck" data.train="$data:/nothing"
expect "dataset vocab larger than the model's" "has vocab_size 256 but [model] vocab = 100" \
  train "$deck" data.train="$data" model.vocab=100
expect "dataset too short for one batch" "fewer than one batch of 100000" \
  train "$deck" data.train="$data" data.batch=100000
expect "evaluation without validation data" "[run] eval_every = 5 needs a validation set" \
  train "$deck" data.train="$data" run.eval_every=5
# device = cuda where it cannot run: a build without CUDA, or no GPU here
cuda=$("$GT_BIN" --version | sed -n 's/^  CUDA  : //p')
case $cuda in
not\ built*) expect "CUDA backend not built" "device = cuda: this gridtrain was built without CUDA" \
  train "$deck" data.train="$data" backend.device=cuda ;;
*" 0 devices"*) expect "CUDA backend without a GPU" "device = cuda: no GPU is visible to this rank" \
  train "$deck" data.train="$data" backend.device=cuda ;;
*) skip 1 "device = cuda works on this machine ($cuda)" ;;
esac
expect "NCCL collectives on the cpu backend" "[parallel] collectives = nccl needs [backend] device = cuda (not cpu)" \
  train "$deck" data.train="$data" parallel.collectives=nccl
expect "ZeRO stage out of range" "[parallel] zero = '4' is not valid" \
  train "$deck" data.train="$data" parallel.zero=4
expect "unknown collective algorithm" "[parallel] allreduce = 'butterfly' is not valid" \
  train "$deck" data.train="$data" parallel.allreduce=butterfly
expect "allreduce = auto without a table" "allreduce = auto needs coll_table = FILE" \
  train "$deck" data.train="$data" parallel.allreduce=auto
printf 'allreduce ring 2 1e-6 fast 0\n' >"$GT_TMP/table.txt"
expect "a malformed collective table" "table.txt:1: expected 'OP ALGO NP ALPHA BETA GAMMA'" \
  train "$deck" data.train="$data" parallel.allreduce=auto parallel.coll_table="$GT_TMP/table.txt"
expect "a missing collective table" "cannot open the collective table $GT_TMP/none.txt" \
  train "$deck" data.train="$data" parallel.allreduce=auto parallel.coll_table="$GT_TMP/none.txt"
expect "unknown compression" "[parallel] compress = 'zip': expected none, bf16, fp16" \
  train "$deck" data.train="$data" parallel.compress=zip
expect "compression with sync modes" "compress = bf16 needs sync = every_step" \
  train "$deck" data.train="$data" parallel.compress=bf16 parallel.sync=local:2
# zero = 1 or 3 with one data-parallel rank runs, and says it does nothing
for z in 1 3; do
  run_mpi 2 120 "$GT_BIN" train "$deck" data.train="$data" parallel.zero=$z grid.dp=1 grid.tp=2 \
    run.steps=1 >"$GT_TMP/out" 2>"$GT_TMP/err"
  status=$?
  grep -q "zero = $z does nothing with dp = 1" "$GT_TMP/out" "$GT_TMP/err"
  ok $(( status != 0 || $? != 0 )) "zero = $z with dp = 1 trains and says it does nothing (status $status)"
done
expect "unknown attention kind" "[backend] attention = 'flash' is not valid; expected one of cudnn, cudnn-fast, own" \
  train "$deck" data.train="$data" backend.attention=flash
expect "metrics file cannot be created" "cannot create the metrics file '$GT_TMP/no/dir/m.jsonl'" \
  train "$deck" data.train="$data" run.metrics="$GT_TMP/no/dir/m.jsonl"
printf 'x\n' >"$GT_TMP/afile"
expect "checkpoint directory that is a file" "[checkpoint] dir $GT_TMP/afile is not a directory" \
  train "$deck" data.train="$data" checkpoint.dir="$GT_TMP/afile"
expect "checkpoint directory that cannot be created" \
  "cannot create checkpoint directory $GT_TMP/afile/sub ([checkpoint] dir)" \
  train "$deck" data.train="$data" checkpoint.dir="$GT_TMP/afile/sub"
expect "negative checkpoint interval" "[checkpoint] every = '-1' is not valid" \
  train "$deck" data.train="$data" checkpoint.every=-1
expect "resume from a file that is not a checkpoint" "is not a gridtrain checkpoint" \
  train "$deck" data.train="$data" checkpoint.resume="$data"
# checks of values and checks after parsing name the deck file and line
dline=$(($(wc -l <"$deck") + 2))
deck_with "[run]" "hang_timeout = 0.001"
expect "hang_timeout below 1 s" "$bad:$dline: [run] hang_timeout = '0.001' is not valid; expected 0 (off) or a number in [1," \
  train "$bad" data.train="$data"
deck_with "[parallel]" "schedule = 1g1b"
expect "a check after parsing names the deck line" "$bad:$dline: [parallel] schedule = '1g1b': unknown schedule" \
  train "$bad" data.train="$data"
expect "train without a deck" "train: missing input deck" train
expect "unknown command" "unknown command 'trian'" trian "$deck"

done_testing
