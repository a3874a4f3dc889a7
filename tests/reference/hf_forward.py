#!/usr/bin/env python3
"""An independent forward pass of a Hugging Face checkpoint, in numpy (float64).

Written from the equations of the transformers modelling code of each family
(modeling_llama.py, modeling_qwen3.py, modeling_qwen2_moe.py, modeling_qwen3_moe.py,
modeling_glm4_moe.py (its router DeepSeek V3's), modeling_mixtral.py, modeling_gpt_neox.py, modeling_gptj.py, modeling_gemma2.py,
modeling_gemma3.py), reading
config.json and model.safetensors directly; nothing of hearth is used, so hearth's
logits are checked against a second implementation rather than against themselves.

    hf_forward.py MODEL_DIR IDS N_GENERATE LOGITS_OUT

IDS: comma-separated prompt token ids. Writes the logits of every prompt position
([len(IDS), vocab] float32, row-major) to LOGITS_OUT and prints a JSON object with the
N_GENERATE greedy continuation ids: {"greedy": [...]}.

    hf_forward.py --embed POOLING MODEL_DIR OUT IDS [IDS ...]

Embeddings: each IDS's final hidden states (after the model's last norm, what the LM
head reads) pooled by POOLING (last, mean or cls: the first token's) and L2-normalised,
written to OUT as [len(IDS lists), hidden_size] float32.
"""
import json
import math
import struct
import sys

import numpy as np


# The last forward pass's hidden states after the final norm ([t, hidden]), for --embed.
FINAL_HIDDEN = [None]


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        begin, end = meta["data_offsets"]
        raw = data[base + begin:base + end]
        dtype = meta["dtype"]
        if dtype == "F32":
            a = np.frombuffer(raw, dtype="<f4")
        elif dtype == "F16":
            a = np.frombuffer(raw, dtype="<f2")
        elif dtype == "BF16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise SystemExit(f"{name}: dtype {dtype} is not handled by the reference")
        out[name] = a.astype(np.float64).reshape(meta["shape"])
    return out


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def layer_norm(x, w, b, eps):
    mean = np.mean(x, axis=-1, keepdims=True)
    var = np.mean((x - mean) ** 2, axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def silu(x):
    return x / (1.0 + np.exp(-x))


_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def gelu_new(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def rope_half(x, pos, rot, theta):
    """transformers' rotate_half RoPE on the first `rot` dims of each head. x: [T, H, D]."""
    inv = 1.0 / theta ** (np.arange(0, rot, 2, dtype=np.float64) / rot)
    ang = pos[:, None] * inv[None, :]
    cos = np.concatenate([np.cos(ang), np.cos(ang)], axis=-1)[:, None, :]
    sin = np.concatenate([np.sin(ang), np.sin(ang)], axis=-1)[:, None, :]
    xr, xp = x[..., :rot], x[..., rot:]
    half = rot // 2
    rotated = np.concatenate([-xr[..., half:], xr[..., :half]], axis=-1)
    return np.concatenate([xr * cos + rotated * sin, xp], axis=-1)


def rope_every_two(x, pos, rot, theta):
    """GPT-J's rotate_every_two on the first `rot` dims of each head. x: [T, H, D]."""
    inv = 1.0 / theta ** (np.arange(0, rot, 2, dtype=np.float64) / rot)
    ang = pos[:, None] * inv[None, :]
    cos = np.repeat(np.cos(ang), 2, axis=-1)[:, None, :]
    sin = np.repeat(np.sin(ang), 2, axis=-1)[:, None, :]
    xr, xp = x[..., :rot], x[..., rot:]
    rotated = np.stack([-xr[..., 1::2], xr[..., ::2]], axis=-1).reshape(xr.shape)
    return np.concatenate([xr * cos + rotated * sin, xp], axis=-1)


def softcap(x, cap):
    """Gemma 2's soft-capping: cap * tanh(x / cap); none when cap is None or 0."""
    return cap * np.tanh(x / cap) if cap else x


def attention(q, k, v, scale=None, window=0, cap=None):
    """Causal attention, q: [T, H, D], k/v: [T, KV, D] (KV heads shared by H/KV queries);
    with a window, query i sees keys j with i - window < j <= i; scores soft-capped at
    `cap` (after the scale, before the mask) when given."""
    t, h, d = q.shape
    group = h // k.shape[1]
    k = np.repeat(k, group, axis=1)
    v = np.repeat(v, group, axis=1)
    scores = softcap(np.einsum("thd,shd->hts", q, k) * (scale if scale is not None else 1.0 / math.sqrt(d)), cap)
    mask = np.triu(np.ones((t, t), dtype=bool), k=1)
    if window:
        mask |= np.tril(np.ones((t, t), dtype=bool), k=-window)
    scores = np.where(mask[None], -np.inf, scores)
    scores -= scores.max(axis=-1, keepdims=True)
    p = np.exp(scores)
    p /= p.sum(axis=-1, keepdims=True)
    return np.einsum("hts,shd->thd", p, v).reshape(t, h * d)


def linear(x, w, b=None):
    y = x @ w.T
    return y if b is None else y + b


def swiglu_mlp(w, prefix, x):
    return linear(silu(linear(x, w[prefix + "gate_proj.weight"])) * linear(x, w[prefix + "up_proj.weight"]),
                  w[prefix + "down_proj.weight"])


def moe(cfg, w, p, h):
    """Qwen2MoeSparseMoeBlock / Qwen3MoeSparseMoeBlock / MixtralSparseMoeBlock: softmax
    over the router's logits, the top k experts (torch.topk: the larger first), their
    weights renormalised when norm_topk_prob (always for Mixtral), each expert a SwiGLU
    MLP; Qwen2-MoE adds its shared expert times sigmoid(shared_expert_gate . h)."""
    mixtral = cfg["architectures"][0] == "MixtralForCausalLM"
    if cfg["architectures"][0] == "Glm4MoeForCausalLM":
        return glm4_moe(cfg, w, p, h)
    k = cfg["num_experts_per_tok"]
    normalize = True if mixtral else cfg.get("norm_topk_prob", False)
    router = w[p + ("block_sparse_moe.gate.weight" if mixtral else "mlp.gate.weight")]
    logits = linear(h, router)
    probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    out = np.zeros_like(h)
    for t in range(h.shape[0]):
        top = np.argsort(-probs[t], kind="stable")[:k]
        weights = probs[t, top]
        if normalize:
            weights = weights / weights.sum()
        for e, wt in zip(top, weights):
            if mixtral:
                q = f"{p}block_sparse_moe.experts.{e}."
                gate, up, down = q + "w1.weight", q + "w3.weight", q + "w2.weight"
            else:
                q = f"{p}mlp.experts.{e}."
                gate, up, down = q + "gate_proj.weight", q + "up_proj.weight", q + "down_proj.weight"
            out[t] += wt * linear(silu(linear(h[t], w[gate])) * linear(h[t], w[up]), w[down])
    if cfg["architectures"][0] == "Qwen2MoeForCausalLM":
        gate = 1.0 / (1.0 + np.exp(-linear(h, w[p + "mlp.shared_expert_gate.weight"])))  # [T, 1]
        out += gate * swiglu_mlp(w, p + "mlp.shared_expert.", h)
    return out


def glm4_moe(cfg, w, p, h):
    """Glm4MoeMoE with DeepseekV3TopkRouter (one group): sigmoid scores, the top k of
    score + e_score_correction_bias, their weights the scores renormalised (norm_topk_prob,
    with DeepSeek's 1e-20) and times routed_scaling_factor; plus the shared experts, an
    ungated SwiGLU MLP of moe_intermediate_size * n_shared_experts."""
    k = cfg["num_experts_per_tok"]
    scores = 1.0 / (1.0 + np.exp(-linear(h, w[p + "mlp.gate.weight"])))
    choice = scores + w[p + "mlp.gate.e_score_correction_bias"]
    out = np.zeros_like(h)
    for t in range(h.shape[0]):
        top = np.argsort(-choice[t], kind="stable")[:k]
        weights = scores[t, top]
        if cfg.get("norm_topk_prob", True):
            weights = weights / (weights.sum() + 1e-20)
        weights = weights * cfg.get("routed_scaling_factor", 1.0)
        for e, wt in zip(top, weights):
            out[t] += wt * swiglu_mlp(w, f"{p}mlp.experts.{e}.", h[t])
    return out + swiglu_mlp(w, p + "mlp.shared_experts.", h)


def forward_llama(cfg, w, ids):
    """LlamaForCausalLM / Qwen3ForCausalLM / Qwen2MoeForCausalLM / Qwen3MoeForCausalLM /
    Glm4MoeForCausalLM / MixtralForCausalLM."""
    eps = cfg.get("rms_norm_eps", 1e-6)
    theta = cfg.get("rope_theta", 10000.0)
    n_heads = cfg["num_attention_heads"]
    n_kv = cfg.get("num_key_value_heads", n_heads)
    hd = cfg.get("head_dim") or cfg["hidden_size"] // n_heads
    arch = cfg["architectures"][0]
    qk_norm = arch in ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM") or cfg.get("use_qk_norm", False)
    experts = arch in ("Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM", "Glm4MoeForCausalLM", "MixtralForCausalLM")
    # GLM-4.5: the first first_k_dense_replace layers dense, half of each head rotated.
    dense_first = cfg.get("first_k_dense_replace", 0) if arch == "Glm4MoeForCausalLM" else 0
    rot = int(hd * cfg.get("partial_rotary_factor", 0.5 if arch == "Glm4MoeForCausalLM" else 1.0))
    t = len(ids)
    pos = np.arange(t, dtype=np.float64)
    x = w["model.embed_tokens.weight"][ids]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = linear(h, w[p + "self_attn.q_proj.weight"], w.get(p + "self_attn.q_proj.bias")).reshape(t, n_heads, hd)
        k = linear(h, w[p + "self_attn.k_proj.weight"], w.get(p + "self_attn.k_proj.bias")).reshape(t, n_kv, hd)
        v = linear(h, w[p + "self_attn.v_proj.weight"], w.get(p + "self_attn.v_proj.bias")).reshape(t, n_kv, hd)
        if qk_norm:
            q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
        q, k = rope_half(q, pos, rot, theta), rope_half(k, pos, rot, theta)
        x = x + linear(attention(q, k, v), w[p + "self_attn.o_proj.weight"])
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        if experts and i >= dense_first:
            x = x + moe(cfg, w, p, h)
            continue
        ffn = silu(linear(h, w[p + "mlp.gate_proj.weight"])) * linear(h, w[p + "mlp.up_proj.weight"])
        x = x + linear(ffn, w[p + "mlp.down_proj.weight"])
    x = rms_norm(x, w["model.norm.weight"], eps)
    FINAL_HIDDEN[0] = x
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return linear(x, head)


def forward_neox(cfg, w, ids):
    """GPTNeoXForCausalLM: fused per-head query_key_value, partial rotate_half RoPE."""
    eps = cfg.get("layer_norm_eps", 1e-5)
    theta = cfg.get("rotary_emb_base", 10000.0)
    n_heads = cfg["num_attention_heads"]
    hd = cfg["hidden_size"] // n_heads
    rot = int(hd * cfg.get("rotary_pct", 0.25))
    act = gelu if cfg.get("hidden_act", "gelu") == "gelu" else gelu_new
    parallel = cfg.get("use_parallel_residual", True)
    t = len(ids)
    pos = np.arange(t, dtype=np.float64)
    x = w["gpt_neox.embed_in.weight"][ids]
    for i in range(cfg["num_hidden_layers"]):
        p = f"gpt_neox.layers.{i}."
        h = layer_norm(x, w[p + "input_layernorm.weight"], w[p + "input_layernorm.bias"], eps)
        qkv = linear(h, w[p + "attention.query_key_value.weight"], w[p + "attention.query_key_value.bias"])
        qkv = qkv.reshape(t, n_heads, 3 * hd)
        q, k, v = qkv[..., :hd], qkv[..., hd:2 * hd], qkv[..., 2 * hd:]
        q, k = rope_half(q, pos, rot, theta), rope_half(k, pos, rot, theta)
        a = linear(attention(q, k, v), w[p + "attention.dense.weight"], w[p + "attention.dense.bias"])

        def mlp(y):
            up = act(linear(y, w[p + "mlp.dense_h_to_4h.weight"], w[p + "mlp.dense_h_to_4h.bias"]))
            return linear(up, w[p + "mlp.dense_4h_to_h.weight"], w[p + "mlp.dense_4h_to_h.bias"])

        ln2 = (p + "post_attention_layernorm.weight", p + "post_attention_layernorm.bias")
        if parallel:
            x = x + a + mlp(layer_norm(x, w[ln2[0]], w[ln2[1]], eps))
        else:
            x = x + a
            x = x + mlp(layer_norm(x, w[ln2[0]], w[ln2[1]], eps))
    x = layer_norm(x, w["gpt_neox.final_layer_norm.weight"], w["gpt_neox.final_layer_norm.bias"], eps)
    FINAL_HIDDEN[0] = x
    return linear(x, w["embed_out.weight"])


def forward_gptj(cfg, w, ids):
    """GPTJForCausalLM: one ln_1 feeds attention and MLP, rotate_every_two RoPE."""
    eps = cfg.get("layer_norm_epsilon", 1e-5)
    n_heads = cfg["n_head"]
    hd = cfg["n_embd"] // n_heads
    rot = cfg.get("rotary_dim") or hd
    act = gelu_new if cfg.get("activation_function", "gelu_new") != "gelu" else gelu
    t = len(ids)
    pos = np.arange(t, dtype=np.float64)
    x = w["transformer.wte.weight"][ids]
    for i in range(cfg["n_layer"]):
        p = f"transformer.h.{i}."
        h = layer_norm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        q = linear(h, w[p + "attn.q_proj.weight"]).reshape(t, n_heads, hd)
        k = linear(h, w[p + "attn.k_proj.weight"]).reshape(t, n_heads, hd)
        v = linear(h, w[p + "attn.v_proj.weight"]).reshape(t, n_heads, hd)
        q, k = rope_every_two(q, pos, rot, 10000.0), rope_every_two(k, pos, rot, 10000.0)
        a = linear(attention(q, k, v), w[p + "attn.out_proj.weight"])
        m = linear(act(linear(h, w[p + "mlp.fc_in.weight"], w[p + "mlp.fc_in.bias"])),
                   w[p + "mlp.fc_out.weight"], w[p + "mlp.fc_out.bias"])
        x = x + a + m
    x = layer_norm(x, w["transformer.ln_f.weight"], w["transformer.ln_f.bias"], eps)
    FINAL_HIDDEN[0] = x
    return linear(x, w["lm_head.weight"], w["lm_head.bias"])


def forward_gemma(cfg, w, ids):
    """Gemma3ForCausalLM: (1 + w) RMSNorms, scaled embeddings, q/k norms, each block's
    output normalised before it is added, GeGLU, windowed layers with their own RoPE base
    and one global layer in sliding_window_pattern, tied LM head. Gemma2ForCausalLM: the
    same without q/k norms, one RoPE base, every other layer windowed (the even ones),
    attention scores and final logits soft-capped (defaults 50 and 30)."""
    gemma2 = cfg["architectures"][0] == "Gemma2ForCausalLM"
    eps = cfg.get("rms_norm_eps", 1e-6)

    def norm(x, name):
        return rms_norm(x, 1.0 + w[name], eps)

    n_heads = cfg["num_attention_heads"]
    n_kv = cfg.get("num_key_value_heads", n_heads)
    hd = cfg.get("head_dim", 256)
    scale = cfg.get("query_pre_attn_scalar", 256) ** -0.5
    pattern = 2 if gemma2 else cfg.get("sliding_window_pattern", 6)
    attn_cap = cfg.get("attn_logit_softcapping", 50.0 if gemma2 else None)
    final_cap = cfg.get("final_logit_softcapping", 30.0 if gemma2 else None)
    window = cfg.get("sliding_window", 4096)
    act = gelu_new if cfg.get("hidden_activation", "gelu_pytorch_tanh") != "gelu" else gelu
    t = len(ids)
    pos = np.arange(t, dtype=np.float64)
    x = w["model.embed_tokens.weight"][ids] * math.sqrt(cfg["hidden_size"])
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        local = (i + 1) % pattern != 0
        if gemma2:
            theta = cfg.get("rope_theta", 10000.0)
        else:
            theta = cfg.get("rope_local_base_freq", 10000.0) if local else cfg.get("rope_theta", 1000000.0)
        h = norm(x, p + "input_layernorm.weight")
        q = linear(h, w[p + "self_attn.q_proj.weight"]).reshape(t, n_heads, hd)
        k = linear(h, w[p + "self_attn.k_proj.weight"]).reshape(t, n_kv, hd)
        if not gemma2:
            q, k = norm(q, p + "self_attn.q_norm.weight"), norm(k, p + "self_attn.k_norm.weight")
        v = linear(h, w[p + "self_attn.v_proj.weight"]).reshape(t, n_kv, hd)
        q, k = rope_half(q, pos, hd, theta), rope_half(k, pos, hd, theta)
        a = linear(attention(q, k, v, scale, window if local else 0, attn_cap), w[p + "self_attn.o_proj.weight"])
        x = x + norm(a, p + "post_attention_layernorm.weight")
        h = norm(x, p + "pre_feedforward_layernorm.weight")
        m = act(linear(h, w[p + "mlp.gate_proj.weight"])) * linear(h, w[p + "mlp.up_proj.weight"])
        x = x + norm(linear(m, w[p + "mlp.down_proj.weight"]), p + "post_feedforward_layernorm.weight")
    x = norm(x, "model.norm.weight")
    FINAL_HIDDEN[0] = x
    return softcap(linear(x, w.get("lm_head.weight", w["model.embed_tokens.weight"])), final_cap)


FORWARDS = {
    "LlamaForCausalLM": forward_llama,
    "Qwen3ForCausalLM": forward_llama,
    "Qwen3MoeForCausalLM": forward_llama,
    "MixtralForCausalLM": forward_llama,
    "GPTNeoXForCausalLM": forward_neox,
    "GPTJForCausalLM": forward_gptj,
    "Qwen2MoeForCausalLM": forward_llama,
    "Glm4MoeForCausalLM": forward_llama,
    "Gemma2ForCausalLM": forward_gemma,
    "Gemma3ForCausalLM": forward_gemma,
}


def load(model_dir):
    with open(f"{model_dir}/config.json") as f:
        cfg = json.load(f)
    arch = cfg["architectures"][0]
    if arch not in FORWARDS:
        raise SystemExit(f"the reference has no forward pass for {arch}")
    return cfg, FORWARDS[arch], read_safetensors(f"{model_dir}/model.safetensors")


def embed(argv):
    if len(argv) < 4 or argv[0] not in ("last", "mean", "cls"):
        raise SystemExit(__doc__)
    pooling, model_dir, out_path = argv[0], argv[1], argv[2]
    cfg, forward, w = load(model_dir)
    rows = []
    for ids_arg in argv[3:]:
        forward(cfg, w, [int(s) for s in ids_arg.split(",")])
        h = FINAL_HIDDEN[0]
        v = h[-1] if pooling == "last" else h[0] if pooling == "cls" else h.mean(axis=0)
        rows.append(v / np.linalg.norm(v))
    np.stack(rows).astype("<f4").tofile(out_path)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--embed":
        return embed(sys.argv[2:])
    if len(sys.argv) != 5:
        raise SystemExit(__doc__)
    model_dir, ids_arg, n_generate, out_path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    cfg, forward, w = load(model_dir)
    ids = [int(s) for s in ids_arg.split(",")]
    logits = forward(cfg, w, ids)
    logits.astype("<f4").tofile(out_path)
    tokens = list(ids)
    greedy = []
    for step in range(n_generate):
        nxt = int(np.argmax(logits[-1])) if step == 0 else int(np.argmax(forward(cfg, w, tokens)[-1]))
        greedy.append(nxt)
        tokens.append(nxt)
    print(json.dumps({"greedy": greedy}))


if __name__ == "__main__":
    main()
