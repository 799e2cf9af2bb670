#!/usr/bin/python3
"""Self-checks of qwen3_next_reference.py that can fail (exit status 1), in float64:

1. the chunked gated delta rule equals the recurrent one (to 1e-10; three chunks, the last one
   padded, with and without an initial state), and a whole model gives the same loss with either;
2. torch.autograd.gradcheck of the pieces: the chunked rule, the GDN mixer in both layouts, the
   gated attention, the MoE block with its aux loss, the MTP module;
3. a model converted between the layouts (grouped/flat GDN, per-expert/packed experts, the VL
   prefix) gives the same objective (to 1e-12), and converting back gives the same bytes;
4. causality: changing token t leaves the logits and MTP logits of the positions before it
   unchanged; two documents packed in a row give each the logits it has alone.

Usage: /usr/bin/python3 tools/crosscheck/qwen3_next_selfcheck.py [--write DIR --family F]
(--write saves a random model folder of family qwen3_next or qwen3_5_moe for other tests.)
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
import torch.nn.utils.stateless

import qwen3_next_reference as ref
from qwen3_next_layout import config_from_hf, convert, layout_of, to_model_names
from safetensors_io import write_safetensors

FAILURES = []


def check(what, value, bound):
    ok = value <= bound
    print(f"{'ok  ' if ok else 'FAIL'} {what}: {value:.3e} (bound {bound:.0e})")
    if not ok:
        FAILURES.append(what)


def tiny_hf_config(model_type="qwen3_next", mtp=1):
    text = {"hidden_size": 16, "num_hidden_layers": 4, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 32,
            "linear_conv_kernel_dim": 4, "linear_key_head_dim": 4, "linear_value_head_dim": 6,
            "linear_num_key_heads": 2, "linear_num_value_heads": 4, "num_experts": 6,
            "num_experts_per_tok": 2, "moe_intermediate_size": 8,
            "shared_expert_intermediate_size": 12, "rms_norm_eps": 1e-6,
            "max_position_embeddings": 256, "full_attention_interval": 4,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                                "partial_rotary_factor": 0.5}}
    if model_type == "qwen3_next":
        return {"model_type": "qwen3_next", "num_nextn_predict_layers": mtp, **text}
    return {"model_type": "qwen3_5_moe", "tie_word_embeddings": False,
            "text_config": {"model_type": "qwen3_5_moe_text", "mtp_num_hidden_layers": mtp, **text}}


def random_tensors(model, seed, router_std=0.2):
    """Random weights as numpy arrays under the model's names: N(0, 0.2) matrices, the router
    N(0, router_std) (wide, so that top-k is far from ties), norms and A_log/dt_bias near their
    inits but not at them (so their gradients are exercised)."""
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name, p in model.named_parameters():
        noise = torch.randn(p.shape, generator=gen, dtype=torch.float64)
        if name.endswith("mlp.gate.weight"):
            value = noise * router_std
        elif p.ndim >= 2:
            value = noise * 0.2
        elif name.endswith("A_log"):
            value = torch.rand(p.shape, generator=gen, dtype=torch.float64) * 2 - 1
        else:  # norms, dt_bias: their init plus a little
            value = p.detach().double() + 0.1 * noise
        out[name] = value.numpy()
    return out


def build(hf, tensors):
    cfg = config_from_hf(hf, "config.json")
    cfg.update(layout_of(tensors, cfg, "model.safetensors"))
    model = ref.Qwen3NextForCausalLM(cfg).double()
    ref.base.load_weights(model, to_model_names(tensors, cfg), "model.safetensors")
    model.set_aux_loss_coeff(0.01)
    return model


def objective(model, tokens):
    return ref.microbatch_objective(0.1)(model, tokens[:, :-1], tokens[:, 1:],
                                         tokens[:, 1:].numel())[0]


def delta_rule_checks():
    gen = torch.Generator().manual_seed(1)
    B, H, T, dk, dv = 2, 3, 150, 8, 5
    rnd = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)
    q, k = ref.l2norm(rnd(B, H, T, dk)), ref.l2norm(rnd(B, H, T, dk))
    v, beta = rnd(B, H, T, dv), torch.sigmoid(rnd(B, H, T))
    g = -rnd(B, H).exp()[..., None] * torch.nn.functional.softplus(rnd(B, H, T))
    for state in (None, rnd(B, H, dk, dv)):
        o1, s1 = ref.recurrent_gated_delta_rule(q, k, v, g, beta, state)
        o2, s2 = ref.chunk_gated_delta_rule(q, k, v, g, beta, state)
        label = "zero" if state is None else "random"
        check(f"chunked vs recurrent rule, outputs ({label} start state)", (o1 - o2).abs().max().item(), 1e-10)
        check(f"chunked vs recurrent rule, final state ({label} start state)", (s1 - s2).abs().max().item(), 1e-10)
    small = [x[:1, :2, :21].clone().requires_grad_() for x in (q, k, v, g, beta)]
    ok = torch.autograd.gradcheck(lambda *a: ref.chunk_gated_delta_rule(*a, chunk=8)[0], small)
    check("gradcheck of the chunked rule (chunk 8, 3 chunks, padded)", 0.0 if ok else 1.0, 0.0)


def module_gradcheck(what, module, *inputs):
    """gradcheck of module(*inputs) (its outputs summed with fixed random weights) in its inputs
    and every parameter (fast mode: along random directions)."""
    names = [n for n, _ in module.named_parameters()]
    params = [p.detach().clone().requires_grad_() for p in module.parameters()]
    inputs = [x.detach().clone().requires_grad_() for x in inputs]
    gen = torch.Generator().manual_seed(5)

    def f(*flat):
        out = torch.nn.utils.stateless.functional_call(module, dict(zip(names, flat[len(inputs):])), tuple(flat[:len(inputs)]))
        outs = out if isinstance(out, tuple) else (out,)
        return sum((o * torch.randn(o.shape, generator=gen.manual_seed(5 + i), dtype=o.dtype)).sum()
                   for i, o in enumerate(outs) if o is not None)
    ok = torch.autograd.gradcheck(f, inputs + params, atol=1e-6, fast_mode=True)
    check(f"gradcheck of {what}", 0.0 if ok else 1.0, 0.0)


def piece_checks():
    hf = tiny_hf_config()
    torch.manual_seed(0)
    model = build(hf, random_tensors(ref.Qwen3NextForCausalLM(
        {**config_from_hf(hf, "c"), "grouped": True, "packed_layers": [False] * 4,
         "mtp_packed": False}), seed=2))
    x = torch.randn(2, 11, 16, dtype=torch.float64)
    layers = model.model.layers
    module_gradcheck("the GDN mixer, grouped projections", layers[0].linear_attn, x)
    flat = build(tiny_hf_config("qwen3_5_moe"), convert(
        {n: p.detach().numpy() for n, p in model.named_parameters()}, model.cfg, False, True, True, True))
    module_gradcheck("the GDN mixer, flat projections", flat.model.layers[0].linear_attn, x)
    module_gradcheck("the gated attention", layers[3].self_attn, x)
    module_gradcheck("the MoE block and its aux loss (per-expert)", layers[1].mlp, x)
    module_gradcheck("the MoE block and its aux loss (packed)", flat.model.layers[1].mlp, x)
    module_gradcheck("the MTP module", model.mtp, x, torch.randn(2, 11, 16, dtype=torch.float64))


def layout_checks():
    hf = tiny_hf_config()
    cfg = config_from_hf(hf, "c")
    model = ref.Qwen3NextForCausalLM({**cfg, "grouped": True, "packed_layers": [False] * 4,
                                      "mtp_packed": False})
    original = random_tensors(model, seed=3)
    tokens = torch.randint(0, 32, (2, 81), generator=torch.Generator().manual_seed(4))
    base_loss = objective(build(hf, original), tokens)
    recurrent = build(hf, original)
    for m in recurrent.modules():
        if isinstance(m, ref.GatedDeltaNet):
            m.recurrent = True
    check("model objective, chunked vs recurrent rule", abs(objective(recurrent, tokens) - base_loss).item(), 1e-10)
    layouts = {"qwen3_5_moe flat, packed, VL prefix, MTP per expert": (False, True, False, True),
               "qwen3_5_moe flat, per expert": (False, False, False, False),
               "qwen3_next grouped, packed": (True, True, True, False)}
    for what, (grouped, packed, mtp_packed, prefix) in layouts.items():
        family = "qwen3_next" if grouped else "qwen3_5_moe"
        converted = convert(original, cfg, grouped, packed, mtp_packed, prefix)
        loss = objective(build(tiny_hf_config(family), converted), tokens)
        check(f"objective after conversion to {what}", abs(loss - base_loss).item(), 1e-12)
        back = convert(converted, cfg, True, False, False, False)
        same = back.keys() == original.keys() and all(
            back[n].tobytes() == original[n].tobytes() for n in original)
        check(f"converted to {what} and back: the same bytes", 0.0 if same else 1.0, 0.0)
    try:
        build(tiny_hf_config("qwen3_5_moe"), original)
        check("grouped weights under model_type qwen3_5_moe refused", 1.0, 0.0)
    except ValueError as e:
        print(f"ok   grouped weights under qwen3_5_moe refused: {e}")


def causality_check():
    hf = tiny_hf_config()
    model = build(hf, random_tensors(ref.Qwen3NextForCausalLM(
        {**config_from_hf(hf, "c"), "grouped": True, "packed_layers": [False] * 4,
         "mtp_packed": False}), seed=6))
    tokens = torch.randint(0, 32, (1, 70), generator=torch.Generator().manual_seed(7))
    changed = tokens.clone()
    changed[0, 40] = (changed[0, 40] + 1) % 32
    a, b = model(tokens), model(changed)
    # MTP position t reads token t + 1, so position 39 sees the change; 0..38 must not.
    diff = max((a[0][:, :40] - b[0][:, :40]).abs().max().item(),
               (a[1][:, :39] - b[1][:, :39]).abs().max().item())
    check("causality: logits before a changed token", diff, 0.0)


def packing_check():
    """Two documents packed in a row (--reset-attention-mask --reset-position-ids) give each the
    logits it has alone: attention, the conv history and the delta-rule state restart."""
    hf = tiny_hf_config()
    model = build(hf, random_tensors(ref.Qwen3NextForCausalLM(
        {**config_from_hf(hf, "c"), "grouped": True, "packed_layers": [False] * 4,
         "mtp_packed": False}), seed=8))
    eod = 31
    gen = torch.Generator().manual_seed(9)
    first = torch.cat((torch.randint(0, 31, (1, 29), generator=gen), torch.tensor([[eod]])), dim=1)
    second = torch.randint(0, 31, (1, 40), generator=gen)
    row = torch.cat((first, second), dim=1)
    args = argparse.Namespace(eod_token=eod, reset_attention_mask=True, reset_position_ids=True)
    packed, packed_mtp, _ = model(row, ref.Documents(row, args))
    (a, a_mtp, _), (b, b_mtp, _) = model(first), model(second)
    diff = max((packed[:, :30] - a).abs().max().item(), (packed[:, 30:] - b).abs().max().item(),
               (packed_mtp[:, :29] - a_mtp[:, :29]).abs().max().item(),
               (packed_mtp[:, 30:] - b_mtp).abs().max().item())
    check("packed documents: each document's logits as alone", diff, 1e-12)


def write_folder(folder, family, seed, vocab=32):
    hf = tiny_hf_config(family)
    (hf["text_config"] if "text_config" in hf else hf)["vocab_size"] = vocab
    cfg = config_from_hf(hf, "c")
    model = ref.Qwen3NextForCausalLM({**cfg, "grouped": True, "packed_layers": [False] * 4,
                                      "mtp_packed": False})
    grouped = family == "qwen3_next"
    tensors = convert(random_tensors(model, seed), cfg, grouped, not grouped, False, not grouped)
    os.makedirs(folder, exist_ok=True)
    write_safetensors(os.path.join(folder, "model.safetensors"),
                      {n: v.astype(np.float32) for n, v in tensors.items()})
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(hf, f, indent=2)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--write", help="write a random model folder here instead of checking")
    p.add_argument("--family", choices=("qwen3_next", "qwen3_5_moe"), default="qwen3_next")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(1)
    if args.write:
        write_folder(args.write, args.family, args.seed)
        return
    delta_rule_checks()
    piece_checks()
    layout_checks()
    causality_check()
    packing_check()
    if FAILURES:
        sys.exit(f"{len(FAILURES)} self-checks failed: {', '.join(FAILURES)}")
    print("all self-checks pass")


if __name__ == "__main__":
    main()
