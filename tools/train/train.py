"""Trains the qwen3moe of model.py on a uint16 token corpus (tools/train/prepare_corpus.sh) and exports the weights
with the lowest held-out loss as raw float32 files plus manifest.json, the input of `diskformer convert --raw`.

    python3 tools/train/train.py --data .train --out .train/raw --minutes 6
    python3 tools/train/train.py --data .train --out .train/raw --steps 3000     # a fixed number of steps

With --minutes the step count is set after timing the first steps and printed, so `--steps N` repeats the schedule
(GPU kernels are not bit-deterministic, so a repeat is close, not identical).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import Config, Qwen3Moe  # noqa: E402


def log(msg):
    print(msg, flush=True)


def load_tokens(path):
    if not os.path.exists(path):
        sys.exit(f"train: {path} is missing (run tools/train/prepare_corpus.sh first)")
    a = np.fromfile(path, dtype="<u2").astype(np.int64)
    if a.size < 1024:
        sys.exit(f"train: {path} holds only {a.size} tokens")
    return torch.from_numpy(a)


def heldout_windows(tokens, seq, n_max):
    n = min(n_max, (tokens.numel() - 1) // (seq + 1))
    return tokens[: n * (seq + 1)].view(n, seq + 1)


@torch.no_grad()
def evaluate(model, windows, batch, device, amp):
    model.eval()
    total, count = 0.0, 0
    for i in range(0, windows.shape[0], batch):
        w = windows[i:i + batch].to(device)
        with amp():
            logits, _, _ = model(w[:, :-1])
        total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1), reduction="sum").item()
        count += w[:, 1:].numel()
    model.train()
    return total / count


def lr_at(step, total, warmup, peak, floor_frac):
    if step < warmup:
        return peak * (step + 1) / warmup
    t = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (floor_frac + (1 - floor_frac) * 0.5 * (1 + math.cos(math.pi * t)))


def export(model, cfg, out_dir, name, meta):
    os.makedirs(out_dir, exist_ok=True)
    names = model.gguf_names()
    tensors = []
    state = {k: v.detach().float().cpu().contiguous() for k, v in model.state_dict().items()}
    # GGUF order as llama.cpp's converters write it: embeddings, then layer by layer, then the final norm.
    order = ["token_embd.weight"] + [k for k in state if k.startswith("blocks.")] + ["output_norm.weight"]
    for k in order:
        g = names[k]
        t = state[k]
        f = g + ".f32"
        t.numpy().astype("<f4").tofile(os.path.join(out_dir, f))
        tensors.append({"name": g, "file": f, "shape": list(t.shape)})
    manifest = {
        "arch": "qwen3moe",
        "name": name,
        "hparams": {
            "n_layer": cfg.n_layer, "n_embd": cfg.n_embd, "n_head": cfg.n_head, "n_head_kv": cfg.n_head_kv,
            "head_dim": cfg.head_dim, "n_ff": cfg.n_ff_expert * cfg.n_expert_used, "n_expert": cfg.n_expert,
            "n_expert_used": cfg.n_expert_used, "n_ff_expert": cfg.n_ff_expert,
            "context_length": cfg.context_length, "rope_freq_base": cfg.rope_freq_base, "rms_eps": cfg.rms_eps,
        },
        "training": meta,
        "tensors": tensors,
    }
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg.to_dict(), f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=".train", help="folder with train.bin and heldout.bin (uint16 ids)")
    ap.add_argument("--out", required=True, help="folder for the raw float32 export")
    ap.add_argument("--minutes", type=float, default=6.0, help="training time budget (ignored with --steps)")
    ap.add_argument("--steps", type=int, default=0, help="a fixed number of optimizer steps")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--embd", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--experts-used", type=int, default=4)
    ap.add_argument("--expert-ff", type=int, default=128)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--aux", type=float, default=0.01, help="weight of the expert balance loss")
    ap.add_argument("--evals", type=int, default=20, help="held-out evaluations over the run (the best is kept)")
    ap.add_argument("--heldout-windows", type=int, default=64)
    ap.add_argument("--name", default="diskformer kjv-moe")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()

    t_start = time.time()
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # training only; the reference disables it
    train = load_tokens(os.path.join(args.data, "train.bin"))
    held = heldout_windows(load_tokens(os.path.join(args.data, "heldout.bin")), args.seq, args.heldout_windows)
    cfg = Config(n_layer=args.layers, n_embd=args.embd, n_head=args.heads, n_head_kv=args.kv_heads,
                 head_dim=args.head_dim, n_expert=args.experts, n_expert_used=args.experts_used,
                 n_ff_expert=args.expert_ff, dropout=args.dropout)
    if int(train.max()) >= cfg.n_vocab:
        sys.exit(f"train: token id {int(train.max())} is outside the vocabulary of {cfg.n_vocab}")
    model = Qwen3Moe(cfg)
    model.init_weights(torch.Generator().manual_seed(args.seed))
    model.to(device)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"config {json.dumps(cfg.to_dict())}")
    log(f"parameters {n_params:,}; train tokens {train.numel():,}; held-out windows {held.shape[0]} x {args.seq}; "
        f"device {device}; torch {torch.__version__}")

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.95))
    if device.type == "cuda":
        def amp():
            return torch.autocast("cuda", dtype=torch.bfloat16)
    else:
        import contextlib

        def amp():
            return contextlib.nullcontext()

    gen = torch.Generator().manual_seed(args.seed + 1)
    train_dev = train.to(device)
    offsets_max = train.numel() - args.seq - 1
    budget_s = args.minutes * 60.0
    total_steps = args.steps if args.steps > 0 else None
    probe_from, probe_to = 5, 25
    best = (float("inf"), -1, None)
    eval_every = max(1, (total_steps or 1000) // args.evals)
    history = []
    t_train = time.time()
    step = 0
    t_probe = None
    while True:
        if total_steps is not None and step >= total_steps:
            break
        if total_steps is None:
            if step == probe_from:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                t_probe = time.time()
            elif step == probe_to:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                per_step = (time.time() - t_probe) / (probe_to - probe_from)
                left = budget_s - (time.time() - t_train)
                total_steps = max(probe_to + 1, probe_to + int(0.93 * left / per_step))
                eval_every = max(1, total_steps // args.evals)
                log(f"timing: {per_step * 1000:.1f} ms/step; {total_steps} steps fit {args.minutes} min "
                    f"(repeat with --steps {total_steps})")
        lr = lr_at(step, total_steps or 10 ** 9, args.warmup, args.lr, 0.1)
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, offsets_max, (args.batch,), generator=gen).to(device)
        idx = starts.unsqueeze(1) + torch.arange(args.seq + 1, device=device)
        batch = train_dev[idx]
        with amp():
            logits, aux, _ = model(batch[:, :-1])
            ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
            loss = ce + args.aux * aux / cfg.n_layer
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        last = total_steps is not None and step >= total_steps
        if step % max(10, (total_steps or 0) // 100 // 10 * 10) == 0 or last:
            el = time.time() - t_train
            log(f"step {step}/{total_steps or '?'} loss {ce.item():.4f} balance {aux.item() / cfg.n_layer:.3f} "
                f"lr {lr:.2e} {el:.0f}s {step * args.batch * args.seq / max(el, 1e-9):,.0f} tok/s")
        if total_steps is not None and (step % eval_every == 0 or last):
            hl = evaluate(model, held, 16, device, amp)
            history.append({"step": step, "train_loss": round(ce.item(), 4), "heldout_loss": round(hl, 4)})
            mark = ""
            if hl < best[0]:
                best = (hl, step, {k: v.detach().clone() for k, v in model.state_dict().items()})
                mark = " (best)"
            log(f"eval step {step}: held-out loss {hl:.4f} ppl {math.exp(hl):.2f}{mark}")
        if total_steps is None and time.time() - t_train > budget_s:
            break
        if args.steps == 0 and time.time() - t_train > budget_s * 1.15:
            log("train: over the time budget; stopping early")
            break
    if best[2] is None:
        hl = evaluate(model, held, 16, device, amp)
        best = (hl, step, {k: v.detach().clone() for k, v in model.state_dict().items()})
    model.load_state_dict(best[2])
    log(f"best held-out loss {best[0]:.4f} (ppl {math.exp(best[0]):.2f}) at step {best[1]} of {step}; "
        f"training took {time.time() - t_train:.0f}s")

    # Routing of the kept model on the held-out windows: how evenly the experts share the work.
    model.eval()
    with torch.no_grad(), amp():
        _, _, routes = model(held[:8, :-1].to(device))
    counts = torch.stack([torch.bincount(r.reshape(-1), minlength=cfg.n_expert) for r in routes]).cpu()
    share = counts.float() / counts.sum(1, keepdim=True)
    log("expert share per layer (min/max): " + " ".join(f"{s.min():.3f}/{s.max():.3f}" for s in share))

    meta = {"seed": args.seed, "steps": step, "best_step": best[1], "batch": args.batch, "seq": args.seq,
            "lr": args.lr, "dropout": args.dropout, "weight_decay": args.weight_decay, "aux": args.aux,
            "heldout_loss": round(best[0], 5), "history": history, "torch": torch.__version__}
    export(model, cfg, args.out, args.name, meta)
    log(f"exported to {args.out} ({time.time() - t_start:.0f}s in all)")


if __name__ == "__main__":
    main()
