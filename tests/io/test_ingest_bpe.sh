#!/bin/sh
# tests/io/test_ingest_bpe.sh - `gridtrain ingest text --tokenizer hf:PATH`:
# byte-level BPE (GPT-2, Llama 3) against the `tokenizers` package, the
# reference (tokenizers 0.19.1 of .ci/pypi.txt), through the command line.
#
# The test trains a small byte-level BPE with `tokenizers` on Genesis (800
# tokens: the 256 byte characters, <|endoftext|> and ~540 merges, so that
# words merge into a few tokens and most merge rules get used) and writes it
# three ways: its tokenizer.json (GPT-2's ByteLevel regex), GPT-2's
# vocab.json + merges.txt, and a Llama-3-style tokenizer.json (Llama 3's
# Split regex, ByteLevel without regex, ignore_merges, whole words added to
# the vocabulary without merges so that ignore_merges changes tokens, and
# Llama 3's special tokens, one with lstrip and rstrip, one added token that
# is not special). Each ingests Genesis and a text of the awkward cases
# (letters outside ASCII, composed and decomposed accents, CJK, digit runs,
# white space runs of every kind including U+00A0, U+3000, U+0085, U+2028
# and U+180E where PCRE2 and Oniguruma differ, \r\n, emoji with ZWJ and
# skin tones, contractions in both cases, special tokens inside words, side
# by side and cut short), and the file's tokens must be the package's
# encode(text, add_special_tokens=False) ids, token for token, with the
# tokenizer stored in /tokenizer/model (loadable by the package, encoding the
# same). A 4.2 MB text puts the 4 MiB block boundary of ingest inside a
# special token after white space, and another inside a 4-byte character:
# the tokens must be those of the whole text (the package's ids of a
# repeated paragraph, whose junctions are checked not to interact, and of
# the part with the boundary). Then: the validation split at a line start;
# ingest tokens --tokenizer hf:; decode(encode(x)) == x through `gridtrain
# sample` (the prompt of awkward text comes back byte for byte, and the
# new tokens' text is what an independent byte-level decoder written here
# makes of their ids); and the errors (E-ING-07): one line naming the key.
# Merges for double spaces, newlines and digits are added to the trained
# ones, since Genesis has too few of them to learn merges that would show
# how the regexes split white space and digit runs. Sizes: Genesis (197 KB) takes the package about 0.3 s per tokenizer on a
# loaded 2-core machine; the big files cost gridtrain about 1 s each.
# gt-test: tier=quick
. "$GT_SRCDIR/tests/lib.sh"

T=$GT_TMP
TEXT=$GT_SRCDIR/tests/data/genesis.txt
"$PYTHON_REF" -c 'import h5py, numpy, tokenizers' 2>/dev/null ||
  bail "$PYTHON_REF lacks h5py, numpy or tokenizers (pip install -r .ci/pypi.txt)"

# ---- the tokenizers and texts, made by the package -------------------------------------
"$PYTHON_REF" - "$TEXT" "$T" <<'EOF' || bail "cannot make the tokenizers with the tokenizers package"
import json, os, sys
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers, AddedToken
text_path, d = sys.argv[1], sys.argv[2]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train([text_path], trainers.BpeTrainer(
    vocab_size=800, special_tokens=["<|endoftext|>"], show_progress=False,
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
# merges Genesis does not teach, so that the pre-tokenizers' splits of white
# space and digits show in the tokens (GPT-2's regex takes a digit run whole,
# Llama 3's in threes; U+180E is white space to PCRE2, not to Oniguruma)
cfg = json.loads(tok.to_str())
vocab = cfg["model"]["vocab"]
for a, b in (("Ġ", "Ġ"), ("ĠĠ", "Ġ"), ("Ċ", "Ċ"), ("1", "2"), ("3", "4"), ("12", "34"),
             ("5", "6"), ("7", "8"), ("9", "0"), ("12", "3"), ("Ġ", "1")):
    if a + b not in vocab:
        vocab[a + b] = len(vocab)
    cfg["model"]["merges"].append(f"{a} {b}")
tok = Tokenizer.from_str(json.dumps(cfg))
tok.save(f"{d}/gpt2.json")
os.makedirs(f"{d}/gpt2dir")
tok.model.save(f"{d}/gpt2dir")  # GPT-2's vocab.json + merges.txt

# Llama 3's pre-tokenizer, ignore_merges, words without merges, its specials
cfg = json.loads(tok.to_str())
cfg["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex":
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"
        "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     "behavior": "Isolated", "invert": False},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
     "use_regex": False}]}
cfg["model"]["ignore_merges"] = True
vocab = cfg["model"]["vocab"]
for w in ["Ġbeginning", "Ġfirmament", "Abraham", "Ġwaters", "ĠGod,"]:
    if w not in vocab:
        vocab[w] = len(vocab)
lt = Tokenizer.from_str(json.dumps(cfg))
lt.add_special_tokens(["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>",
                       AddedToken("<mask>", lstrip=True, rstrip=True, special=True)])
lt.add_tokens([AddedToken("[note]", normalized=True)])
lt.save(f"{d}/llama3.json")

# the awkward text (no '\r' alone: it is a line end for nobody)
odd = ("caf\u00e9 cafe\u0301 na\u00efve \u00c6r\u00f8 \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac "
       "\u0440\u0443\u0441\u0441\u043a\u0438\u0439 \u4e2d\u6587 \u65e5\u672c\u8a9e\n"
       "1234567890 3.14159 2024-12-07 007 \u0661\u0662\u0663 \u00bd\n"
       "a  b   c\t\td \t \n\n\n  indented\n    \n\r\nwin line\r\n"
       "nbsp\u00a0\u00a0x ideo\u3000\u3000y nel\u0085\u0085z ls\u2028\u2028w mvs  \u180e\u180ev\n"
       "emoji \U0001f389\U0001f389 \U0001f44d\U0001f3fd fam\U0001f468\u200d\U0001f469\u200d\U0001f467!\n"
       "it's IT'S we'll they'RE don't O'Neil'S\n"
       "end.<|endoftext|>start<|endoftext|><|endoftext|> <|endoftext <|endoftext|>\n"
       "<|begin_of_text|>Hello<|eot_id|>   <mask>   masked <mask>end [note] and[note]s\n"
       + "x" * 300 + " " + "ab" * 200 + "\n" + " " * 50 + "\n" + "\u00e9" * 100 + "\n"
       "last line without a newline \U0001f600")
open(f"{d}/odd.txt", "w", encoding="utf-8", newline="").write(odd)

# 4.2 MB: Genesis 21 times, then a head of Genesis so that the 4 MiB block
# boundary falls inside <|endoftext|> after white space; the same with a
# 4-byte character at the boundary
g = open(text_path, encoding="utf-8", newline="").read().encode()
block = 4 << 20
for name, tail, cut_at in (("big1", b"end of it,   \n\n  <|endoftext|>  after\n", 21),
                           ("big2", "word \U0001f389\U0001f389 \u4e2d x".encode(), 7)):
    body = g * 21
    fill = block - cut_at - len(body)
    head = g[:fill]
    assert len(body + head) + cut_at == block
    open(f"{d}/{name}.txt", "wb").write(body + head + tail + g[:3000])

# Genesis as nanoGPT's uint16 token file, encoded by the package
import array
ids = array.array("H", tok.encode(g.decode(), add_special_tokens=False).ids)
open(f"{d}/gen.bin", "wb").write(ids.tobytes())

# tokenizers gridtrain must refuse, each for one key
base = json.loads(tok.to_str())
def bad(name, change):
    c = json.loads(json.dumps(base))
    change(c)
    open(f"{d}/{name}.json", "w").write(json.dumps(c))
bad("nfc", lambda c: c.update(normalizer={"type": "NFC"}))
bad("prefix", lambda c: c["pre_tokenizer"].update(add_prefix_space=True))
bad("merge", lambda c: c["model"]["merges"].insert(0, "zz qq"))
bad("split", lambda c: c.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Removed", "invert": False},
    {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]}))
wp = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
wp.save(f"{d}/wordpiece.json")
os.makedirs(f"{d}/badmerges")
open(f"{d}/badmerges/vocab.json", "w").write(json.dumps(base["model"]["vocab"]))
open(f"{d}/badmerges/merges.txt", "w").write("#version: 0.2\nt h\nthree parts here\n")
os.makedirs(f"{d}/empty")
EOF

# ingest NAME TOKENIZER TEXT [VAL_FRACTION]: ingest TEXT into $T/NAME.h5
ingest() {
  "$GT_BIN" ingest text "$3" -o "$T/$1.h5" --tokenizer "$2" --val-fraction "${4:-0}" \
    >"$T/$1.out" 2>"$T/$1.err"
}

ingest g-gen "hf:$T/gpt2.json" "$TEXT"
ok $? "ingest text genesis.txt --tokenizer hf:gpt2.json (GPT-2's regex)"
[ "$(wc -l <"$T/g-gen.out")" -eq 1 ] && grep -q "(hf:$T/gpt2.json, vocab 8[0-9][0-9], uint16)" "$T/g-gen.out" &&
  [ ! -s "$T/g-gen.err" ]
ok $? "one summary line naming hf:gpt2.json, its vocabulary, uint16; nothing on stderr"
diag "$(cat "$T/g-gen.out" "$T/g-gen.err")"
ingest g-odd "hf:$T/gpt2.json" "$T/odd.txt"
ok $? "hf:gpt2.json on the awkward text"
ingest v-gen "hf:$T/gpt2dir" "$TEXT"
ok $? "hf:DIR with GPT-2's vocab.json + merges.txt"
ingest v-odd "hf:$T/gpt2dir" "$T/odd.txt"
ingest l-gen "hf:$T/llama3.json" "$TEXT"
ok $? "hf:llama3.json (Split regex of Llama 3, ignore_merges, special tokens)"
ingest l-odd "hf:$T/llama3.json" "$T/odd.txt"
ingest l-val "hf:$T/llama3.json" "$T/odd.txt" 0.3
ingest big1 "hf:$T/gpt2.json" "$T/big1.txt"
ingest big2 "hf:$T/gpt2.json" "$T/big2.txt"
ok $? "the 4.2 MB texts, two blocks each"
cp "$T/llama3.json" "$T/dir-tj.json" && mkdir "$T/tjdir" && cp "$T/llama3.json" "$T/tjdir/tokenizer.json" &&
  cp "$T/gpt2dir/vocab.json" "$T/gpt2dir/merges.txt" "$T/tjdir/" && ingest d-gen "hf:$T/tjdir" "$TEXT"
ok $? "hf:DIR with tokenizer.json (and GPT-2's files beside it: tokenizer.json wins)"

# ---- decode(encode(x)) == x through gridtrain's tokenizer API, whole texts
# ---- (benchmarks/bench_tokenizer, built by make: exit 0 is VALID); its ids
# ---- are the package's too (checked below)
BT=$GT_BUILDDIR/benchmarks/bench_tokenizer
rt=0
for c in "gpt2.json:$TEXT:g-gen" "gpt2.json:$T/odd.txt:g-odd" "gpt2dir:$T/odd.txt:v-odd"; do
  tk=${c%%:*} rest=${c#*:}
  "$BT" "hf:$T/$tk" "${rest%:*}" --repeat 1 --ids "$T/rt-${rest##*:}.ids" >"$T/rt.out" 2>&1 || rt=1
  diag "$(tail -n 1 "$T/rt.out")"
done
"$BT" "hf:$T/llama3.json" "$T/odd.txt" --repeat 1 --ids "$T/rt-l-odd.ids" >"$T/rt.out" 2>&1
[ $? -eq 1 ] || rt=1 # <mask> takes the spaces beside it (lstrip, rstrip): not the text back
ok $rt "decode(encode(text)) == text for Genesis and the awkward text (GPT-2 files, tokenizer.json)"

# ---- token files the package wrote, with their tokenizer stored
"$GT_BIN" ingest tokens "$T/gen.bin" -o "$T/tok.h5" --tokenizer "hf:$T/gpt2.json" --val-fraction 0 \
  >"$T/tok.out" 2>&1
ok $? "ingest tokens gen.bin --tokenizer hf:gpt2.json (its vocabulary taken)"

# ---- the reference: the package's ids, token for token -----------------------------------
cat >"$T/check.py" <<'EOF'
import json, math, sys
import h5py, numpy as np
from tokenizers import Tokenizer, models, pre_tokenizers, decoders
d, text_path = sys.argv[1], sys.argv[2]
ref = {"g": Tokenizer.from_file(f"{d}/gpt2.json"), "l": Tokenizer.from_file(f"{d}/llama3.json")}
# GPT-2's two files as the package reads them (ByteLevelBPETokenizer.from_file), with
# <|endoftext|> special, as transformers' GPT2TokenizerFast makes its bos/eos/unk token
v = Tokenizer(models.BPE.from_file(f"{d}/gpt2dir/vocab.json", f"{d}/gpt2dir/merges.txt"))
v.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
v.decoder = decoders.ByteLevel()
v.add_special_tokens(["<|endoftext|>"])
ref["v"] = v
ref["d"] = ref["l"]
files = {"gen": text_path, "odd": f"{d}/odd.txt"}
bad = []
def want(cond, what):
    if not cond:
        bad.append(what)
    return cond
memo = {}
def enc(t, s):  # the package's ids (each text once per tokenizer of ref)
    key = (next((k for k, v in ref.items() if v is t), None), s)
    if key[0] is None:
        return t.encode(s, add_special_tokens=False).ids
    if key not in memo:
        memo[key] = t.encode(s, add_special_tokens=False).ids
    return memo[key]

def check(case, tokname, parts, stored_file=None):
    """parts: {'train': text, 'val': text}"""
    t = ref[tokname]
    with h5py.File(f"{d}/{case}.h5", "r") as f:
        vocab = t.get_vocab_size(with_added_tokens=True)
        want(f.attrs["tokenizer"] == "bpe" and f.attrs["vocab_size"] == vocab,
             f"{case}: tokenizer {f.attrs['tokenizer']!r}, vocab_size {f.attrs['vocab_size']}, want bpe, {vocab}")
        stored = f["tokenizer/model"][...].tobytes()
        if stored_file:
            want(stored == open(stored_file, "rb").read(), f"{case}: the stored tokenizer.json is not the file")
        back = Tokenizer.from_str(stored.decode())
        for name, text in parts.items():
            got = f[name + "/tokens"][...].tolist()
            exp = enc(t, text)
            if not want(got == exp, f"{case} {name}: {len(got)} tokens, the package's {len(exp)}"):
                i = next((i for i in range(min(len(got), len(exp))) if got[i] != exp[i]), min(len(got), len(exp)))
                print(f"# {case} {name}: first difference at token {i}: ours {got[i-2:i+4]} "
                      f"({[t.id_to_token(x) for x in got[i-2:i+4]]}), the package's {exp[i-2:i+4]} "
                      f"({[t.id_to_token(x) for x in exp[i-2:i+4]]})")
            head = text[:20000]  # (the package takes 0.3 s for Genesis on a loaded machine)
            want(enc(back, head) == enc(t, head),
                 f"{case} {name}: the stored tokenizer.json encodes differently in the package")
            if tokname in "gv":  # (lstrip and rstrip of <mask> drop white space)
                want(t.decode(got, skip_special_tokens=False) == text,
                     f"{case} {name}: the package does not decode the ids to the text")
        print(f"# {case}: {len(f['train/tokens'])} + {len(f['val/tokens'])} tokens")

def read(p):
    return open(p, encoding="utf-8", newline="").read()
for case in ("g-gen", "g-odd", "v-gen", "v-odd", "l-gen", "l-odd", "d-gen"):
    tk, fl = case.split("-")
    check(case, tk, {"train": read(files[fl]), "val": ""},
          {"g": f"{d}/gpt2.json", "l": f"{d}/llama3.json", "d": f"{d}/llama3.json"}.get(tk))
# the validation split: at the start of the line after the last 30 % of bytes begins
data = open(files["odd"], "rb").read()
at = data.find(b"\n", len(data) - math.floor(len(data) * 0.3))
at = len(data) if at < 0 else at + 1
check("l-val", "l", {"train": data[:at].decode(), "val": data[at:].decode()})
# the big texts: Genesis x21 + the rest; the junction of two copies does not
# interact (the last lines of one with the first of the next encode apart)
g = read(text_path)
gi = enc(ref["g"], g)
j = g.rindex("\n", 0, len(g) - 2000) + 1
want(enc(ref["g"], g[j:] + g[:2000]) == enc(ref["g"], g[j:]) + enc(ref["g"], g[:2000]),
     "the package: Genesis's end and start interact; the big texts' reference is wrong")
for name in ("big1", "big2"):
    text = read(f"{d}/{name}.txt")
    exp = gi * 21 + enc(ref["g"], text[21 * len(g):])
    with h5py.File(f"{d}/{name}.h5", "r") as f:
        got = f["train/tokens"][...]
    same = len(got) == len(exp) and bool((got == np.asarray(exp)).all())
    if not want(same, f"{name}: {len(got)} tokens differ from the whole text's {len(exp)}"):
        i = int(np.argmax(got[:len(exp)] != np.asarray(exp[:len(got)])))
        print(f"# {name}: first difference at token {i}")
    print(f"# {name}: {len(got)} tokens")
# gt_tokenizer_encode on whole texts (benchmarks/bench_tokenizer --ids)
for case in ("g-gen", "g-odd", "v-odd", "l-odd"):
    tk, fl = case.split("-")
    got = np.fromfile(f"{d}/rt-{case}.ids", dtype="<u4").tolist()
    want(got == enc(ref[tk], read(files[fl])), f"{case}: gt_tokenizer_encode's ids are not the package's")
# ingest tokens: the ids as written, tokenizer bpe with its tokenizer.json
with h5py.File(f"{d}/tok.h5", "r") as f:
    want(f["train/tokens"][...].tolist() == enc(ref["g"], g) and f.attrs["tokenizer"] == "bpe" and
         f["tokenizer/model"][...].tobytes() == open(f"{d}/gpt2.json", "rb").read() and
         f.attrs["vocab_size"] == ref["g"].get_vocab_size(), "ingest tokens --tokenizer hf: the file")
for b in bad:
    print("#", b)
sys.exit(1 if bad else 0)
EOF
"$PYTHON_REF" "$T/check.py" "$T" "$TEXT" >"$T/check.out" 2>&1
ok $? "every file's tokens are the package's, token for token; the stored tokenizer.json is the package's; the big texts encode as a whole; the token file keeps its tokens and stores the tokenizer"
sed 's/^/#   /' "$T/check.out"

# ---- gridtrain sample decodes with the dataset's tokenizer: the ids it
# ---- draws (--ids) decode to the text it prints, as a byte-level decoder
# ---- written here from GPT-2's byte map decodes them
V=$(sed -n 's/.*, vocab \([0-9]*\), uint16.*/\1/p' "$T/g-gen.out")
PROMPT=$(printf 'In the beginning <|endoftext|> caf\303\251  1234 \360\237\216\211')
run_mpi 1 120 "$GT_BIN" train "$GT_SRCDIR/tests/decks/tiny.in" data.train="$T/g-gen.h5" \
  model.vocab="$V" model.seq_len=64 run.steps=1 checkpoint.dir="$T/ck" >"$T/train.out" 2>&1 &&
  run_mpi 1 120 "$GT_BIN" sample "$T/ck" --prompt "$PROMPT" --tokens 40 --seed 5 >"$T/s.out" 2>"$T/s.err" &&
  run_mpi 1 120 "$GT_BIN" sample "$T/ck" --prompt "$PROMPT" --tokens 40 --seed 5 --ids >"$T/s.ids" 2>"$T/s2.err" &&
  "$PYTHON_REF" - "$T/gpt2.json" "$T/s.out" "$T/s.ids" "$PROMPT" <<'PY'
import json, sys
cfg = json.load(open(sys.argv[1]))
def byte_map():  # GPT-2's bytes -> characters, written out
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    other = [b for b in range(256) if b not in keep]
    return {**{chr(b): b for b in keep}, **{chr(256 + i): b for i, b in enumerate(other)}}
inv = byte_map()
text = {i: t for t, i in cfg["model"]["vocab"].items()}
text.update({a["id"]: a["content"] for a in cfg["added_tokens"]})
def piece(t):
    return bytes(inv[c] for c in t) if all(c in inv for c in t) else t.encode()
ids = [int(x) for x in open(sys.argv[3]).read().split()]
want = sys.argv[4].encode() + b"".join(piece(text[i]) for i in ids) + b"\n"
got = open(sys.argv[2], "rb").read()
print(f"# {len(ids)} new ids; the printed text is the prompt and their bytes: {got == want}")
sys.exit(0 if got == want and len(ids) == 40 else 1)
PY
ok $? "gridtrain sample on a model trained on the BPE dataset: the printed text is the prompt and the drawn ids' bytes"
diag "$(cat "$T/s.err")"

# ---- errors: exit 2, one line naming the key, nothing left (E-ING-07) ------------------------
expect_ingest_error "a file that is not JSON (E-ING-07)" "'$T/odd.txt' is not JSON" \
  text "$TEXT" -o "$T/x.h5" --tokenizer "hf:$T/odd.txt"
expect_ingest_error "a WordPiece tokenizer.json" "model.type is \"WordPiece\"; gridtrain reads byte-level BPE" \
  text "$TEXT" -o "$T/x.h5" --tokenizer "hf:$T/wordpiece.json"
expect_ingest_error "a normalizer" "normalizer is \"NFC\", which changes the text" \
  text "$TEXT" -o "$T/x.h5" --tokenizer "hf:$T/nfc.json"
expect_ingest_error "ByteLevel's add_prefix_space" "pre_tokenizer.add_prefix_space is true" \
  text "$TEXT" -o "$T/x.h5" --tokenizer "hf:$T/prefix.json"
expect_ingest_error "a Split that removes its matches" \
  "pre_tokenizer.pretokenizers[0].behavior is \"Removed\"" \
  text "$TEXT" -o "$T/x.h5" --tokenizer "hf:$T/split.json"
expect_ingest_error "a merge of tokens not in the vocabulary" \
  "model.merges[0] (\"zz qq\") names \"zz\", which is not in model.vocab" \
  text "$TEXT" -o "$T/x.h5" --tokenizer "hf:$T/merge.json"
expect_ingest_error "merges.txt with a line of three tokens" \
  "'$T/badmerges' (vocab.json + merges.txt): merges.txt line 3 is \"three parts here\"" \
  text "$TEXT" -o "$T/x.h5" --tokenizer "hf:$T/badmerges"
expect_ingest_error "a directory without a tokenizer" \
  "the directory '$T/empty' holds neither tokenizer.json nor vocab.json and merges.txt" \
  text "$TEXT" -o "$T/x.h5" --tokenizer "hf:$T/empty"
expect_ingest_error "a path that is not there" "cannot read the tokenizer hf:$T/nope.json" \
  text "$TEXT" -o "$T/x.h5" --tokenizer "hf:$T/nope.json"
expect_ingest_error "hf: without a path" "tokenizer 'hf:' names no file" \
  text "$TEXT" -o "$T/x.h5" --tokenizer hf:
head -c 3000 "$TEXT" >"$T/latin1.txt"
printf 'caf\351\n' >>"$T/latin1.txt"
expect_ingest_error "text that is not UTF-8" "input '$T/latin1.txt' is not UTF-8 text at byte 3003 (0xe9)" \
  text "$T/latin1.txt" -o "$T/x.h5" --tokenizer "hf:$T/gpt2.json" --val-fraction 0
expect_ingest_error "ingest tokens --tokenizer hf: with another --vocab" \
  "--vocab 50257 does not match the $V pieces of the tokenizer hf:$T/gpt2.json" \
  tokens "$T/gen.bin" -o "$T/x.h5" --tokenizer "hf:$T/gpt2.json" --vocab 50257

done_testing
