#!/bin/sh
# benchmarks/bench_tokenizer.sh - gridtrain's byte-level BPE against the
# `tokenizers` package of Hugging Face: the same tokenizer, the same text,
# one core each (taskset -c CORE; the package's thread pool held to one
# thread), tokens per second, and whether the two give the same ids.
#
#   benchmarks/bench_tokenizer.sh [TEXT] [VOCAB] [CORE]
#
# TEXT: data/kjv.txt when `make data` made it, else tests/data/genesis.txt.
# VOCAB (default 8192): the size of the BPE that `tokenizers` trains on the
# text (ByteLevel alphabet, <|endoftext|>), written as a GPT-2-style
# tokenizer.json (GPT-2's regex) and a Llama-3-style one (Llama 3's Split
# regex, ignore_merges). Rows:
#   gridtrain       benchmarks/bench_tokenizer: gt_tokenizer_encode on the
#                   whole text, best of 3 (the word cache warm after the
#                   first), and the first run's time
#   tokenizers      Tokenizer.encode(text, add_special_tokens=False) on the
#                   whole text, once (its cost grows faster than the text:
#                   4 MB take tens of seconds)
#   tokenizers/lines  encode_batch of the text's lines, one thread, best of 3
# and VALID when gridtrain's ids are the package's whole-text ids (and
# decode(encode(text)) == text), else INVALID. Needs /usr/bin/python3 with
# tokenizers (.ci/pypi.txt) and a built benchmarks/bench_tokenizer (make).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${BENCH_TOKENIZER:-$root/benchmarks/bench_tokenizer}
py=${PYTHON:-/usr/bin/python3}
text=${1:-}
if [ -z "$text" ]; then
  if [ -r "$root/data/kjv.txt" ]; then text=$root/data/kjv.txt; else text=$root/tests/data/genesis.txt; fi
fi
vocab=${2:-8192}
core=${3:-0}
[ -x "$bin" ] || { echo "bench_tokenizer.sh: build $bin first (make)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
one() { RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false taskset -c "$core" "$@"; }

"$py" - "$text" "$tmp" "$vocab" <<'EOF'
import json, sys
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
text, d, vocab = sys.argv[1], sys.argv[2], int(sys.argv[3])
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train([text], trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<|endoftext|>"],
          show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
tok.save(f"{d}/gpt2.json")
cfg = json.loads(tok.to_str())
cfg["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex":
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"
        "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     "behavior": "Isolated", "invert": False},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
cfg["model"]["ignore_merges"] = True
open(f"{d}/llama3.json", "w").write(json.dumps(cfg))
EOF

bytes=$(wc -c <"$text")
echo "# bench_tokenizer.sh: byte-level BPE of $vocab tokens trained on $text ($bytes bytes), one core (taskset -c $core)"
echo "# $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'); load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '# %-7s %-17s %10s %10s %14s %9s  %s\n' style encoder tokens seconds tokens_per_s MB_per_s result
status=0
for style in gpt2 llama3; do
  one "$bin" "hf:$tmp/$style.json" "$text" --repeat 3 --ids "$tmp/$style.ids" >"$tmp/ours.out" || true
  one "$py" - "$tmp/$style.json" "$text" "$tmp/$style.ids" "$style" "$tmp/ours.out" <<'EOF' || status=1
import sys, time
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
text = open(sys.argv[2], encoding="utf-8", newline="").read()
n = len(text.encode())
ours = open(sys.argv[3], "rb").read()
ids_ours = [int.from_bytes(ours[i:i + 4], "little") for i in range(0, len(ours), 4)]
row = open(sys.argv[5]).read().splitlines()[-1].split()
# bench_tokenizer's row: name bytes tokens first_s tokens_per_s MB_per_s VALID|INVALID
t_ours = int(row[2]) / float(row[4])
def timed(f):
    t0 = time.perf_counter()
    out = f()
    return time.perf_counter() - t0, out
t_whole, enc = timed(lambda: tok.encode(text, add_special_tokens=False))
ids = enc.ids
lines = text.splitlines(keepends=True)
t_lines = min(timed(lambda: tok.encode_batch(lines, add_special_tokens=False))[0] for _ in range(3))
valid = ids_ours == ids and row[-1] == "VALID"
style = sys.argv[4]
for name, t, k in (("gridtrain", t_ours, len(ids_ours)), ("tokenizers", t_whole, len(ids)),
                   ("tokenizers/lines", t_lines, len(ids))):
    print(f"  {style:<7} {name:<17} {k:10d} {t:10.4f} {k / t:14.0f} {n / t / 1e6:9.2f}  "
          f"{('VALID' if valid else 'INVALID') if name == 'gridtrain' else ''}")
print(f"# {style}: gridtrain's first run (cold word cache) {float(row[3]):.4f} s; "
      f"gridtrain / tokenizers/lines = {t_lines / t_ours:.1f}x faster")
sys.exit(0 if valid else 1)
EOF
done
exit $status
