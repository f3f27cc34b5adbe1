#!/bin/sh
# gridtrain ckpt import: tiny random Hugging Face models made here with
# transformers (tests/io/make_hf.py: GPT-2 tied and untied; Llama with GQA
# 4/2, untied head, rope_theta 5e5, llama3 rope scaling, intermediate_size 37,
# also saved sharded into 17 files and in bf16, and tied; Mixtral with 4
# experts of 24 units, top 2) import into
# checkpoints that `ckpt verify` accepts and whose /model tensors are the HF
# tensors under the mapping, bit for bit in fp32 (check_hf_import.py); and
# unsupported or damaged inputs are exit 2 with one line naming the problem.
# The models are a few KiB so that the whole test takes seconds.
# gt-test: tier=quick
. "$GT_SRCDIR/tests/lib.sh"

py=/usr/bin/python3
"$py" -c 'import transformers, safetensors, h5py' 2>/dev/null ||
  bail "needs transformers, safetensors and h5py for $py: pip install --break-system-packages -r .ci/pypi.txt"
make="$GT_SRCDIR/tests/io/make_hf.py"
check="$GT_SRCDIR/tests/io/check_hf_import.py"
show() { sed 's/^/#   /' "$1"; }

for k in gpt2 gpt2-untied llama llama-sharded llama-bf16 llama-tied mixtral; do
  "$py" "$make" $k "$GT_TMP/$k" >"$GT_TMP/make.out" 2>&1 || { show "$GT_TMP/make.out"; bail "cannot make $k"; }
  "$GT_BIN" ckpt import "$GT_TMP/$k" -o "$GT_TMP/$k.h5" >"$GT_TMP/$k.out" 2>&1
  ok $? "import $k"
  "$GT_BIN" ckpt verify "$GT_TMP/$k.h5" >>"$GT_TMP/$k.out" 2>&1
  ok $? "ckpt verify accepts the import of $k" || show "$GT_TMP/$k.out"
  "$py" "$check" tensors "$GT_TMP/$k" "$GT_TMP/$k.h5" >"$GT_TMP/$k.check" 2>&1
  ok $? "$k: /model tensors equal the HF tensors under the mapping" || show "$GT_TMP/$k.check"
  dt=fp32; [ $k = llama-bf16 ] && dt=bf16
  "$GT_BIN" ckpt convert "$GT_TMP/$k.h5" --format hf --dtype $dt "$GT_TMP/$k.hf" >"$GT_TMP/$k.exp" 2>&1 &&
    "$py" "$check" same "$GT_TMP/$k" "$GT_TMP/$k.hf" >>"$GT_TMP/$k.exp" 2>&1
  ok $? "$k: import then export gives transformers the identical state_dict" || show "$GT_TMP/$k.exp"
done
"$GT_BIN" ckpt info "$GT_TMP/llama.h5" >"$GT_TMP/info.out" 2>&1 &&
  grep -q "^model *llama: layers 2" "$GT_TMP/info.out" && grep -q "kv_heads *= *2" "$GT_TMP/info.out" &&
  grep -q "rope_scaling *= *llama3" "$GT_TMP/info.out"
ok $? "ckpt info shows the llama deck" || show "$GT_TMP/info.out"
"$GT_BIN" ckpt info "$GT_TMP/mixtral.h5" >"$GT_TMP/info.out" 2>&1 &&
  grep -q "experts *= *4" "$GT_TMP/info.out" && grep -q "top_k *= *2" "$GT_TMP/info.out" &&
  grep -q "expert_ffn_dim *= *24" "$GT_TMP/info.out"
ok $? "ckpt info shows the mixtral deck's experts" || show "$GT_TMP/info.out"

# errors: a copy of the llama directory with one thing changed
fails() {
  f_name=$1 f_msg=$2
  "$GT_BIN" ckpt import "$GT_TMP/bad" -o "$GT_TMP/bad.h5" >"$GT_TMP/$f_name.out" 2>&1
  rc=$?
  [ $rc -eq 2 ] && grep -q "^gridtrain: error: .*$f_msg" "$GT_TMP/$f_name.out" &&
    [ "$(grep -c 'error' "$GT_TMP/$f_name.out")" -eq 1 ] && [ ! -e "$GT_TMP/bad.h5" ] &&
    [ ! -e "$GT_TMP/bad.h5.tmp" ]
  ok $? "$f_name: exit 2 naming it ($f_msg)" || { echo "# rc=$rc"; show "$GT_TMP/$f_name.out"; }
}
edit() { # edit KEY JSON-VALUE: config.json of a fresh copy
  rm -rf "$GT_TMP/bad" && cp -r "$GT_TMP/llama" "$GT_TMP/bad" &&
    "$py" -c 'import json,sys; p=sys.argv[1]; c=json.load(open(p)); k=sys.argv[2].split(".")
d=c
for x in k[:-1]: d=d[x]
d[k[-1]]=json.loads(sys.argv[3]); json.dump(c,open(p,"w"))' "$GT_TMP/bad/config.json" "$1" "$2"
}
edit rope_scaling.rope_type '"yarn"' && fails rope_yarn "rope_scaling.rope_type = yarn is not supported"
edit attention_bias true && fails attention_bias "attention_bias = true is not supported"
edit hidden_act '"gelu"' && fails hidden_act 'hidden_act = "gelu" is not supported'
edit sliding_window 16 && fails sliding_window "sliding_window = 16 is not supported"
edit model_type '"mistral"' && fails model_type "model_type = mistral is not supported"
edit head_dim 16 && fails head_dim "head_dim = 16 is not supported"
edit num_hidden_layers 3 && fails missing_tensor "the tensor model.layers.2.input_layernorm.weight is missing"
edit vocab_size 104 && fails shape "tensor model.embed_tokens.weight has the shape (103, 32); config.json makes it (104, 32)"
edit vocab_size 103 && "$py" "$check" damage "$GT_TMP/llama/model.safetensors" "$GT_TMP/bad/model.safetensors" &&
  fails damaged_header "safetensors .*: the header is not JSON"
edit vocab_size 103 && head -c 5000 "$GT_TMP/llama/model.safetensors" >"$GT_TMP/bad/model.safetensors" &&
  fails cut_file "end past the data"
rm -rf "$GT_TMP/bad" && cp -r "$GT_TMP/mixtral" "$GT_TMP/bad" &&
  "$py" -c 'import json,sys; p=sys.argv[1]; c=json.load(open(p)); c["router_jitter_noise"]=0.1; json.dump(c,open(p,"w"))' "$GT_TMP/bad/config.json" &&
  fails router_jitter "router_jitter_noise = 0.1 is not supported"
rm -rf "$GT_TMP/bad" && cp -r "$GT_TMP/gpt2" "$GT_TMP/bad" &&
  sed -i 's/"layer_norm_epsilon": 1e-05/"layer_norm_epsilon": 1e-06/' "$GT_TMP/bad/config.json" &&
  fails gpt2_eps "layer_norm_epsilon = 1e-06 is not supported"

done_testing
