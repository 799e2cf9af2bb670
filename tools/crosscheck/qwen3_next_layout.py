"""Qwen3-Next / Qwen3.5-MoE config.json and checkpoint layouts, for qwen3_next_reference.py.

config.json: model_type qwen3_next (Qwen3NextConfig), qwen3_5_moe (the text decoder's settings
under text_config) or qwen3_5_moe_text; RoPE settings in rope_parameters (transformers v5) or at
the top level (v4). Checkpoint layouts (numpy arrays by name):
- GDN projections: Qwen3-Next's grouped in_proj_qkvz / in_proj_ba (per key head g:
  [q_g | k_g | v of heads g·r … g·r+r−1 | z of the same heads], and [b (r) | a (r)]) or Qwen3.5's
  flat in_proj_qkv ([Q | K | V]), in_proj_z, in_proj_b, in_proj_a. The two are a row permutation
  of each other.
- experts: per expert (experts.{e}.{gate,up,down}_proj.weight) or packed (experts.gate_up_proj
  (E, 2I, C), gate rows first, and experts.down_proj (E, C, I)).
- Qwen3.5's vision-language checkpoints hold the text model under model.language_model. (and
  model.visual.*, which a text decoder ignores); MTP weights are under mtp.*.
"""
import re

import numpy as np

VL_PREFIX = "model.language_model."


def _required(j, key, source):
    if j.get(key) is None:
        raise ValueError(f"{source}: missing key '{key}'")
    return j[key]


def config_from_hf(hf, source):
    """The flat dict the model takes, from a config.json dict; a missing size or a setting the
    model lacks is an error naming `source`."""
    model_type = hf.get("model_type")
    if model_type == "qwen3_5_moe":
        text = _required(hf, "text_config", source)
        source = f"{source}: text_config"
    elif model_type in ("qwen3_next", "qwen3_5_moe_text"):
        text = hf
    else:
        raise ValueError(f"{source}: model_type {model_type!r} is not qwen3_next, qwen3_5_moe "
                         "or qwen3_5_moe_text")
    qwen3_next = model_type == "qwen3_next"
    size = {key: _required(text, key, source) for key in (
        "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
        "head_dim", "vocab_size", "linear_conv_kernel_dim", "linear_key_head_dim",
        "linear_value_head_dim", "linear_num_key_heads", "linear_num_value_heads", "num_experts",
        "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size")}
    rope = text.get("rope_parameters") or {}
    for key, want in (("hidden_act", "silu"), ("attention_bias", False),
                      ("mtp_use_dedicated_embeddings", False)):
        if text.get(key, want) != want:
            raise ValueError(f"{source}: {key} {text[key]!r} is not supported (only {want!r})")
    if rope.get("rope_type", "default") != "default" or text.get("rope_scaling"):
        raise ValueError(f"{source}: RoPE scaling is not supported")
    if qwen3_next and (text.get("mlp_only_layers") or text.get("decoder_sparse_step", 1) != 1):
        raise ValueError(f"{source}: dense (mlp_only) layers are not supported")
    L = size["num_hidden_layers"]
    types = text.get("layer_types")
    if types is None:
        interval = text.get("full_attention_interval", 4)
        types = ["linear_attention" if (i + 1) % interval else "full_attention" for i in range(L)]
    if len(types) != L or set(types) - {"linear_attention", "full_attention"}:
        raise ValueError(f"{source}: layer_types is not {L} of linear_attention/full_attention")
    mtp = text.get("mtp_num_hidden_layers", text.get("num_nextn_predict_layers", 0)) or 0
    if mtp > 1:
        raise ValueError(f"{source}: {mtp} MTP layers; the checkpoint names hold one")
    D = size["head_dim"]
    factor = rope.get("partial_rotary_factor", text.get("partial_rotary_factor", 0.25))
    if size["linear_num_value_heads"] % size["linear_num_key_heads"]:
        raise ValueError(f"{source}: linear_num_value_heads is not a multiple of "
                         "linear_num_key_heads")
    return {
        "arch": model_type, "hidden_size": size["hidden_size"], "vocab_size": size["vocab_size"],
        "num_layers": L, "linear_layers": [t == "linear_attention" for t in types],
        "num_heads": size["num_attention_heads"], "num_kv_heads": size["num_key_value_heads"],
        "head_dim": D, "rotary_dim": int(D * factor),
        "rope_theta": rope.get("rope_theta", text.get("rope_theta", 10000.0)),
        "conv_kernel": size["linear_conv_kernel_dim"], "dk": size["linear_key_head_dim"],
        "dv": size["linear_value_head_dim"], "Hk": size["linear_num_key_heads"],
        "Hv": size["linear_num_value_heads"], "num_experts": size["num_experts"],
        "topk": size["num_experts_per_tok"], "moe_ffn_size": size["moe_intermediate_size"],
        "shared_ffn_size": size["shared_expert_intermediate_size"],
        # Qwen3.5 always renormalises the top-k probabilities (its config has no such key).
        "norm_topk_prob": text.get("norm_topk_prob", True) if qwen3_next else True,
        "norm_eps": text.get("rms_norm_eps", 1e-6),
        "max_positions": text.get("max_position_embeddings", 32768),
        "tied": bool(hf.get("tie_word_embeddings", text.get("tie_word_embeddings", False))),
        "mtp_layers": mtp,
    }


def _canonical(name):
    return VL_PREFIX[:-len("language_model.")] + name[len(VL_PREFIX):] if name.startswith(VL_PREFIX) else name


def layout_of(tensors, cfg, source):
    """The file's layout: grouped or flat GDN projections (one for the whole file), packed or
    per-expert experts per MoE block, the VL prefix. A file whose GDN projections are of the
    other family than config.json's model_type is an error."""
    names = {_canonical(n) for n in tensors}
    grouped = any(n.endswith("linear_attn.in_proj_qkvz.weight") for n in names)
    flat = any(n.endswith("linear_attn.in_proj_qkv.weight") for n in names)
    if grouped and flat:
        raise ValueError(f"{source}: holds both grouped (in_proj_qkvz) and flat (in_proj_qkv) "
                         "GDN projections")
    if grouped != (cfg["arch"] == "qwen3_next") and (grouped or flat):
        raise ValueError(f"{source}: {'grouped in_proj_qkvz' if grouped else 'flat in_proj_qkv'} "
                         f"GDN projections, but config.json's model_type {cfg['arch']} has "
                         f"{'flat' if grouped else 'grouped'} ones")
    packed = lambda prefix: f"{prefix}mlp.experts.gate_up_proj" in names
    return {"grouped": grouped, "vl_prefix": any(n.startswith(VL_PREFIX) for n in tensors),
            "packed_layers": [packed(f"model.layers.{i}.") for i in range(cfg["num_layers"])],
            "mtp_packed": packed("mtp.layers.0.")}


def to_model_names(tensors, cfg):
    """The file's tensors under the model's names: the VL prefix dropped, vision weights and (for
    a model without MTP) mtp.* left out, as Hugging Face's text decoder loads them."""
    out = {}
    for name, value in tensors.items():
        if name.startswith("model.visual.") or (name.startswith("mtp.") and not cfg["mtp_layers"]):
            continue
        out[_canonical(name)] = value
    return out


def gdn_grouped_to_flat(qkvz, ba, cfg):
    """(in_proj_qkvz, in_proj_ba) -> (in_proj_qkv, in_proj_z, in_proj_b, in_proj_a)."""
    Hk, Hv, dk, dv = cfg["Hk"], cfg["Hv"], cfg["dk"], cfg["dv"]
    r, C = Hv // Hk, qkvz.shape[1]
    groups = qkvz.reshape(Hk, 2 * dk + 2 * r * dv, C)
    q, k, v, z = np.split(groups, np.cumsum([dk, dk, r * dv])[:3], axis=1)
    b, a = np.split(ba.reshape(Hk, 2 * r, C), [r], axis=1)
    flat = lambda x: x.reshape(-1, C)
    return np.concatenate([flat(q), flat(k), flat(v)]), flat(z), flat(b), flat(a)


def gdn_flat_to_grouped(qkv, z, b, a, cfg):
    """The inverse of gdn_grouped_to_flat."""
    Hk, Hv, dk, dv = cfg["Hk"], cfg["Hv"], cfg["dk"], cfg["dv"]
    r, C = Hv // Hk, qkv.shape[1]
    q, k, v = np.split(qkv, [Hk * dk, 2 * Hk * dk])
    per_group = lambda x, rows: x.reshape(Hk, rows, C)
    qkvz = np.concatenate([per_group(q, dk), per_group(k, dk), per_group(v, r * dv),
                           per_group(z, r * dv)], axis=1).reshape(-1, C)
    ba = np.concatenate([per_group(b, r), per_group(a, r)], axis=1).reshape(-1, C)
    return qkvz, ba


def convert(tensors, cfg, grouped, packed, mtp_packed, vl_prefix):
    """A checkpoint (any layout, under the model's names or the file's) in the layout asked for:
    grouped or flat GDN projections, packed or per-expert experts (main layers; MTP apart), with
    or without the VL prefix. Every value is moved, never recomputed, so converting back gives
    the same bytes."""
    src = {_canonical(n): v for n, v in tensors.items()}
    out = {}
    gdn = re.compile(r"(.*linear_attn\.)in_proj_(qkvz|ba|qkv|z|b|a)\.weight$")
    expert = re.compile(r"(.*mlp\.experts\.)(gate_up_proj|down_proj|\d+\.(gate|up|down)_proj\.weight)$")
    done = set()
    for name, value in src.items():
        m, e = gdn.match(name), expert.match(name)
        if m and m.group(1) not in done:
            p = m.group(1)
            done.add(p)
            if f"{p}in_proj_qkvz.weight" in src:
                parts = gdn_grouped_to_flat(src[f"{p}in_proj_qkvz.weight"], src[f"{p}in_proj_ba.weight"], cfg)
            else:
                parts = tuple(src[f"{p}in_proj_{s}.weight"] for s in ("qkv", "z", "b", "a"))
            if grouped:
                out[f"{p}in_proj_qkvz.weight"], out[f"{p}in_proj_ba.weight"] = gdn_flat_to_grouped(*parts, cfg)
            else:
                for s, part in zip(("qkv", "z", "b", "a"), parts):
                    out[f"{p}in_proj_{s}.weight"] = part
        elif e and e.group(1) not in done:
            p = e.group(1)
            done.add(p)
            E = cfg["num_experts"]
            if f"{p}gate_up_proj" in src:
                gate, up = np.split(src[f"{p}gate_up_proj"], 2, axis=1)
                down = src[f"{p}down_proj"]
            else:
                gate, up, down = (np.stack([src[f"{p}{i}.{w}_proj.weight"] for i in range(E)])
                                  for w in ("gate", "up", "down"))
            if (mtp_packed if p.startswith("mtp.") else packed):
                out[f"{p}gate_up_proj"] = np.concatenate([gate, up], axis=1)
                out[f"{p}down_proj"] = np.ascontiguousarray(down)
            else:
                for i in range(E):
                    for w, part in (("gate", gate), ("up", up), ("down", down)):
                        out[f"{p}{i}.{w}_proj.weight"] = np.ascontiguousarray(part[i])
        elif not m and not e:
            out[name] = value
    if vl_prefix:
        out = {(VL_PREFIX + n[len("model."):] if n.startswith("model.") else n): v
               for n, v in out.items()}
    return out


def text_config(hf):
    """The decoder's settings of any of the three model_types."""
    return hf["text_config"] if hf.get("model_type") == "qwen3_5_moe" else hf


def config_as(hf, family):
    """config.json rewritten as `family` (qwen3_next, qwen3_5_moe or qwen3_5_moe_text): the
    model_type, the MTP key and the text_config wrapper."""
    text = dict(text_config(hf))
    mtp = text.pop("mtp_num_hidden_layers", text.pop("num_nextn_predict_layers", 0))
    for key in ("architectures", "mtp_use_dedicated_embeddings"):
        text.pop(key, None)
    if family == "qwen3_next":
        return {**text, "model_type": "qwen3_next", "architectures": ["Qwen3NextForCausalLM"],
                "num_nextn_predict_layers": mtp}
    text.update(model_type="qwen3_5_moe_text", mtp_num_hidden_layers=mtp,
                mtp_use_dedicated_embeddings=False)
    text.pop("norm_topk_prob", None)
    if family == "qwen3_5_moe_text":
        return {**text, "architectures": ["Qwen3_5MoeForCausalLM"]}
    return {"model_type": "qwen3_5_moe", "architectures": ["Qwen3_5MoeForConditionalGeneration"],
            "tie_word_embeddings": text.get("tie_word_embeddings", False), "text_config": text}


def main():
    """Rewrites a model folder in another family's layout, optionally redrawing the routers."""
    import argparse
    import json
    import os
    from safetensors_io import read_safetensors, write_safetensors
    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("--family", required=True, choices=("qwen3_next", "qwen3_5_moe", "qwen3_5_moe_text"))
    p.add_argument("--packed-experts", action="store_true")
    p.add_argument("--packed-mtp-experts", action="store_true")
    p.add_argument("--router-std", type=float,
                   help="redraw every router (mlp.gate.weight) from N(0, std): cross-checks want "
                        "routers far from top-k ties (HF's N(0, 0.02) is not)")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    with open(os.path.join(args.src, "config.json")) as f:
        hf = json.load(f)
    cfg = config_from_hf(hf, os.path.join(args.src, "config.json"))
    tensors = read_safetensors(os.path.join(args.src, "model.safetensors"))
    if args.router_std is not None:
        rng = np.random.default_rng(args.seed)
        for name in sorted(tensors):
            if name.endswith("mlp.gate.weight"):
                tensors[name] = (rng.standard_normal(tensors[name].shape) * args.router_std).astype(np.float32)
    out = convert(tensors, cfg, args.family == "qwen3_next", args.packed_experts,
                  args.packed_mtp_experts, args.family == "qwen3_5_moe")
    os.makedirs(args.dst, exist_ok=True)
    write_safetensors(os.path.join(args.dst, "model.safetensors"), out)
    with open(os.path.join(args.dst, "config.json"), "w") as f:
        json.dump(config_as(hf, args.family), f, indent=2)


if __name__ == "__main__":
    main()
