"""The reference outputs of a trained GGUF: the PyTorch model of model.py run on the file's dequantized weights,
with diskformer's CPU rounding (model.Numerics), writes greedy continuations of held-out prompts and the
perplexity of a fixed held-out token span. tests/trained checks the engine against this file.

    python3 tools/train/reference.py --gguf models/kjv-moe.gguf --data .train -o models/kjv-moe.reference.json

How closely the engine can follow it, measured on kjv-moe.gguf with both sides teacher-forced on the 10 prompts and
their continuations (640 positions; logits' standard deviation about 4.4): against this emulation computed in float64,
the engine's logits differ by max 0.066 / mean 0.0009 after one layer (the file cut to 1 block) and max 0.74 / mean
0.027 after all eight; this float32 reference differs from the same float64 run by as much (0.071 / 0.0014 after one
layer, 1.2 / 0.029 after eight), and from itself run with another batch shape by about half that after eight.
Differences carry no bias and no sign of a mismatched step (a norm epsilon of 1e-5 instead of 1e-6 moves the one-layer
logits by mean 0.021, 24 times the engine's difference; RoPE angles computed in float64 instead of ggml's way move
them by 0.0008, within the noise): they start as float32 rounding and grow because a last-bit change moves a Q8_0
activation code by a whole step (1/127 of its block's largest value) and now and then a router's top-4. Between any
two of these runs the top-2 logit margin moves by 0.013 (median; 0.036 at the 90th percentile), so near-ties below
~0.02 fall either way: where the engine parts from the committed (CUDA) reference, margins 0.0057 and 0.0145, the CPU
float32 and float64 runs each side with the engine on one and with CUDA on the other. A 64-token match on all 10
prompts would need an exact emulation of the engine's accumulation order, not a better model of its rounding.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_file import GGUFFile, Q4_0, Q8_0, piece_text  # noqa: E402
from model import Config, Numerics, Qwen3Moe  # noqa: E402


def model_from_gguf(g: GGUFFile, device) -> Qwen3Moe:
    md = g.metadata
    if md.get("general.architecture") != "qwen3moe":
        sys.exit(f"reference: {g.path} is not a qwen3moe model")
    a = "qwen3moe."
    cfg = Config(n_vocab=len(md["tokenizer.ggml.tokens"]), n_layer=md[a + "block_count"],
                 n_embd=md[a + "embedding_length"], n_head=md[a + "attention.head_count"],
                 n_head_kv=md[a + "attention.head_count_kv"], head_dim=md[a + "attention.key_length"],
                 n_expert=md[a + "expert_count"], n_expert_used=md[a + "expert_used_count"],
                 n_ff_expert=md[a + "expert_feed_forward_length"], context_length=md[a + "context_length"],
                 rope_freq_base=md[a + "rope.freq_base"], rms_eps=md[a + "attention.layer_norm_rms_epsilon"],
                 dropout=0.0)
    if "output.weight" in g.tensors:
        sys.exit(f"reference: {g.path} has an untied output.weight; model.py ties the head to token_embd")
    m = Qwen3Moe(cfg)
    names = m.gguf_names()
    state = {k: torch.from_numpy(g.tensor(v)) for k, v in names.items()}
    m.load_state_dict(state, strict=True)
    quantized = any(t[1] in (Q4_0, Q8_0) for t in g.tensors.values())
    m.numerics = Numerics(q8_activations=quantized, f16_attention=True, ggml_rope=True)
    return m.to(device).eval()


@torch.no_grad()
def greedy(m, prompts, n, device):
    """Greedy continuations of all prompts at once: sequences right-padded, so that causal attention keeps the
    padding out of every real position; each step recomputes the whole sequences."""
    seqs = [list(p) for p in prompts]
    outs, margins = [[] for _ in seqs], [[] for _ in seqs]
    for _ in range(n):
        width = max(len(s) for s in seqs)
        batch = torch.zeros(len(seqs), width, dtype=torch.long)
        for b, s in enumerate(seqs):
            batch[b, :len(s)] = torch.tensor(s)
        logits, _, _ = m(batch.to(device))
        for b, s in enumerate(seqs):
            last = logits[b, len(s) - 1]
            top2 = last.topk(2)
            margins[b].append(float(top2.values[0] - top2.values[1]))
            nxt = int(torch.argmax(last))
            outs[b].append(nxt)
            s.append(nxt)
    return outs, margins


@torch.no_grad()
def perplexity(m, ids, device):
    t = torch.tensor([ids], device=device)
    logits, _, routes = m(t)
    nll = F.cross_entropy(logits[0, :-1].double(), t[0, 1:], reduction="sum").item()
    return math.exp(nll / (len(ids) - 1)), routes


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--data", default=".train", help="folder with heldout.bin and prompts.json")
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--n-predict", type=int, default=64)
    ap.add_argument("--ppl-tokens", type=int, default=512, help="held-out span for the perplexity, from its start")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()

    t0 = time.time()
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 products, as the engine computes them
    torch.backends.cudnn.allow_tf32 = False
    device = torch.device(args.device)
    g = GGUFFile(args.gguf)
    m = model_from_gguf(g, device)
    tokens, types = g.metadata["tokenizer.ggml.tokens"], g.metadata["tokenizer.ggml.token_type"]
    with open(os.path.join(args.data, "prompts.json")) as f:
        prompts = json.load(f)
    held = np.fromfile(os.path.join(args.data, "heldout.bin"), dtype="<u2").astype(np.int64)
    if held.size < args.ppl_tokens:
        sys.exit(f"reference: heldout.bin has {held.size} tokens, fewer than --ppl-tokens {args.ppl_tokens}")

    cases = []
    all_ids, all_margins = greedy(m, [p["prompt_ids"] for p in prompts], args.n_predict, device)
    for p, ids, margins in zip(prompts, all_ids, all_margins):
        text = piece_text(tokens, types, ids)
        cases.append({"prompt": p["prompt"], "prompt_ids": p["prompt_ids"], "continuation_ids": ids,
                      "continuation_text": text, "min_top2_margin": round(min(margins), 4),
                      "top2_margins": [round(x, 4) for x in margins]})
        print(f"{p['prompt']!r} -> {text!r} (smallest top-2 logit margin {min(margins):.3f})", flush=True)
    span = [int(x) for x in held[: args.ppl_tokens]]
    ppl, routes = perplexity(m, span, device)
    print(f"held-out perplexity over {len(span)} tokens: {ppl:.4f}", flush=True)

    # Routing statistics of the span: per-layer expert popularity, and how often a token reuses an expert of the
    # token before it in the same layer.
    r = routes[:, 0].cpu()  # [L, T, K]
    popularity, reuse = [], []
    for layer in r:
        c = torch.bincount(layer.reshape(-1), minlength=m.c.n_expert).float()
        popularity.append([round(float(x), 4) for x in c / c.sum()])
        same = [len(set(layer[t].tolist()) & set(layer[t - 1].tolist())) / layer.shape[1]
                for t in range(1, layer.shape[0])]
        reuse.append(round(float(np.mean(same)), 4))
    print("expert reuse between consecutive tokens per layer: " + " ".join(f"{x:.2f}" for x in reuse))

    with open(args.gguf, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    out = {
        "generator": "tools/train/reference.py",
        "model": os.path.basename(args.gguf),
        "model_sha256": sha,
        "numerics": vars(m.numerics),
        "torch": torch.__version__,
        "device": str(device),
        "n_predict": args.n_predict,
        "cases": cases,
        "perplexity": {"source": "heldout.bin", "offset": 0, "n_tokens": len(span), "token_ids": span,
                       "value": ppl},
        "routing": {"expert_share": popularity, "consecutive_reuse": reuse},
    }
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
    print(f"wrote {args.out} ({time.time() - t0:.0f}s)")


if __name__ == "__main__":
    main()
