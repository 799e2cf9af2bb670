// The CPU kernels: the readable reference for every op of the model.
//
// Conventions (llm.c):
// - forward(out..., saved..., inputs..., sizes) / backward(dinputs..., dout, saved..., sizes):
//   outputs first, explicit sizes, shapes in comments.
// - Backward kernels ACCUMULATE (+=) into every gradient they write (parameters and inputs), so
//   gradient accumulation and residual branches need no extra code. Exceptions are marked
//   "in place": those overwrite (the gradient aliases the input buffer).
// - A gradient pointer may be nullptr when that gradient is not needed.
// - No allocation after the first call: scratch space is sized once and reused.
// - N = B·T rows (tokens), C channels.
#pragma once

#include <cstdint>

#include "tessel/kernels/dropout.h"
#include "tessel/kernels/types.h"

namespace tessel::cpu {

// ---- elementwise and reductions -------------------------------------------------------------
// x (n) *= factor, in place.
void scale(float* x, float factor, int64_t n);
// sum + Σ x², in double. The sum runs over blocks of 65536 elements, each with 8 lanes, and the
// block sums are added to `sum` in order: the same bits whatever the number of threads, and
// consecutive calls on the pieces of a buffer add up as one pass would.
double sum_squares(const float* x, int64_t n, double sum);
// The index of the first id outside [lo, hi), or -1 when every id is inside.
int64_t find_out_of_range(const int32_t* ids, int64_t n, int32_t lo, int32_t hi);

// ---- embeddings ---------------------------------------------------------------------------
// out (N, C) = wte[tokens[n]] (+ wpe[positions[n]] when wpe != nullptr). Overwrites out.
// A token id of -1 (a vocabulary row held by another tensor-parallel rank) gives a zero row
// and no gradient.
void embedding_forward(float* out, const int32_t* tokens, const int32_t* positions,
                       const float* wte, const float* wpe, int64_t N, int64_t C);
// dwte[tokens[n]] += dout[n]; dwpe[positions[n]] += dout[n] (when dwpe != nullptr).
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        const int32_t* positions, int64_t N, int64_t C);
// The vocabulary-parallel lookup's ids: local (N) = tokens[n] - vocab_start when that is in
// [0, V_valid) (a row of this rank's shard), else -1.
void embedding_shard_ids(int32_t* local, const int32_t* tokens, int64_t N, int64_t vocab_start,
                         int64_t V_valid);

// ---- residual -----------------------------------------------------------------------------
// out = a + b, n elements (the residual connection; its backward is the identity, so the model
// lets the gradient flow through one buffer without a kernel). out may be a (an accumulation).
void residual_forward(float* out, const float* a, const float* b, int64_t n);
// Dropout then the residual add (Megatron's bias-dropout-add without the bias), on rows (R, C):
// out[r, c] = a[r, c] + b[r, c] · m[r, c], m = dropout_factor(site, r, c) (kernels/dropout.h: 0
// or 1/(1 − p), keyed by the row's sample and position and the feature c + site.feature_offset);
// a nullptr: out = b · m (the embedding's output). out may be a or b. Without an active site m = 1.
void dropout_add_forward(float* out, const float* a, const float* b, int64_t R, int64_t C,
                         const DropoutSite& site);
// db (R, C) += dout · m, the same m; a's gradient is dout itself, which the caller lets flow on.
void dropout_add_backward(float* db, const float* dout, int64_t R, int64_t C, const DropoutSite& site);

// ---- norms ---------------------------------------------------------------------------------
// out (N, C) = (inp - mean) · rstd · weight + bias; saves mean (N), rstd (N).
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int64_t C, float eps);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int64_t N, int64_t C);
// out (N, C) = inp · rstd · (gain_offset + weight), rstd = 1/sqrt(mean(inp²) + eps); saves
// rstd (N). gain_offset 0: Llama's RMSNorm; 1: the zero-centred norm of Qwen3-Next
// (--apply-layernorm-1p, weight initialised 0), whose dweight is the same Σ dout · x · rstd.
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N,
                     int64_t C, float eps, float gain_offset);
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int64_t N, int64_t C,
                      float gain_offset);
// Gated DeltaNet's output norm per head (Qwen3NextRMSNormGated: norm first, then the gate):
// out (N, C) = inp · rstd · weight · silu(gate), rstd = 1/sqrt(mean(inp²) + eps); N = tokens ·
// heads rows of C = head_dim; gate (N, C) is z; weight (C) a plain gain; saves rstd (N).
void gated_rmsnorm_forward(float* out, float* rstd, const float* inp, const float* gate,
                           const float* weight, int64_t N, int64_t C, float eps);
void gated_rmsnorm_backward(float* dinp, float* dgate, float* dweight, const float* dout,
                            const float* inp, const float* gate, const float* weight,
                            const float* rstd, int64_t N, int64_t C);
// L2 normalisation per head (FLA's l2norm, eps inside the root): out = inp · rstd,
// rstd = 1/sqrt(Σ inp² + 1e-6) over each head's D values. N rows, each holding `heads` vectors of
// D at inp + n·ld + h·D; out has the same layout (out may equal inp: in place); saves rstd
// (N, heads).
void l2norm_forward(float* out, float* rstd, const float* inp, int64_t N, int64_t heads, int64_t D,
                    int64_t ld);
// dinp += rstd · (dout − out · (out·dout)), from the forward's out and rstd (not its input);
// dinp, dout and out share the layout. dinp must not alias dout.
void l2norm_backward(float* dinp, const float* dout, const float* out, const float* rstd,
                     int64_t N, int64_t heads, int64_t D, int64_t ld);

// ---- activations ---------------------------------------------------------------------------
// GELU, tanh form: 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³))). n elements.
void gelu_forward(float* out, const float* inp, int64_t n);
void gelu_backward(float* dinp, const float* dout, const float* inp, int64_t n);
void gelu_erf_forward(float* out, const float* inp, int64_t n);
void gelu_erf_backward(float* dinp, const float* dout, const float* inp, int64_t n);
// The shared expert's gate (Qwen-MoE, Qwen3-Next's shared_expert_gate): gate (N) holds logits on entry and sigmoid(logits) on
// exit (in place); out (N, C) += gate[n] · y[n].
void sigmoid_gate_forward(float* out, float* gate, const float* y, int64_t N, int64_t C);
// dy (N, C) = gate[n] · dout[n]; dlogit (N) = (dout[n] · y[n]) · gate[n] · (1 − gate[n]).
// Both overwrite.
void sigmoid_gate_backward(float* dy, float* dlogit, const float* dout, const float* y,
                           const float* gate, int64_t N, int64_t C);
// Gated attention's output gate (Qwen3-Next): out (N, H, D) = attn (N, H, D) ⊙ sigmoid(gate),
// elementwise; gate element (n, h, d) at gate + n·gate_ld + h·gate_head_stride + d, so the gate
// may be read where q_proj leaves it, interleaved per head [q_h | g_h] (gate = q + D, gate_ld =
// 2·H·D, gate_head_stride = 2·D), or from a contiguous (N, H·D) (gate_ld = H·D, stride D).
// Overwrites out (out may equal attn; the backward then needs attn kept elsewhere).
void output_gate_forward(float* out, const float* attn, const float* gate, int64_t N, int64_t H,
                         int64_t D, int64_t gate_ld, int64_t gate_head_stride);
// dattn += dout ⊙ sigmoid(gate); dgate (gate's layout) += dout ⊙ attn ⊙ σ(gate)(1 − σ(gate)).
void output_gate_backward(float* dattn, float* dgate, const float* dout, const float* attn,
                          const float* gate, int64_t N, int64_t H, int64_t D, int64_t gate_ld,
                          int64_t gate_head_stride);
// SwiGLU: out = silu(gate) · up, silu(x) = x·sigmoid(x). n elements each.
void swiglu_forward(float* out, const float* gate, const float* up, int64_t n);
void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                     const float* up, int64_t n);

// ---- linear --------------------------------------------------------------------------------
// Weight layouts (types.h): InOut is GPT-2's Conv1D [in, out], OutIn is nn.Linear [out, in].
// out (N, OC) = inp (N, IC) · W + bias (OC, optional). Overwrites out.
void linear_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int64_t N, int64_t IC, int64_t OC, WeightLayout layout);
// dinp (N, IC) += dout · Wᵀ; dweight += inpᵀ · dout (in the weight's layout); dbias += Σ dout.
void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int64_t N, int64_t IC, int64_t OC,
                     WeightLayout layout);

// The bias alone, for a row-parallel linear whose bias is added after the partial sums are
// reduced: out (N, OC) += bias; dbias (OC) += Σ_n dout[n].
void bias_forward(float* out, const float* bias, int64_t N, int64_t OC);
void bias_backward(float* dbias, const float* dout, int64_t N, int64_t OC);

// ---- rotary position embedding (Hugging Face Llama, rotate-half) ---------------------------
// Partial RoPE (Qwen3-Next, --rotary-percent): only the first rot_dim of each head's head_dim
// values rotate, the rest pass through; rot_dim = head_dim is the full RoPE.
// cos/sin tables (max_pos, rot_dim/2): angle[p][i] = p · base^(-2i/rot_dim).
void rope_tables(float* cos, float* sin, int64_t max_pos, int64_t rot_dim, float base);
// In place on x: N rows, each row holds `heads` vectors of head_dim at x + n·ld + h·head_dim.
// x'[:rot] = x[:rot]·cos + rotate_half(x[:rot])·sin, rotate_half([a, b]) = [-b, a], the halves
// of the first rot_dim values; x'[rot:] = x[rot:]. Angle from positions[n].
void rope_forward(float* x, const int32_t* positions, const float* cos, const float* sin,
                  int64_t N, int64_t heads, int64_t head_dim, int64_t rot_dim, int64_t ld);
// In place on dx: the inverse rotation (the transpose), turning d(x') into d(x).
void rope_backward(float* dx, const int32_t* positions, const float* cos, const float* sin,
                   int64_t N, int64_t heads, int64_t head_dim, int64_t rot_dim, int64_t ld);

// ---- Gated DeltaNet (Qwen3-Next linear attention; gated_delta.cpp, delta_rule*.cpp) -----------
// Packed documents: key_start (B, T) as PackedRows gives it (each row's document's first
// position), or nullptr for one document per sequence. Row t > 0 of a sequence begins a new
// document when key_start[b·T + t] != key_start[b·T + t − 1]; nothing crosses that boundary (the
// conv's history and the delta rule's state restart there).
//
// Causal depthwise conv1d (no bias) then SiLU, over C channels (Qwen3-Next's conv of [q | k | v]):
// out[b, t, c] = silu(Σ_{j<K} weight[c, j] · inp[b, t − K + 1 + j, c]), tap K−1 the current row;
// rows before the sequence's or the document's start count as zero. inp rows (b·T + t)·ld (ld ≥
// C, a view of a wider projection); out (B, T, C) contiguous, overwritten; weight (C, K) (Hugging
// Face's [C, 1, K]). The backward recomputes the pre-activation (K multiply-adds per value).
void causal_conv1d_silu_forward(float* out, const float* inp, const float* weight,
                                const int32_t* key_start, int64_t B, int64_t T, int64_t C,
                                int64_t K, int64_t ld);
// dinp (rows of stride ld) += d/d(inp); dweight (C, K) += d/d(weight); dout (B, T, C).
void causal_conv1d_silu_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                                 const float* weight, const int32_t* key_start, int64_t B,
                                 int64_t T, int64_t C, int64_t K, int64_t ld);
// The gates, in fp32, per row n of N tokens and head h of H value heads (all (N, H)):
// beta = sigmoid(b); g = −exp(A_log[h]) · softplus(a + dt_bias[h]) (the log decay, ≤ 0;
// softplus(x) = log(1 + e^x), x for x > 20 as torch). Overwrites beta and g.
void gdn_gate_forward(float* beta, float* g, const float* b, const float* a, const float* A_log,
                      const float* dt_bias, int64_t N, int64_t H);
// db, da (N, H) and dA_log, ddt_bias (H) += the gradients from dbeta, dg (N, H).
void gdn_gate_backward(float* db, float* da, float* dA_log, float* ddt_bias, const float* dbeta,
                       const float* dg, const float* b, const float* a, const float* A_log,
                       const float* dt_bias, int64_t N, int64_t H);

// The gated delta rule (§3.1 of docs/QWEN3_NEXT.md), per batch item b and value head j of Hv, with
// state S (Dk, Dv), r = Hv / Hk, value head j reading key head j / r (repeat_interleave):
//   S ← e^{g_t} S;  u_t = β_t (v_t − Sᵀ k_t);  S ← S + k_t u_tᵀ;  o_t = Sᵀ (q_t / sqrt(Dk)).
// q, k: element (b, t, h, i) at q + (b·T + t)·qk_ld + h·Dk + i (Hk heads; already l2-normed);
// v: (b, t, j, e) at v + (b·T + t)·v_ld + j·Dv + e; beta, g (B, T, Hv) contiguous; out
// (B, T, Hv, Dv) contiguous, overwritten. initial_state (B, Hv, Dk, Dv), nullptr for zeros; it
// is the state before row 0 (kept across row 0 even with packed documents). final_state
// (B, Hv, Dk, Dv), nullptr when not wanted: the state after row T − 1 (of the last document).
//
// The chunked form: rows in chunks of kDeltaChunk (T padded with β = 0, g = 0 rows), the
// in-chunk UT transform solved per chunk and the state carried from chunk to chunk. Saved for
// backward: Ainv (B, Hv, delta_rule_chunks(T), kDeltaChunk, kDeltaChunk) (types.h), each chunk's
// (I + strict_lower(diag(β)(K Kᵀ ⊙ decay)))⁻¹. The chunk-start states are not saved: the
// backward recomputes them (as FLA does).
void gated_delta_rule_forward(float* out, float* final_state, float* Ainv, const float* q,
                              const float* k, const float* v, const float* beta, const float* g,
                              const float* initial_state, const int32_t* key_start, int64_t B,
                              int64_t T, int64_t Hk, int64_t Hv, int64_t Dk, int64_t Dv,
                              int64_t qk_ld, int64_t v_ld);
// dq, dk (q's and k's layout; summed over the r value heads of each key head), dv (v's layout),
// dbeta, dg (B, T, Hv), dinitial_state (B, Hv, Dk, Dv) += the gradients from dout (B, T, Hv, Dv)
// and dfinal_state (B, Hv, Dk, Dv; nullptr: zero). Ainv as the forward saved it.
void gated_delta_rule_backward(float* dq, float* dk, float* dv, float* dbeta, float* dg,
                               float* dinitial_state, const float* dout, const float* dfinal_state,
                               const float* Ainv, const float* q, const float* k, const float* v,
                               const float* beta, const float* g, const float* initial_state,
                               const int32_t* key_start, int64_t B, int64_t T, int64_t Hk,
                               int64_t Hv, int64_t Dk, int64_t Dv, int64_t qk_ld, int64_t v_ld);
// One token of the same rule, for decoding: per batch row b (q, k rows b·qk_ld, v rows b·v_ld,
// beta, g (B, Hv)), state (B, Hv, Dk, Dv) updated in place; out (B, Hv, Dv) overwritten.
void gated_delta_rule_step(float* out, float* state, const float* q, const float* k,
                           const float* v, const float* beta, const float* g, int64_t B,
                           int64_t Hk, int64_t Hv, int64_t Dk, int64_t Dv, int64_t qk_ld,
                           int64_t v_ld);

// ---- attention ------------------------------------------------------------------------------
// Scaled dot-product attention with grouped-query heads: H query heads share G key/value heads
// (query head h reads kv head h / (H/G)). q rows: q + (b·T + t)·q_ld + h·D; k, v alike with
// their own ld and G heads. out (B, T, H·D) contiguous; lse (B, H, T) = log Σ exp(scores),
// saved for backward (flash-attention style: probabilities are recomputed, never stored).
// causal: key s visible to query t iff s ≤ t. scale = 1/sqrt(D).
// Attention dropout (an active `dropout`, kernels/dropout.h): the normalised probabilities are
// multiplied by attention_dropout_factor(dropout, b·T + t, query position, h, key position) before
// P·V, positions global (0..T−1 here; q_pos and k_pos in the block kernels); lse stays that of the
// probabilities before dropout, so partial results still merge by it. The backward redraws the
// same factors.
void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       int64_t B, int64_t T, int64_t H, int64_t G, int64_t D, int64_t q_ld,
                       int64_t k_ld, int64_t v_ld, bool causal, const DropoutSite& dropout);
// dq, dk, dv use the same layouts and ld as q, k, v (they may be views of one fused buffer).
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                        const float* k, const float* v, const float* out, const float* lse,
                        int64_t B, int64_t T, int64_t H, int64_t G, int64_t D, int64_t q_ld,
                        int64_t k_ld, int64_t v_ld, bool causal, const DropoutSite& dropout);
// The same over a block of keys, for context parallelism: Tq query rows against Tk key rows
// (q, out, dq, dout rows b·Tq + t; k, v, dk, dv rows b·Tk + s; lse (B, H, Tq)). q_pos (Tq) and
// k_pos (Tk) are global positions, the same for every batch item: key s is visible to query t
// iff k_pos[s] ≤ q_pos[t] (attention_forward's causal case is positions 0..T-1 for both). A row
// that sees no key comes out with out = 0 and lse = -inf, so partial results over key blocks
// merge by log-sum-exp. The backward takes the final out and lse of the attention over all key
// blocks and adds exactly this block's share to dq, dk and dv. Packed documents: with key_start
// (B, Tq), query row (b, t) also sees only keys with k_pos[s] ≥ key_start[b·Tq + t] (the first
// position of its document); nullptr: no such bound.
void attention_block_forward(float* out, float* lse, const float* q, const float* k,
                             const float* v, int64_t B, int64_t Tq, int64_t Tk, int64_t H,
                             int64_t G, int64_t D, int64_t q_ld, int64_t k_ld, int64_t v_ld,
                             const int32_t* q_pos, const int32_t* k_pos, const int32_t* key_start,
                             const DropoutSite& dropout);
void attention_block_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                              const float* k, const float* v, const float* out, const float* lse,
                              int64_t B, int64_t Tq, int64_t Tk, int64_t H, int64_t G, int64_t D,
                              int64_t q_ld, int64_t k_ld, int64_t v_ld, const int32_t* q_pos,
                              const int32_t* k_pos, const int32_t* key_start, const DropoutSite& dropout);
// Merges the partial attention of another key block into (out, lse), row by row, by log-sum-exp:
// lse' = log(e^lse + e^block_lse), out' = (e^lse·out + e^block_lse·block_out) / e^lse'. Rows of
// either side with lse = -inf (no key seen) add nothing. out, block_out (B, T, H·D); lse,
// block_lse (B, H, T).
void attention_merge(float* out, float* lse, const float* block_out, const float* block_lse,
                     int64_t B, int64_t T, int64_t H, int64_t D);

// ---- loss -----------------------------------------------------------------------------------
// The vocabulary may be split over tensor-parallel ranks: this shard holds columns
// [vocab_start, vocab_start + V) of the logits, of which the first V_valid are real entries (the
// rest pad the vocabulary to a multiple of 128·TP and never count). Per row n:
//   row_max[n] = max over valid columns, row_sumexp[n] = Σ exp(x - row_max[n]),
//   target_logit[n] = x[targets[n] - vocab_start] when the target is in this shard, else 0.
// The caller combines the shards (max, then sums) into lse = log Σ exp and the loss lse - target.
// A target of -1 is ignored (a position left out of the loss: --eod-mask-loss): the row counts
// no loss and gets no gradient.
void cross_entropy_partial_forward(float* row_max, float* row_sumexp, float* target_logit,
                                   const float* logits, const int32_t* targets,
                                   int64_t vocab_start, int64_t N, int64_t V, int64_t V_valid);
// Combining the shards' statistics (vocab_parallel_cross_entropy, parallel/tensor_parallel.h):
// row_sumexp[n] *= exp(row_max[n] - global_max[n]), to the global maximum's scale.
void cross_entropy_rescale(float* row_sumexp, const float* row_max, const float* global_max,
                           int64_t N);
// lse[n] = global_max[n] + log(row_sumexp[n]) over the summed shards; returns Σ_n lse[n] −
// target_logit[n] over the rows whose target is not ignored, the losses summed in double.
double cross_entropy_finish(float* lse, const float* global_max, const float* row_sumexp,
                            const float* target_logit, const int32_t* targets, int64_t N);
// In place allowed (dlogits may equal logits): dlogits = (softmax(logits) - onehot) · grad_scale
// on valid columns, 0 on padding and on rows whose target is ignored; overwrites. lse (N) is the
// global log Σ exp of each row.
// grad_scale is d(loss)/d(loss of one token), e.g. 1 / (tokens in the global batch).
void cross_entropy_backward(float* dlogits, const float* logits, const float* lse,
                            const int32_t* targets, int64_t vocab_start, float grad_scale,
                            int64_t N, int64_t V, int64_t V_valid);

// ---- Mixture-of-Experts router (Megatron-LM's TopKRouter; router.cpp) --------------------------
// Per token n of N over E experts, from the router logits (N, E).
// experts (N, k): each token's k chosen experts, best first, ties to the lower expert index;
// probs (N, k): their routing weights. Selection is on the scores as Megatron's:
//   softmax:              top-k of the logits, then softmax over those k;
//   softmax, pre_softmax: softmax over all E experts, then its k largest values as they are;
//   sigmoid:              top-k of sigmoid(logits), divided by their sum (+1e-20) when k > 1
//                         (pre_softmax is ignored).
void moe_topk_forward(int32_t* experts, float* probs, const float* logits, int64_t N, int64_t E,
                      int64_t k, RouterScore score, bool pre_softmax);
// dlogits (N, E) += d(probs)/d(logits) applied to dprobs (N, k); probs as forward left them.
void moe_topk_backward(float* dlogits, const float* dprobs, const float* logits,
                       const int32_t* experts, const float* probs, int64_t N, int64_t E,
                       int64_t k, RouterScore score, bool pre_softmax);
// The scores the load-balancing loss reads, scores (N, E): softmax(logits), or sigmoid(logits)
// divided by its sum over the E experts (+1e-20).
void moe_aux_scores_forward(float* scores, const float* logits, int64_t N, int64_t E,
                            RouterScore score);
// Megatron's switch_load_balancing_loss_func over this rank's N rows of T tokens (T > N when
// other ranks hold the rest of the sequence): coeff · E / (k · T²) · Σ_e counts[e] · Σ_n
// scores[n, e], counts (E) the top-k assignments per expert over all T tokens (before dropping).
double moe_aux_loss_forward(const float* scores, const float* counts, int64_t N, int64_t E,
                            int64_t k, int64_t T, float coeff);
// dlogits (N, E) += grad_scale · d(aux loss)/d(logits) (counts are constants).
void moe_aux_loss_backward(float* dlogits, const float* logits, const float* scores,
                           const float* counts, int64_t N, int64_t E, int64_t k, int64_t T,
                           float coeff, float grad_scale, RouterScore score);
// Router z-loss (ST-MoE; Megatron's z_loss_func): coeff · (1/N) Σ_n lse[n]², lse (N) =
// log Σ_e exp(logits[n, e]), saved for backward.
double moe_z_loss_forward(float* lse, const float* logits, int64_t N, int64_t E, float coeff);
// dlogits (N, E) += grad_scale · coeff · (2 · lse[n] / N) · softmax(logits[n]).
void moe_z_loss_backward(float* dlogits, const float* logits, const float* lse, int64_t N,
                         int64_t E, float coeff, float grad_scale);
// Megatron's "probs" drop policy: each expert keeps the `capacity` assignments routed to it with
// the highest probs (ties to the lower token index) and drops the rest. keep (N, k): 1 kept,
// 0 dropped (overwritten). Returns the number of dropped assignments.
int64_t moe_capacity_drop(int32_t* keep, const int32_t* experts, const float* probs, int64_t N,
                          int64_t E, int64_t k, int64_t capacity);

// Megatron's RandomSTE forward (--moe-router-force-load-balancing, moe_utils.py): logits (N, E)
// overwritten by standard normal values, row n's keyed by its sample samples[n] and position
// positions[n] and the expert (router_rows::random_logit under seed and site). Its backward is
// the identity: the random logits' gradient is taken as the computed logits' (straight through),
// so it has no kernel.
void moe_random_logits(float* logits, const int32_t* samples, const int32_t* positions, int64_t N, int64_t E,
                       uint64_t seed, uint32_t site);

// ---- Mixture-of-Experts token movement (moe_dispatch.cpp) ------------------------------------
// n = N·k assignments (token n/k's choice n%k). counts (E) = the assignments per expert, only
// those with keep[a] != 0 when keep is given; overwrites.
void moe_count_assignments(float* counts, const int32_t* experts, const int32_t* keep, int64_t n,
                           int64_t E);
// Each kept assignment's row in dispatch order: slot_row[a] = cursor[experts[a]]++, or -1 when
// dropped (keep[a] == 0). cursor (E) holds each expert's first row on entry.
void moe_assign_slots(int32_t* slot_row, int32_t* cursor, const int32_t* experts,
                      const int32_t* keep, int64_t n);
// Permute: send (rows, C) row slot_row[a] = x (N, C) row a/k, for every kept assignment (other
// rows of send untouched).
void moe_permute_forward(float* send, const float* x, const int32_t* slot_row, int64_t N,
                         int64_t k, int64_t C);
// dx (N, C) row a/k += d_send row slot_row[a], for every kept assignment.
void moe_permute_backward(float* dx, const float* d_send, const int32_t* slot_row, int64_t N,
                          int64_t k, int64_t C);
// Unpermute and combine: out (N, C) row n = Σ_j probs[n, j] · combined row slot_row[n·k + j]
// over the kept choices (overwrites out).
void moe_unpermute_forward(float* out, const float* combined, const float* probs,
                           const int32_t* slot_row, int64_t N, int64_t k, int64_t C);
// d_probs (N, k) = dout[n] · combined[slot_row] (0 for dropped choices); d_combined row
// slot_row[a] = probs[a] · dout[a/k] for kept ones (other rows untouched). Both overwrite.
void moe_unpermute_backward(float* d_probs, float* d_combined, const float* dout,
                            const float* combined, const float* probs, const int32_t* slot_row,
                            int64_t N, int64_t k, int64_t C);
// The capacity drop over a group of ranks: choices (2, n) = [experts as floats | probs], and the
// gathered blocks of G ranks back into experts (G·n) and probs (G·n).
void moe_pack_choices(float* choices, const int32_t* experts, const float* probs, int64_t n);
void moe_unpack_choices(int32_t* experts, float* probs, const float* choices, int64_t G,
                        int64_t n);

// ---- context-parallel row movement (rows.cpp) ---------------------------------------------------
// out (B, T_l, width) = in (B, T, width) at positions (T_l): a CP rank's rows of whole sequences.
void cp_take_rows(int32_t* out, const int32_t* in, const int32_t* positions, int64_t B, int64_t T,
                  int64_t T_l, int64_t width);
// K then V rows packed contiguous: kv (2, N, width) from rows with strides k_ld, v_ld.
void cp_pack_kv(float* kv, const float* k, const float* v, int64_t N, int64_t width, int64_t k_ld,
                int64_t v_ld);
// dk, dv (rows with strides) += the packed kv_grad (2, N, width).
void cp_unpack_add_kv(float* dk, float* dv, const float* kv_grad, int64_t N, int64_t width,
                      int64_t k_ld, int64_t v_ld);
// Rank blocks and global positions: blocks + r·rank_stride holds CP rank r's rows (B, T_l, width)
// of whole sequences, contiguous; out (B, T) rows of stride ld (T = CP·T_l) takes each at its
// global position, positions[r·T_l + t] (every rank's, (CP, T_l)), in columns [0, width); and
// back. Every row of out is written (the ranks' positions cover the sequence). The all-gather
// path's K/V blocks in key order, the Gated DeltaNet's head all-to-all (whole sequences).
void cp_rows_to_global(float* out, int64_t ld, const float* blocks, int64_t rank_stride,
                       const int32_t* positions, int64_t CP, int64_t B, int64_t T_l, int64_t width);
void cp_rows_from_global(float* blocks, int64_t rank_stride, const float* in, int64_t ld,
                         const int32_t* positions, int64_t CP, int64_t B, int64_t T_l, int64_t width);
// Column blocks and ranks: in (N, ·) rows of stride ld hold CP·width columns, rank r's at
// [r·width, (r+1)·width); blocks + r·rank_stride gets them as (N, width), contiguous; and back
// (out's other columns untouched). The Gated DeltaNet's head all-to-all (each rank's heads).
void cp_columns_to_ranks(float* blocks, int64_t rank_stride, const float* in, int64_t ld, int64_t N,
                         int64_t CP, int64_t width);
void cp_columns_from_ranks(float* out, int64_t ld, const float* blocks, int64_t rank_stride, int64_t N,
                           int64_t CP, int64_t width);

// ---- optimizer ------------------------------------------------------------------------------
// AdamW as torch.optim.AdamW: p -= lr·wd·p; m = β1·m + (1-β1)·g; v = β2·v + (1-β2)·g²;
// p -= (lr / (1-β1^step)) · m / (sqrt(v)/sqrt(1-β2^step) + eps). step counts from 1.
void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int64_t step);

}  // namespace tessel::cpu
