"""Tiny random Hugging Face models for tests/io/test_hf_import.sh: make_hf.py KIND OUT_DIR.

KIND: gpt2 (tied), gpt2-untied, llama (GQA 4/2, untied, rope_theta 5e5, llama3
scaling, intermediate_size 37), llama-sharded (same, max_shard_size small),
llama-bf16 (same, saved in bfloat16), llama-tied, llama-even (intermediate_size 48:
tensor parallelism over 2 ranks splits it), llama-tok (llama-even with a vocabulary of
300, for a byte-level BPE tokenizer the test trains), mixtral (GQA 4/2, 4 experts of 24
units, top 2, untied). Sizes are the smallest that
exercise each mapping (q/k/v of different row counts, an odd MLP width).
"""
import sys

import torch
import transformers as tf



def make(kind, out=None):
    """The model of KIND (random, seeded); saved to out when given."""
    torch.manual_seed(1234)
    if kind.startswith("gpt2"):
        cfg = tf.GPT2Config(vocab_size=101, n_positions=32, n_embd=24, n_layer=2, n_head=4,
                            tie_word_embeddings=(kind == "gpt2"))
        model = tf.GPT2LMHeadModel(cfg)
    elif kind == "mixtral":
        cfg = tf.MixtralConfig(vocab_size=103, hidden_size=32, intermediate_size=24,
                               num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                               num_local_experts=4, num_experts_per_tok=2,
                               max_position_embeddings=64, rope_theta=500000.0, rms_norm_eps=1e-5,
                               sliding_window=None, router_aux_loss_coef=0.02,
                               tie_word_embeddings=False)
        model = tf.MixtralForCausalLM(cfg)
    else:
        cfg = tf.LlamaConfig(vocab_size=300 if kind == "llama-tok" else 103, hidden_size=32,
                             intermediate_size=48 if kind in ("llama-even", "llama-tok") else 37,
                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                             max_position_embeddings=64, rope_theta=500000.0, rms_norm_eps=1e-5,
                             tie_word_embeddings=(kind == "llama-tied"),
                             rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                           "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                           "original_max_position_embeddings": 16})
        model = tf.LlamaForCausalLM(cfg)
    with torch.no_grad():  # random norms and biases too: no mapping hides behind 1s and 0s
        for p in model.parameters():
            p.normal_(0.0, 0.5)
    if kind == "llama-bf16":
        model = model.to(torch.bfloat16)
    if out is not None:
        shard = "2KB" if kind == "llama-sharded" else "10GB"
        model.save_pretrained(out, safe_serialization=True, max_shard_size=shard)
    return model


if __name__ == "__main__":
    make(sys.argv[1], sys.argv[2])
