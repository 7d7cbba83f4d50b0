"""A qwen3moe transformer in PyTorch, computed as llama.cpp's qwen3moe graph computes it.

Per layer: RMSNorm -> attention (q/k/v projections, per-head RMSNorm of q and k, NEOX RoPE, grouped-query causal
softmax attention scaled by 1/sqrt(head_dim), output projection) -> residual; RMSNorm -> router (softmax over all
experts, top-k, weights renormalized over the k) -> SwiGLU experts -> weighted sum -> residual. Then a final RMSNorm
and the output head, tied to the token embeddings (llama.cpp uses token_embd when output.weight is absent).

Parameter names map one to one onto llama.cpp's tensor names (gguf_names()); weights are stored as llama.cpp reads
them: a matrix [rows][cols] computes y = W x, expert stacks are [n_expert][rows][cols].

`Numerics` switches the forward pass to diskformer's CPU arithmetic (Q8_0-rounded activations before quantized
matrix products; f16 queries, keys and values with the online softmax and f16 accumulator of its attention; RoPE
angles advanced by repeated float32 multiplication), so that the reference computed here on a GGUF's dequantized
weights tracks the engine closely enough for greedy decoding to agree.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, asdict

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    n_vocab: int = 32000
    n_layer: int = 8
    n_embd: int = 256
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 64
    n_expert: int = 16
    n_expert_used: int = 4
    n_ff_expert: int = 128
    context_length: int = 2048
    rope_freq_base: float = 1e6
    rms_eps: float = 1e-6
    dropout: float = 0.0

    def to_dict(self):
        return asdict(self)


@dataclass
class Numerics:
    """How the forward pass rounds. The defaults are plain float arithmetic (training)."""
    q8_activations: bool = False  # inputs of products with quantized matrices rounded as Q8_0 blocks
    f16_attention: bool = False   # f16 q, k, v and the engine's online-softmax attention with an f16 accumulator
    ggml_rope: bool = False       # RoPE angles as ggml's cache computes them (float32 repeated products)


def quantize_q8_0_(x: torch.Tensor) -> torch.Tensor:
    """x rounded as the engine quantizes activations to Q8_0 (blocks of 32 along the last dimension): codes
    round-half-even(x * 127 / amax), scale amax / 127 stored as f16."""
    shape = x.shape
    b = x.reshape(-1, 32)
    amax = b.abs().amax(dim=1, keepdim=True)
    inv = torch.where(amax != 0, 127.0 / amax, torch.zeros_like(amax))
    q = torch.round(b * inv)
    d16 = (amax / 127.0).to(torch.float16).to(torch.float32)
    return (q * d16).reshape(shape)


def f16(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float16).to(torch.float32)


def online_attention_f16(q, k, v, scale):
    """Causal attention as the engine computes it on the CPU (llama.cpp's flash-attention path): keys visited in
    order with a running maximum, the output accumulated in f16. q, k, v: [B, H, T, D] float32 holding f16 values.
    Vectorized over batch, heads and query positions; sequential over keys."""
    B, H, T, D = q.shape
    s_all = (q @ k.transpose(-1, -2)) * scale  # [B, H, Tq, Tk]
    t_idx = torch.arange(T, device=q.device)
    m = torch.full((B, H, T), float("-inf"), device=q.device)
    s_sum = torch.zeros(B, H, T, device=q.device)
    acc = torch.zeros(B, H, T, D, device=q.device)
    one = torch.ones((), device=q.device)
    for j in range(T):
        s = s_all[..., j]
        valid = (t_idx >= j).view(1, 1, T)
        grow = valid & (s > m)
        ms = torch.where(grow, torch.exp(m - s), one)
        vs = torch.where(grow, one, torch.exp(s - m))
        acc = torch.where(grow.unsqueeze(-1), f16(acc * ms.unsqueeze(-1)), acc)
        upd = f16(v[:, :, j:j + 1, :] * vs.unsqueeze(-1) + acc)
        acc = torch.where(valid.unsqueeze(-1), upd, acc)
        s_sum = torch.where(valid, s_sum * ms + vs, s_sum)
        m = torch.where(grow, s, m)
    return acc * (1.0 / s_sum).unsqueeze(-1)


class RMSNorm(nn.Module):
    def __init__(self, n: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight.float()).to(x.dtype)


def rope_tables(n_pos: int, head_dim: int, base: float, device, ggml: bool):
    half = head_dim // 2
    if ggml:
        scale = torch.tensor(base, dtype=torch.float32) ** torch.tensor(-2.0 / head_dim, dtype=torch.float32)
        theta = torch.arange(n_pos, dtype=torch.float32).unsqueeze(1).repeat(1, half)
        for i in range(1, half):
            theta[:, i] = theta[:, i - 1] * scale
        theta = theta.to(device)
    else:
        inv = base ** (-torch.arange(0, half, dtype=torch.float64, device=device) * 2.0 / head_dim)
        theta = (torch.arange(n_pos, dtype=torch.float64, device=device).unsqueeze(1) * inv).float()
    return theta.cos(), theta.sin()


def apply_rope(x, cos, sin):
    """NEOX pairing: element i rotates with element i + head_dim/2. x: [B, T, H, D]; cos, sin: [T, D/2]."""
    half = x.shape[-1] // 2
    x0, x1 = x[..., :half], x[..., half:]
    c, s = cos[None, :, None, :].to(x.dtype), sin[None, :, None, :].to(x.dtype)
    return torch.cat([x0 * c - x1 * s, x0 * s + x1 * c], dim=-1)


class Attention(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.c = c
        self.wq = nn.Linear(c.n_embd, c.n_head * c.head_dim, bias=False)
        self.wk = nn.Linear(c.n_embd, c.n_head_kv * c.head_dim, bias=False)
        self.wv = nn.Linear(c.n_embd, c.n_head_kv * c.head_dim, bias=False)
        self.wo = nn.Linear(c.n_head * c.head_dim, c.n_embd, bias=False)
        self.q_norm = RMSNorm(c.head_dim, c.rms_eps)
        self.k_norm = RMSNorm(c.head_dim, c.rms_eps)

    def forward(self, x, cos, sin, num: Numerics):
        c = self.c
        B, T, _ = x.shape
        xin = quantize_q8_0_(x) if num.q8_activations else x
        q = self.wq(xin).view(B, T, c.n_head, c.head_dim)
        k = self.wk(xin).view(B, T, c.n_head_kv, c.head_dim)
        v = self.wv(xin).view(B, T, c.n_head_kv, c.head_dim)
        q = apply_rope(self.q_norm(q), cos, sin)
        k = apply_rope(self.k_norm(k), cos, sin)
        if num.f16_attention:
            q, k, v = f16(q), f16(k), f16(v)
        group = c.n_head // c.n_head_kv
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, H, T, D]
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        scale = 1.0 / math.sqrt(c.head_dim)
        if num.f16_attention:
            y = online_attention_f16(q, k, v, scale)
        elif hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # default scale: 1/sqrt(head_dim)
        else:  # PyTorch 1.x
            s = (q @ k.transpose(-1, -2)) * scale
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            s = s.masked_fill(~mask, float("-inf"))
            y = torch.softmax(s.float(), dim=-1).to(v.dtype) @ v
        y = y.transpose(1, 2).reshape(B, T, c.n_head * c.head_dim)
        if num.q8_activations:
            y = quantize_q8_0_(y)
        return self.wo(y)


class MoE(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.c = c
        self.gate_inp = nn.Linear(c.n_embd, c.n_expert, bias=False)  # the router, kept in f32 in the GGUF
        self.gate_exps = nn.Parameter(torch.empty(c.n_expert, c.n_ff_expert, c.n_embd))
        self.up_exps = nn.Parameter(torch.empty(c.n_expert, c.n_ff_expert, c.n_embd))
        self.down_exps = nn.Parameter(torch.empty(c.n_expert, c.n_embd, c.n_ff_expert))

    def route(self, x):
        """Router probabilities [N, X] (float32), the top-k experts [N, K] and their renormalized weights [N, K]."""
        probs = torch.softmax(self.gate_inp(x).float(), dim=-1)
        w, idx = probs.topk(self.c.n_expert_used, dim=-1)
        w = w / w.sum(-1, keepdim=True).clamp_min(6.103515625e-5)
        return probs, idx, w

    def forward(self, x, num: Numerics):
        c = self.c
        B, T, E = x.shape
        xf = x.reshape(B * T, E)
        probs, idx, w = self.route(xf)
        xin = quantize_q8_0_(xf) if num.q8_activations else xf
        out = torch.zeros(B * T, E, dtype=x.dtype if not num.q8_activations else torch.float32, device=x.device)
        if num.q8_activations:
            # Reference path: each token through its own k experts, summed in routing order as llama.cpp does.
            for kk in range(c.n_expert_used):
                e = idx[:, kk]
                g = torch.einsum("nd,nfd->nf", xin, self.gate_exps[e])
                u = torch.einsum("nd,nfd->nf", xin, self.up_exps[e])
                h = quantize_q8_0_(F.silu(g) * u)
                y = torch.einsum("nf,ndf->nd", h, self.down_exps[e])
                out = out + y * w[:, kk:kk + 1]
        else:
            # Training path: tokens grouped by expert, one product per expert.
            flat_e = idx.reshape(-1)
            flat_t = torch.arange(B * T, device=x.device).repeat_interleave(c.n_expert_used)
            flat_w = w.reshape(-1)
            order = torch.argsort(flat_e)
            counts = torch.bincount(flat_e, minlength=c.n_expert).tolist()
            start = 0
            for e, n in enumerate(counts):
                if n == 0:
                    continue
                sel = order[start:start + n]
                start += n
                toks = flat_t[sel]
                xe = xin[toks]
                h = F.silu(xe @ self.gate_exps[e].t()) * (xe @ self.up_exps[e].t())
                y = (h @ self.down_exps[e].t()) * flat_w[sel].unsqueeze(1).to(h.dtype)
                out.index_add_(0, toks, y.to(out.dtype))
        # Switch-style balance: fraction of routed slots per expert times mean router probability, times n_expert.
        frac = torch.bincount(idx.reshape(-1), minlength=c.n_expert).float() / idx.numel()
        aux = c.n_expert * (frac * probs.mean(0)).sum()
        return out.view(B, T, E).to(x.dtype), aux, idx.view(B, T, -1)


class Block(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.attn_norm = RMSNorm(c.n_embd, c.rms_eps)
        self.attn = Attention(c)
        self.ffn_norm = RMSNorm(c.n_embd, c.rms_eps)
        self.moe = MoE(c)
        self.drop = nn.Dropout(c.dropout)

    def forward(self, x, cos, sin, num):
        x = x + self.drop(self.attn(self.attn_norm(x), cos, sin, num))
        y, aux, idx = self.moe(self.ffn_norm(x), num)
        return x + self.drop(y), aux, idx


class Qwen3Moe(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.c = c
        self.token_embd = nn.Embedding(c.n_vocab, c.n_embd)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.n_layer))
        self.output_norm = RMSNorm(c.n_embd, c.rms_eps)
        self.numerics = Numerics()
        self._rope = {}

    def init_weights(self, generator: torch.Generator):
        std = 0.02
        out_std = std / math.sqrt(2 * self.c.n_layer)
        for name, p in self.named_parameters():
            if p.dim() < 2:
                continue
            s = out_std if name.endswith("wo.weight") or name.endswith("down_exps") else std
            with torch.no_grad():
                p.copy_(torch.randn(p.shape, generator=generator) * s)

    def rope(self, T, device):
        key = (T, str(device), self.numerics.ggml_rope)
        if key not in self._rope:
            self._rope = {key: rope_tables(T, self.c.head_dim, self.c.rope_freq_base, device, self.numerics.ggml_rope)}
        return self._rope[key]

    def forward(self, tokens):
        """tokens [B, T] -> logits [B, T, V] (float32), the summed balance loss, expert ids [L, B, T, K]."""
        x = self.token_embd(tokens)
        cos, sin = self.rope(tokens.shape[1], tokens.device)
        aux_total = 0.0
        routes = []
        for b in self.blocks:
            x, aux, idx = b(x, cos, sin, self.numerics)
            aux_total = aux_total + aux
            routes.append(idx)
        x = self.output_norm(x)
        if self.numerics.q8_activations:
            x = quantize_q8_0_(x.float())
        logits = F.linear(x, self.token_embd.weight.to(x.dtype)).float()
        return logits, aux_total, torch.stack(routes)

    def gguf_names(self):
        """Parameter name -> llama.cpp tensor name."""
        m = {"token_embd.weight": "token_embd.weight", "output_norm.weight": "output_norm.weight"}
        for i in range(self.c.n_layer):
            p, g = f"blocks.{i}.", f"blk.{i}."
            m.update({
                p + "attn_norm.weight": g + "attn_norm.weight",
                p + "attn.wq.weight": g + "attn_q.weight",
                p + "attn.wk.weight": g + "attn_k.weight",
                p + "attn.wv.weight": g + "attn_v.weight",
                p + "attn.wo.weight": g + "attn_output.weight",
                p + "attn.q_norm.weight": g + "attn_q_norm.weight",
                p + "attn.k_norm.weight": g + "attn_k_norm.weight",
                p + "ffn_norm.weight": g + "ffn_norm.weight",
                p + "moe.gate_inp.weight": g + "ffn_gate_inp.weight",
                p + "moe.gate_exps": g + "ffn_gate_exps.weight",
                p + "moe.up_exps": g + "ffn_up_exps.weight",
                p + "moe.down_exps": g + "ffn_down_exps.weight",
            })
        return m
