#!/usr/bin/python3
"""An independent plain-PyTorch Qwen3-Next / Qwen3.5-MoE text decoder for cross-checking tessel.

Written from the semantics of Hugging Face's modeling_qwen3_next.py and modeling_qwen3_5_moe.py
(fp32 or fp64, no dropout): Gated DeltaNet layers (causal depthwise conv + SiLU, l2-normed q and
k, beta = sigmoid(b), g = -exp(A_log)·softplus(a + dt_bias), the gated delta rule in its chunked
form with chunk 64, as HF's torch_chunk_gated_delta_rule, or its recurrent form, then a gated
RMSNorm with SiLU(z)); gated full attention (q_proj rows [q_h | g_h] per head, zero-centred
q_norm/k_norm before a partial RoPE, sigmoid output gate); zero-centred RMSNorms (1 + w); MoE in
every layer (softmax over all experts, top-k, renormalised) plus a sigmoid-gated shared expert;
Megatron's switch load-balancing aux loss (not HF's); and Megatron's multi-token prediction
(MTP) layer. It reads either Hugging Face layout (Qwen3-Next's grouped in_proj_qkvz/in_proj_ba
or Qwen3.5's flat in_proj_qkv/z/b/a; per-expert or packed experts; with or without the
`model.language_model.` prefix) and computes each in its own layout, and trains with tessel's
data order, loss, clipping, AdamW and schedule (torch_reference.py's loop).

Usage: as torch_reference.py (tools/crosscheck/README.md), plus --moe-aux-loss-coeff and
--mtp-loss-scaling-factor; the MTP layer count comes from config.json. The layouts and their
conversions are in qwen3_next_layout.py, the self-checks in qwen3_next_selfcheck.py.
"""
import json
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_reference as base
from qwen3_next_layout import config_from_hf, layout_of, to_model_names
from safetensors_io import read_safetensors

CHUNK = 64


class ZeroCentredRMSNorm(nn.Module):
    """Qwen3NextRMSNorm: x · rsqrt(mean(x²) + eps) · (1 + w), w initialised 0."""

    def __init__(self, size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(size))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (1.0 + self.weight)


class GatedRMSNorm(nn.Module):
    """Qwen3NextRMSNormGated: the norm first, a plain gain w (initialised 1), then · SiLU(z)."""

    def __init__(self, size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x, z):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)) * F.silu(z)


def l2norm(x, eps=1e-6):
    """FLA's l2norm: the eps inside the root."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def recurrent_gated_delta_rule(q, k, v, g, beta, state=None):
    """q, k (B, H, T, dk); v (B, H, T, dv); g, beta (B, H, T). Token by token with S (dk, dv):
    S ← e^g S; u = β (v − Sᵀk); S ← S + k uᵀ; o = Sᵀ q / √dk. Returns o and the final S."""
    B, H, T, dk = k.shape
    q = q / math.sqrt(dk)
    S = q.new_zeros(B, H, dk, v.shape[-1]) if state is None else state
    out = []
    for t in range(T):
        S = S * g[:, :, t, None, None].exp()
        u = beta[:, :, t, None] * (v[:, :, t] - (S * k[:, :, t, :, None]).sum(-2))
        S = S + k[:, :, t, :, None] * u[:, :, None, :]
        out.append((S * q[:, :, t, :, None]).sum(-2))
    return torch.stack(out, dim=2), S


def chunk_gated_delta_rule(q, k, v, g, beta, state=None, chunk=CHUNK):
    """The same function as recurrent_gated_delta_rule, in chunks of `chunk` tokens (the tail
    padded with β = 0, g = 0 rows, which change nothing). Within a chunk, c = cumsum(g),
    D[r, s] = e^(c_r − c_s) for s ≤ r (masked in log space before exp), A = strict_lower(β_r ·
    (K Kᵀ ⊙ D)); U0 = (I + A)⁻¹ (β V) and W = (I + A)⁻¹ (β e^c K); then, chunk after chunk,
    U = U0 − W S, O = (e^c Q) S + (Q Kᵀ ⊙ D) U, S ← e^(c_C) S + (e^(c_C − c) K)ᵀ U."""
    B, H, T, dk = k.shape
    dv = v.shape[-1]
    pad = (-T) % chunk
    q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q / math.sqrt(dk), k, v))
    g, beta = F.pad(g, (0, pad)), F.pad(beta, (0, pad))
    n = (T + pad) // chunk
    q, k, v = (x.reshape(B, H, n, chunk, x.shape[-1]) for x in (q, k, v))
    c = g.reshape(B, H, n, chunk).cumsum(-1)
    beta = beta.reshape(B, H, n, chunk, 1)
    lower = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    log_decay = (c[..., :, None] - c[..., None, :]).masked_fill(~lower, float("-inf"))
    D = log_decay.exp()  # (B, H, n, C, C), 0 above the diagonal
    A = (beta * (k @ k.transpose(-1, -2)) * D).tril(-1)
    eye = torch.eye(chunk, dtype=q.dtype, device=q.device)
    inverse = torch.linalg.solve_triangular(eye + A, eye.expand_as(A), upper=False,
                                            unitriangular=True)
    U0 = inverse @ (beta * v)
    W = inverse @ (beta * c[..., None].exp() * k)
    S = q.new_zeros(B, H, dk, dv) if state is None else state
    out = []
    for i in range(n):
        Qi, Ki, ci = q[:, :, i], k[:, :, i], c[:, :, i]
        U = U0[:, :, i] - W[:, :, i] @ S
        out.append((Qi * ci[..., None].exp()) @ S + ((Qi @ Ki.transpose(-1, -2)) * D[:, :, i]) @ U)
        last = ci[..., -1:]
        S = S * last[..., None].exp() + (Ki * (last - ci)[..., None].exp()).transpose(-1, -2) @ U
    return torch.cat(out, dim=2)[:, :, :T], S


class GatedDeltaNet(nn.Module):
    """Qwen3NextGatedDeltaNet (grouped projections) or Qwen3_5GatedDeltaNet (flat ones)."""

    def __init__(self, cfg, grouped):
        super().__init__()
        C, K = cfg["hidden_size"], cfg["conv_kernel"]
        self.Hk, self.Hv, self.dk, self.dv = cfg["Hk"], cfg["Hv"], cfg["dk"], cfg["dv"]
        key_dim, value_dim = self.Hk * self.dk, self.Hv * self.dv
        conv_dim = 2 * key_dim + value_dim
        self.grouped = grouped
        self.recurrent = False  # the chunked rule unless a self-check asks for the recurrent one
        if grouped:  # per key head [q | k | v of its r heads | z of its r heads], [b (r) | a (r)]
            self.in_proj_qkvz = nn.Linear(C, 2 * key_dim + 2 * value_dim, bias=False)
            self.in_proj_ba = nn.Linear(C, 2 * self.Hv, bias=False)
        else:  # [Q all heads | K all | V all], Z, B, A
            self.in_proj_qkv = nn.Linear(C, conv_dim, bias=False)
            self.in_proj_z = nn.Linear(C, value_dim, bias=False)
            self.in_proj_b = nn.Linear(C, self.Hv, bias=False)
            self.in_proj_a = nn.Linear(C, self.Hv, bias=False)
        self.conv1d = nn.Conv1d(conv_dim, conv_dim, K, groups=conv_dim, padding=K - 1, bias=False)
        self.dt_bias = nn.Parameter(torch.ones(self.Hv))
        self.A_log = nn.Parameter(torch.zeros(self.Hv))
        self.norm = GatedRMSNorm(self.dv, cfg["norm_eps"])
        self.out_proj = nn.Linear(value_dim, C, bias=False)

    def projections(self, x):  # x (B, T, C) -> q, k (B, T, Hk·dk), v, z (B, T, Hv·dv), b, a (B, T, Hv)
        B, T, _ = x.shape
        Hk, r, dk, dv = self.Hk, self.Hv // self.Hk, self.dk, self.dv
        if not self.grouped:
            q, k, v = self.in_proj_qkv(x).split([Hk * dk, Hk * dk, self.Hv * dv], dim=-1)
            return q, k, v, self.in_proj_z(x), self.in_proj_b(x), self.in_proj_a(x)
        groups = self.in_proj_qkvz(x).view(B, T, Hk, 2 * dk + 2 * r * dv)
        q, k, v, z = groups.split([dk, dk, r * dv, r * dv], dim=-1)
        b, a = self.in_proj_ba(x).view(B, T, Hk, 2 * r).split([r, r], dim=-1)
        return tuple(t.reshape(B, T, -1) for t in (q, k, v, z, b, a))

    def forward(self, x, docs=None):  # (B, T, C)
        B, T, _ = x.shape
        q, k, v, z, b, a = self.projections(x)
        mixed = torch.cat((q, k, v), dim=-1)  # (B, T, conv_dim)
        if docs is None or docs.key_start is None:
            o = self.mix(mixed, b, a)
        else:  # each document on its own: zero conv history and zero state at its start
            rows = []
            for i in range(B):
                starts = sorted(set(docs.key_start[i].tolist())) + [T]
                rows.append(torch.cat([self.mix(mixed[i:i + 1, s:e], b[i:i + 1, s:e], a[i:i + 1, s:e])
                                       for s, e in zip(starts[:-1], starts[1:])], dim=1))
            o = torch.cat(rows, dim=0)
        o = self.norm(o, z.reshape(B, T, self.Hv, self.dv))
        return self.out_proj(o.reshape(B, T, -1))

    def mix(self, mixed, b, a):  # (B, T, conv_dim), (B, T, Hv) x 2 -> (B, T, Hv, dv)
        B, T, _ = mixed.shape
        mixed = F.silu(self.conv1d(mixed.transpose(1, 2))[:, :, :T]).transpose(1, 2)  # causal
        q, k, v = mixed.split([self.Hk * self.dk, self.Hk * self.dk, self.Hv * self.dv], dim=-1)
        q = l2norm(q.reshape(B, T, self.Hk, self.dk))
        k = l2norm(k.reshape(B, T, self.Hk, self.dk))
        v = v.reshape(B, T, self.Hv, self.dv)
        beta = b.sigmoid()
        g = -self.A_log.exp() * F.softplus(a + self.dt_bias)  # (B, T, Hv), ≤ 0
        r = self.Hv // self.Hk  # v head j reads key head j // r
        q, k = q.repeat_interleave(r, dim=2), k.repeat_interleave(r, dim=2)
        rule = recurrent_gated_delta_rule if self.recurrent else chunk_gated_delta_rule
        o, _ = rule(*(t.transpose(1, 2) for t in (q, k, v, g, beta)))  # (B, Hv, T, dv)
        return o.transpose(1, 2)


def partial_rope(x, theta, rot, positions):
    """Rotate-half RoPE on the first `rot` dims of x (B, H, T, D), inv_freq = θ^(−2i/rot), at
    positions (B, T)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, rot, 2, dtype=x.dtype) / rot))
    angles = positions.to(x.dtype)[..., None] * inv_freq  # (B, T, rot/2)
    angles = torch.cat((angles, angles), dim=-1)[:, None]  # (B, 1, T, rot)
    head, rest = x[..., :rot], x[..., rot:]
    return torch.cat((head * angles.cos() + base.rotate_half(head) * angles.sin(), rest), dim=-1)


class GatedAttention(nn.Module):
    """Qwen3NextAttention: GQA with q_proj rows [q_h | g_h] per head and a sigmoid output gate."""

    def __init__(self, cfg):
        super().__init__()
        C, H, G, D = cfg["hidden_size"], cfg["num_heads"], cfg["num_kv_heads"], cfg["head_dim"]
        self.H, self.G, self.D = H, G, D
        self.theta, self.rot = cfg["rope_theta"], cfg["rotary_dim"]
        self.q_proj = nn.Linear(C, 2 * H * D, bias=False)
        self.k_proj = nn.Linear(C, G * D, bias=False)
        self.v_proj = nn.Linear(C, G * D, bias=False)
        self.o_proj = nn.Linear(H * D, C, bias=False)
        self.q_norm = ZeroCentredRMSNorm(D, cfg["norm_eps"])
        self.k_norm = ZeroCentredRMSNorm(D, cfg["norm_eps"])

    def forward(self, x, docs=None):  # (B, T, C)
        B, T, _ = x.shape
        H, G, D = self.H, self.G, self.D
        positions = torch.arange(T).expand(B, T) if docs is None else docs.positions
        query, gate = self.q_proj(x).view(B, T, H, 2 * D).chunk(2, dim=-1)
        q = self.q_norm(query).transpose(1, 2)  # (B, H, T, D), normed before RoPE
        k = self.k_norm(self.k_proj(x).view(B, T, G, D)).transpose(1, 2)
        v = self.v_proj(x).view(B, T, G, D).transpose(1, 2)
        q, k = (partial_rope(t, self.theta, self.rot, positions) for t in (q, k))
        k, v = k.repeat_interleave(H // G, dim=1), v.repeat_interleave(H // G, dim=1)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(D)  # (B, H, T, T)
        key = torch.arange(T)
        hidden = key[None, :] > key[:, None]  # the future
        if docs is not None and docs.key_start is not None:  # and earlier documents
            hidden = hidden | (key[None, None, :] < docs.key_start[:, :, None])
        scores = scores.masked_fill(hidden if hidden.ndim == 2 else hidden[:, None], float("-inf"))
        y = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, H * D)
        return self.o_proj(y * torch.sigmoid(gate.reshape(B, T, H * D)))


class PackedExperts(nn.Module):
    """Qwen3NextExperts as transformers v5 holds them: gate_up_proj (E, 2I, C), down_proj (E, C, I)."""

    def __init__(self, E, C, I):
        super().__init__()
        self.gate_up_proj = nn.Parameter(torch.zeros(E, 2 * I, C))
        self.down_proj = nn.Parameter(torch.zeros(E, C, I))

    def weights(self, e):  # gate (I, C), up (I, C), down (C, I)
        gate, up = self.gate_up_proj[e].chunk(2, dim=0)
        return gate, up, self.down_proj[e]


class ExpertList(nn.ModuleList):
    """Per-expert checkpoints: experts.{e}.{gate,up,down}_proj.weight."""

    def weights(self, e):
        m = self[e]
        return m.gate_proj.weight, m.up_proj.weight, m.down_proj.weight


def mlp(size_in, size_mid):
    return base.LlamaMLP({"hidden_size": size_in, "ffn_size": size_mid})


class SparseMoe(nn.Module):
    """Qwen3NextSparseMoeBlock: routed experts + sigmoid(x·wᵀ) · shared expert. forward returns
    (output, Megatron's aux loss of these tokens)."""

    def __init__(self, cfg, packed):
        super().__init__()
        C, E, I = cfg["hidden_size"], cfg["num_experts"], cfg["moe_ffn_size"]
        self.E, self.k, self.renormalise = E, cfg["topk"], cfg["norm_topk_prob"]
        self.aux_coeff = 0.0  # set by the trainer (--moe-aux-loss-coeff)
        self.gate = nn.Linear(C, E, bias=False)
        self.experts = PackedExperts(E, C, I) if packed else ExpertList(mlp(C, I) for _ in range(E))
        self.shared_expert = mlp(C, cfg["shared_ffn_size"])
        self.shared_expert_gate = nn.Linear(C, 1, bias=False)

    def forward(self, x):  # (B, T, C)
        B, T, C = x.shape
        x = x.reshape(-1, C)
        probs = torch.softmax(self.gate(x), dim=-1)  # (N, E) over all experts
        weights, chosen = torch.topk(probs, self.k, dim=-1)  # (N, k)
        if self.renormalise:
            weights = weights / weights.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        for e in range(self.E):
            rows, slot = torch.where(chosen == e)
            if rows.numel() == 0:
                continue
            gate, up, down = self.experts.weights(e)
            h = F.silu(x[rows] @ gate.t()) * (x[rows] @ up.t())
            out = out.index_add(0, rows, (h @ down.t()) * weights[rows, slot, None])
        out = out + torch.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)
        aux = x.new_zeros(())
        if self.aux_coeff > 0:
            # switch_load_balancing_loss_func: coeff · E · Σ_e f_e P_e, f_e = the share of the
            # N·k choices that went to e (no gradient), P_e = the mean probability of e.
            N = x.shape[0]
            f = torch.bincount(chosen.reshape(-1), minlength=self.E).to(x.dtype) / (N * self.k)
            aux = self.aux_coeff * self.E * (f * probs.mean(0)).sum()
        return out.view(B, T, C), aux


class DecoderLayer(nn.Module):
    def __init__(self, cfg, linear, grouped, packed):
        super().__init__()
        C, eps = cfg["hidden_size"], cfg["norm_eps"]
        self.input_layernorm = ZeroCentredRMSNorm(C, eps)
        if linear:
            self.linear_attn = GatedDeltaNet(cfg, grouped)
        else:
            self.self_attn = GatedAttention(cfg)
        self.post_attention_layernorm = ZeroCentredRMSNorm(C, eps)
        self.mlp = SparseMoe(cfg, packed)

    def forward(self, x, docs=None):  # (B, T, C) -> (B, T, C), aux loss
        mixer = self.linear_attn if hasattr(self, "linear_attn") else self.self_attn
        x = x + mixer(self.input_layernorm(x), docs)
        y, aux = self.mlp(self.post_attention_layernorm(x))
        return x + y, aux


class Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C, eps = cfg["hidden_size"], cfg["norm_eps"]
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], C)
        self.layers = nn.ModuleList(
            DecoderLayer(cfg, linear, cfg["grouped"], packed)
            for linear, packed in zip(cfg["linear_layers"], cfg["packed_layers"]))
        self.norm = ZeroCentredRMSNorm(C, eps)


class MultiTokenPrediction(nn.Module):
    """One MTP module (Megatron's, named as in the Qwen checkpoints): the next token's embedding
    and the main model's normed hidden state, each normed, concatenated [embedding | hidden],
    projected by fc, then one full-attention + MoE layer and a final norm."""

    def __init__(self, cfg):
        super().__init__()
        C, eps = cfg["hidden_size"], cfg["norm_eps"]
        self.pre_fc_norm_embedding = ZeroCentredRMSNorm(C, eps)
        self.pre_fc_norm_hidden = ZeroCentredRMSNorm(C, eps)
        self.fc = nn.Linear(2 * C, C, bias=False)
        self.layers = nn.ModuleList([DecoderLayer(cfg, False, cfg["grouped"], cfg["mtp_packed"])])
        self.norm = ZeroCentredRMSNorm(C, eps)

    def forward(self, next_embedding, hidden, docs=None):
        m = self.fc(torch.cat((self.pre_fc_norm_embedding(next_embedding),
                               self.pre_fc_norm_hidden(hidden)), dim=-1))
        m, aux = self.layers[0](m, docs)
        return self.norm(m), aux


class Qwen3NextForCausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = Model(cfg)
        if not cfg["tied"]:
            self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)
        if cfg["mtp_layers"]:
            self.mtp = MultiTokenPrediction(cfg)

    def head(self, h):
        weight = self.model.embed_tokens.weight if self.cfg["tied"] else self.lm_head.weight
        return h @ weight.t()

    def forward(self, tokens, docs=None):
        """tokens (B, T) -> logits (B, T, V), the MTP logits (B, T, V) or None (position t
        predicts token t + 2; the last position has no label), the layers' summed aux loss.
        docs (Documents) packs documents into the rows."""
        x = self.model.embed_tokens(tokens)
        aux = x.new_zeros(())
        for layer in self.model.layers:
            x, layer_aux = layer(x, docs)
            aux = aux + layer_aux
        h = self.model.norm(x)
        mtp_logits = None
        if self.cfg["mtp_layers"]:
            # Megatron's roll_tensor: ids shifted left by one, the last position 0.
            next_ids = torch.cat((tokens[:, 1:], torch.zeros_like(tokens[:, :1])), dim=1)
            m, mtp_aux = self.mtp(self.model.embed_tokens(next_ids), h, docs)
            aux = aux + mtp_aux
            mtp_logits = self.head(m)
        return self.head(h), mtp_logits, aux

    def set_aux_loss_coeff(self, coeff):
        for module in self.modules():
            if isinstance(module, SparseMoe):
                module.aux_coeff = coeff


class Documents:
    """Packed documents in a microbatch's rows (B, T), as Megatron's
    get_ltor_masks_and_position_ids makes them: an eod token ends its document; key_start[b, t]
    is the first position of t's document (--reset-attention-mask: attention, the conv history
    and the delta-rule state start there; None otherwise); positions restart at each document
    with --reset-position-ids."""

    def __init__(self, inputs, args):
        B, T = inputs.shape
        index = torch.arange(T).expand(B, T)
        starts = torch.cat((torch.ones(B, 1, dtype=torch.bool), inputs[:, :-1] == args.eod_token), 1)
        first = torch.cummax(torch.where(starts, index, torch.zeros_like(index)), dim=1).values
        self.key_start = first if args.reset_attention_mask else None
        self.positions = index - first if args.reset_position_ids else index


def packs_documents(args):
    return args.reset_attention_mask or args.reset_position_ids


def counted_targets(args):
    """The tokens the loss counts in a global batch: all, or (--eod-mask-loss) those whose input
    is not an eod."""
    return lambda inputs: int((inputs != args.eod_token).sum()) if args.eod_mask_loss else inputs.numel()


def microbatch_objective(mtp_scale, args=None):
    """tessel's (and Megatron's) per-microbatch objective: its share of the mean CE over the
    global batch's counted tokens; the routers' aux loss weighted by the microbatch's share of
    the tokens; mtp_scale / mtp_layers times the mean MTP CE over its G·(S − 1) labelled
    positions. Logs the LM loss ('loss'), the mean MTP CE ('mtp_loss') and the aux loss per
    layer-forward. `args` carries the packing flags (none: plain rows)."""
    def objective(model, inputs, targets, total_tokens):
        docs = Documents(inputs, args) if args is not None and packs_documents(args) else None
        if args is not None and args.eod_mask_loss:
            targets = targets.masked_fill(inputs == args.eod_token, -100)
        logits, mtp_logits, aux = model(inputs, docs)
        mb, S = inputs.shape
        V = logits.shape[-1]
        lm = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), reduction="sum",
                             ignore_index=-100) / total_tokens
        share = mb * S / total_tokens
        forwards = len(model.model.layers) + (1 if mtp_logits is not None else 0)
        loss = lm + share * aux
        logged = {"loss": lm.item(), "aux_loss": share * aux.item() / forwards}
        if mtp_logits is not None:
            # Megatron's normalisation (multi_token_prediction.py, without
            # --calculate-per-token-loss): each microbatch's MTP CE summed over its rolled loss
            # mask, divided by that mask's count, mb·(S − 1); the schedule then averages the
            # microbatches (and DP the ranks). Every microbatch counts mb·(S − 1) here, so that is
            # the mean over the global batch's G·(S − 1) labelled positions, which tessel takes.
            mtp_tokens = total_tokens // S * (S - 1)
            mtp = F.cross_entropy(mtp_logits[:, :-1].reshape(-1, V), targets[:, 1:].reshape(-1),
                                  reduction="sum") / mtp_tokens
            loss = loss + mtp_scale / model.cfg["mtp_layers"] * mtp
            logged["mtp_loss"] = mtp.item()
        return loss, logged
    return objective


def load_model_folder(folder, dtype=torch.float32):
    """The model of folder/config.json in the layout of folder/model.safetensors, loaded."""
    config_path = os.path.join(folder, "config.json")
    with open(config_path) as f:
        hf = json.load(f)
    weights_path = os.path.join(folder, "model.safetensors")
    tensors = read_safetensors(weights_path)
    cfg = config_from_hf(hf, config_path)
    cfg.update(layout_of(tensors, cfg, weights_path))
    model = Qwen3NextForCausalLM(cfg).to(dtype)
    base.load_weights(model, {k: v for k, v in to_model_names(tensors, cfg).items()}, weights_path)
    return cfg, model


def main(argv=None):
    parser = base.make_parser(__doc__.split("\n")[0])
    parser.add_argument("--moe-aux-loss-coeff", type=float, default=0.0,
                        help="Megatron's switch load-balancing loss coefficient")
    parser.add_argument("--mtp-loss-scaling-factor", type=float, default=0.1)
    parser.add_argument("--eod-token", type=int, default=-1, help="the end-of-document id")
    parser.add_argument("--reset-position-ids", action="store_true")
    parser.add_argument("--reset-attention-mask", action="store_true")
    parser.add_argument("--eod-mask-loss", action="store_true")
    args = base.parse_args(argv, parser)
    if (packs_documents(args) or args.eod_mask_loss) and args.eod_token < 0:
        parser.error("packed documents and --eod-mask-loss need --eod-token")
    try:
        cfg, model = load_model_folder(args.model)
    except ValueError as e:
        sys.exit(str(e))
    if cfg["mtp_layers"] and args.eod_mask_loss:
        sys.exit("--eod-mask-loss with MTP is not defined here (which positions the MTP loss "
                 "counts under the mask is tessel's to say)")
    model.set_aux_loss_coeff(args.moe_aux_loss_coeff)
    base.train(args, cfg, model, microbatch_objective(args.mtp_loss_scaling_factor, args),
               counted_targets(args))


if __name__ == "__main__":
    main()
