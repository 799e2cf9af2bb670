#!/usr/bin/python3
"""An independent plain-PyTorch reference trainer for cross-checking tessel.

It mirrors Hugging Face's GPT2LMHeadModel and LlamaForCausalLM (fp32, no dropout), and the
attention of Qwen2 (q/k/v biases) and Qwen3 (q_norm/k_norm), with the same parameter names, loads the initial weights that `tessel export --out DIR` writes (config.json +
model.safetensors), and trains with tessel's data order, loss, gradient clipping, AdamW and
Megatron's learning-rate schedule, logging one JSON line per iteration. Nothing here is shared
with tessel's C++ code, so agreement between the two is evidence that both are right.

Usage: see tools/crosscheck/README.md. Needs torch and numpy only (no transformers, no
safetensors module: safetensors_io.py reads and writes the format).
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from safetensors_io import read_safetensors, write_safetensors  # noqa: F401 (re-exported)

# ---------------------------------------------------------------------------------------------
# Configuration: the Hugging Face config.json keys, reduced to what the two models use.

def model_config_from_hf(hf):
    """Turns a Hugging Face config.json dict into the flat dict the models below take."""
    model_type = hf.get("model_type")
    if model_type == "gpt2":
        act = hf.get("activation_function", "gelu_new")
        if act not in ("gelu_new", "gelu_pytorch_tanh", "gelu"):
            raise ValueError(f"config.json: gpt2 activation_function {act!r} is not a GELU")
        hidden = hf["n_embd"]
        return {"arch": "gpt2", "vocab_size": hf["vocab_size"], "hidden_size": hidden,
                "num_layers": hf["n_layer"], "num_heads": hf["n_head"],
                "num_kv_heads": hf["n_head"], "ffn_size": hf.get("n_inner") or 4 * hidden,
                "max_positions": hf["n_positions"], "norm_eps": hf.get("layer_norm_epsilon", 1e-5),
                "gelu_approximate": "none" if act == "gelu" else "tanh"}
    if model_type in ("llama", "qwen2", "qwen3"):
        # Qwen2's attention always has q/k/v biases, Qwen3's always RMSNorms each head's q and k.
        if hf.get("hidden_act", "silu") != "silu":
            raise ValueError(f"config.json: {model_type} hidden_act {hf['hidden_act']!r} is not silu")
        for key in ("tie_word_embeddings", "attention_bias", "mlp_bias", "use_sliding_window"):
            if hf.get(key):
                raise ValueError(f"config.json: {model_type} {key}=true is not supported here")
        if hf.get("rope_scaling"):
            raise ValueError(f"config.json: {model_type} rope_scaling is not supported here")
        heads = hf["num_attention_heads"]
        if hf.get("head_dim", hf["hidden_size"] // heads) * heads != hf["hidden_size"]:
            raise ValueError("config.json: head_dim · num_attention_heads is not hidden_size")
        return {"arch": "llama", "vocab_size": hf["vocab_size"], "hidden_size": hf["hidden_size"],
                "qkv_bias": model_type == "qwen2", "qk_norm": model_type == "qwen3",
                "num_layers": hf["num_hidden_layers"], "num_heads": heads,
                "num_kv_heads": hf.get("num_key_value_heads") or heads,
                "ffn_size": hf["intermediate_size"],
                "max_positions": hf["max_position_embeddings"],
                "norm_eps": hf.get("rms_norm_eps", 1e-5), "rope_theta": hf.get("rope_theta", 1e4)}
    raise ValueError(f"config.json: model_type {model_type!r} is not gpt2, llama, qwen2 or qwen3")


# ---------------------------------------------------------------------------------------------
# GPT-2, as GPT2LMHeadModel.

class Conv1D(nn.Module):
    """GPT-2's linear layer: the weight is stored (in, out), so y = x @ W + b."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        out = torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight)
        return out.view(*x.shape[:-1], -1)


def causal_attention(q, k, v):
    """q (B, H, T, D), k and v (B, H, T, D): softmax(q k^T / sqrt(D) + causal mask) v."""
    T, D = q.shape[-2], q.shape[-1]
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(D)  # (B, H, T, T)
    future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
    scores = scores.masked_fill(future, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v  # (B, H, T, D)


class GPT2Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C = cfg["hidden_size"]
        self.num_heads = cfg["num_heads"]
        self.c_attn = Conv1D(C, 3 * C)  # [q | k | v], each C wide
        self.c_proj = Conv1D(C, C)

    def forward(self, x):  # x (B, T, C)
        B, T, C = x.shape
        H = self.num_heads
        q, k, v = self.c_attn(x).split(C, dim=-1)
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
        y = causal_attention(q, k, v).transpose(1, 2).reshape(B, T, C)
        return self.c_proj(y)


class GPT2MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c_fc = Conv1D(cfg["hidden_size"], cfg["ffn_size"])
        self.c_proj = Conv1D(cfg["ffn_size"], cfg["hidden_size"])
        self.approximate = cfg["gelu_approximate"]  # "gelu": exact (erf); "gelu_new": tanh

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate=self.approximate))


class GPT2Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C, eps = cfg["hidden_size"], cfg["norm_eps"]
        self.ln_1 = nn.LayerNorm(C, eps=eps)
        self.attn = GPT2Attention(cfg)
        self.ln_2 = nn.LayerNorm(C, eps=eps)
        self.mlp = GPT2MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Transformer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.wte = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.wpe = nn.Embedding(cfg["max_positions"], cfg["hidden_size"])
        self.h = nn.ModuleList(GPT2Block(cfg) for _ in range(cfg["num_layers"]))
        self.ln_f = nn.LayerNorm(cfg["hidden_size"], eps=cfg["norm_eps"])


class GPT2LMHead(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.transformer = GPT2Transformer(cfg)

    def forward(self, tokens):  # tokens (B, T) -> logits (B, T, V)
        t = self.transformer
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = t.wte(tokens) + t.wpe(positions)
        for block in t.h:
            x = block(x)
        return t.ln_f(x) @ t.wte.weight.t()  # tied LM head


# ---------------------------------------------------------------------------------------------
# Llama, as LlamaForCausalLM.

class RMSNorm(nn.Module):
    def __init__(self, size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rope_cos_sin(T, D, theta):
    """cos and sin (T, D) of angle pos · inv_freq, each half-width table repeated over both halves."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float32) / D))  # (D/2,)
    angles = torch.outer(torch.arange(T, dtype=torch.float32), inv_freq)  # (T, D/2)
    angles = torch.cat((angles, angles), dim=-1)  # (T, D)
    return angles.cos(), angles.sin()


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class LlamaAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C, H, G = cfg["hidden_size"], cfg["num_heads"], cfg["num_kv_heads"]
        D = C // H
        self.num_heads, self.num_kv_heads, self.head_dim = H, G, D
        self.rope_theta = cfg["rope_theta"]
        bias = cfg["qkv_bias"]
        self.q_proj = nn.Linear(C, H * D, bias=bias)
        self.k_proj = nn.Linear(C, G * D, bias=bias)
        self.v_proj = nn.Linear(C, G * D, bias=bias)
        self.o_proj = nn.Linear(H * D, C, bias=False)
        if cfg["qk_norm"]:  # one weight of D shared by all heads
            self.q_norm = RMSNorm(D, cfg["norm_eps"])
            self.k_norm = RMSNorm(D, cfg["norm_eps"])

    def forward(self, x):  # x (B, T, C)
        B, T, _ = x.shape
        H, G, D = self.num_heads, self.num_kv_heads, self.head_dim
        q = self.q_proj(x).view(B, T, H, D)
        k = self.k_proj(x).view(B, T, G, D)
        if hasattr(self, "q_norm"):  # over each head's D values, before RoPE
            q, k = self.q_norm(q), self.k_norm(k)
        q = q.transpose(1, 2)  # (B, H, T, D)
        k = k.transpose(1, 2)  # (B, G, T, D)
        v = self.v_proj(x).view(B, T, G, D).transpose(1, 2)
        cos, sin = rope_cos_sin(T, D, self.rope_theta)
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(H // G, dim=1)  # query head h reads kv head h // (H/G)
        v = v.repeat_interleave(H // G, dim=1)
        y = causal_attention(q, k, v).transpose(1, 2).reshape(B, T, H * D)
        return self.o_proj(y)


class LlamaMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C, Fh = cfg["hidden_size"], cfg["ffn_size"]
        self.gate_proj = nn.Linear(C, Fh, bias=False)
        self.up_proj = nn.Linear(C, Fh, bias=False)
        self.down_proj = nn.Linear(Fh, C, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C, eps = cfg["hidden_size"], cfg["norm_eps"]
        self.input_layernorm = RMSNorm(C, eps)
        self.self_attn = LlamaAttention(cfg)
        self.post_attention_layernorm = RMSNorm(C, eps)
        self.mlp = LlamaMLP(cfg)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList(LlamaDecoderLayer(cfg) for _ in range(cfg["num_layers"]))
        self.norm = RMSNorm(cfg["hidden_size"], cfg["norm_eps"])


class LlamaForCausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.model = LlamaModel(cfg)
        self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)  # untied

    def forward(self, tokens):  # tokens (B, T) -> logits (B, T, V)
        x = self.model.embed_tokens(tokens)
        for layer in self.model.layers:
            x = layer(x)
        return self.lm_head(self.model.norm(x))


def build_model(cfg):
    return GPT2LMHead(cfg) if cfg["arch"] == "gpt2" else LlamaForCausalLM(cfg)


def init_normal(model, std, seed):
    """A random init for benchmarks and self-tests: N(0, std) matrices, ones/zeros for norms/biases."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=gen) * std)
            elif name.endswith("bias"):
                p.zero_()
            else:
                p.fill_(1.0)


def load_weights(model, tensors, path):
    """Copies every parameter from {name: array}; missing, extra or misshapen names are errors."""
    params = dict(model.named_parameters())
    missing = sorted(set(params) - set(tensors))
    extra = sorted(set(tensors) - set(params))
    if missing or extra:
        raise ValueError(f"{path}: missing tensors {missing}, unexpected tensors {extra}")
    with torch.no_grad():
        for name, p in params.items():
            if tuple(tensors[name].shape) != tuple(p.shape):
                raise ValueError(f"{path}: tensor {name} has shape {list(tensors[name].shape)}, "
                                 f"the config needs {list(p.shape)}")
            p.copy_(torch.from_numpy(tensors[name]))


def load_model_folder(folder):
    """Builds the model of folder/config.json and loads folder/model.safetensors into it."""
    with open(os.path.join(folder, "config.json")) as f:
        cfg = model_config_from_hf(json.load(f))
    model = build_model(cfg)
    weights_path = os.path.join(folder, "model.safetensors")
    load_weights(model, read_safetensors(weights_path), weights_path)
    return cfg, model


# ---------------------------------------------------------------------------------------------
# Data, learning rate and the training loop, as tessel does them.

def batch(samples, iteration, global_batch):
    """Inputs and targets (G, S) of 0-based `iteration`: the dataset's samples i·G .. (i+1)·G − 1
    of seq_length + 1 tokens each (Megatron's pretraining sampler over its GPT dataset)."""
    rows = samples[iteration * global_batch:(iteration + 1) * global_batch]
    return rows[:, :-1], rows[:, 1:]


def learning_rate(steps, args):
    """Megatron's OptimizerParamScheduler.get_lr for the optimizer step after `steps` earlier ones:
    it has consumed steps·G samples (the scheduler steps after the optimizer), so the first step
    runs at the warm-up's start. Warm-up from 0, then constant/linear/cosine decay over
    --train-iters, all in samples."""
    G = args.global_batch_size
    n, warmup, decay = steps * G, args.lr_warmup_iters * G, args.train_iters * G
    if warmup > 0 and n <= warmup:
        return args.lr * n / warmup
    if args.lr_decay_style == "constant":
        return args.lr
    if n > decay:
        return args.min_lr
    ratio = (n - warmup) / (decay - warmup)
    if args.lr_decay_style == "linear":
        coeff = 1.0 - ratio
    else:
        coeff = 0.5 * (math.cos(math.pi * ratio) + 1.0)
    return args.min_lr + coeff * (args.lr - args.min_lr)


def make_adamw(model, args):
    """AdamW with weight decay on matrices (ndim >= 2) only; biases and norm weights get none."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": args.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=args.lr, betas=(args.adam_beta1, args.adam_beta2),
                             eps=args.adam_eps)


def lm_loss(model, inputs, targets, total_tokens):
    """A microbatch's share of the mean cross-entropy over the global batch's `total_tokens`:
    the objective to back-propagate and what it adds to the logged values."""
    logits = model(inputs)  # (mb, S, V)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                           reduction="sum") / total_tokens
    return loss, {"loss": loss.item()}


def train_step(model, optimizer, inputs, targets, micro_batch, clip_grad, microbatch_loss=lm_loss,
               counted_tokens=None):
    """One iteration over a global batch (G, S); returns ({logged value: sum over the
    microbatches}, grad norm before clipping). The loss is a mean over counted_tokens(inputs)
    tokens (all G·S unless a packing rule leaves some out)."""
    G, S = inputs.shape
    total = counted_tokens(inputs) if counted_tokens else G * S
    optimizer.zero_grad(set_to_none=True)
    totals = {}
    for start in range(0, G, micro_batch):
        # Each microbatch is back-propagated on its own.
        objective, logged = microbatch_loss(model, inputs[start:start + micro_batch],
                                            targets[start:start + micro_batch], total)
        objective.backward()
        for key, value in logged.items():
            totals[key] = totals.get(key, 0.0) + value
    params = [p for p in model.parameters() if p.grad is not None]
    if clip_grad > 0:
        grad_norm = torch.nn.utils.clip_grad_norm_(params, clip_grad).item()
    else:
        grad_norm = torch.linalg.vector_norm(
            torch.stack([torch.linalg.vector_norm(p.grad) for p in params])).item()
    optimizer.step()
    return totals, grad_norm


def make_parser(description):
    """The command line: the model folder, the samples and tessel's training flags."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--model", required=True, help="folder with config.json and model.safetensors")
    p.add_argument("--samples", required=True,
                   help="the train split's samples (N, S + 1) as an .npy file: "
                        "`tessel data index --dump-samples` writes them")
    p.add_argument("--micro-batch-size", type=int, required=True)
    p.add_argument("--global-batch-size", type=int, required=True)
    p.add_argument("--seq-length", type=int, required=True)
    p.add_argument("--train-iters", type=int, required=True)
    p.add_argument("--lr", type=float, required=True)
    p.add_argument("--min-lr", type=float, default=0.0)
    p.add_argument("--lr-warmup-iters", type=int, default=0)
    p.add_argument("--lr-decay-style", choices=("constant", "linear", "cosine"), default="linear")
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--adam-beta1", type=float, default=0.9)
    p.add_argument("--adam-beta2", type=float, default=0.999)
    p.add_argument("--adam-eps", type=float, default=1e-8)
    p.add_argument("--clip-grad", type=float, default=1.0, help="0 turns clipping off")
    p.add_argument("--log-json", help="write one JSON object per iteration to this file")
    p.add_argument("--threads", type=int, default=1)
    return p


def parse_args(argv=None, parser=None):
    p = parser or make_parser(__doc__.split("\n")[0])
    args = p.parse_args(argv)
    if args.global_batch_size % args.micro_batch_size != 0:
        p.error(f"--global-batch-size {args.global_batch_size} is not a multiple of "
                f"--micro-batch-size {args.micro_batch_size}")
    if args.lr_decay_style != "constant" and args.train_iters <= args.lr_warmup_iters:
        p.error("--train-iters must exceed --lr-warmup-iters for a decaying learning rate")
    return args


def check_samples(args, cfg):
    """The samples as a (N, S + 1) int64 tensor; exits naming the file when they do not fit."""
    samples = torch.from_numpy(np.load(args.samples).astype(np.int64))
    if samples.ndim != 2 or samples.shape[1] != args.seq_length + 1:
        sys.exit(f"{args.samples}: shape {tuple(samples.shape)} is not (N, --seq-length + 1)")
    if samples.shape[0] < args.train_iters * args.global_batch_size:
        sys.exit(f"{args.samples}: {samples.shape[0]} samples for {args.train_iters} iterations "
                 f"of {args.global_batch_size}")
    if int(samples.max()) >= cfg["vocab_size"]:
        sys.exit(f"{args.samples}: token {int(samples.max())} is outside the model's vocabulary")
    if args.seq_length > cfg["max_positions"]:
        sys.exit(f"{args.model}: --seq-length {args.seq_length} exceeds the "
                 f"{cfg['max_positions']} positions of the model")
    return samples


def train(args, cfg, model, microbatch_loss=lm_loss, counted_tokens=None):
    """tessel's training loop: Megatron's schedule, AdamW, one log line per iteration."""
    torch.set_num_threads(args.threads)
    samples = check_samples(args, cfg)
    optimizer = make_adamw(model, args)
    log = open(args.log_json, "w") if args.log_json else None
    for i in range(args.train_iters):
        lr = learning_rate(i, args)
        for group in optimizer.param_groups:
            group["lr"] = lr
        inputs, targets = batch(samples, i, args.global_batch_size)
        start = time.perf_counter()
        totals, grad_norm = train_step(model, optimizer, inputs, targets, args.micro_batch_size,
                                       args.clip_grad, microbatch_loss, counted_tokens)
        step_ms = (time.perf_counter() - start) * 1e3  # the optimizer step included, as tessel's
        record = {"iteration": i + 1, **totals, "grad_norm": grad_norm, "lr": lr, "step_ms": step_ms}
        extra = "".join(f" | {k} {v:.6f}" for k, v in totals.items() if k != "loss")
        print(f"iteration {i + 1:5d} | loss {totals['loss']:.6f}{extra} | "
              f"grad norm {grad_norm:.6f} | lr {lr:.3e}")
        if log:
            log.write(json.dumps(record) + "\n")
            log.flush()
    if log:
        log.close()


def main(argv=None):
    args = parse_args(argv)
    cfg, model = load_model_folder(args.model)
    train(args, cfg, model)


if __name__ == "__main__":
    main()
