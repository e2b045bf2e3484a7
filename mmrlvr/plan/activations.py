"""Bytes one learner forward + backward holds beyond the weights: the activation model of `mmrlvr plan`.

Pure arithmetic over a `ModelShape` and one micro-batch's geometry (rows x prompt length P and
completion length T). What it counts, per decoder layer and token, is what autograd keeps in this
project's forward (`mmrlvr.train.logprobs.completion_logprobs` with its memory patches):

- each RMSNorm: its input, its output (kept by the projections after it) and, in float32 or
  without `train.recompute_norm`, the float32 working copy;
- attention: the rotated queries, the keys and values expanded to every head (transformers'
  `repeat_kv`: a padding mask rules out SDPA's own GQA), the attention output;
- the gated MLP: gate(x) and up(x) under `train.recompute_mlp`, all four intermediate-size
  tensors without it.

With gradient checkpointing only each layer's input is kept, and one layer's set is recomputed in
the backward. Besides the layers: the attention mask (one additive copy per forward under
`train.mask_once`, else one per layer), the output layer (the final hidden states kept and 4 M-logit
blocks under `train.chunked_head`, else the whole float32 logits and their softmax), the
backward's working tensors of one layer, and the gradients of the largest layer's weights as the
backward computes them. Checked against measured peaks on CPU (benchmarks/memory/plan_activations.py,
tests/plan/test_activations.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from mmrlvr.plan.shape import ModelShape

CHUNK_ELEMENTS = 1 << 22  # = mmrlvr.train.logprobs.CHUNK_ELEMENTS (4 M logits per block)
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class Forward:
    """One micro-batch as the learner runs it: `rows` sequences of `prompt` + `completion` tokens
    (padded to the longest), `prompts` distinct prompts among them, and the settings that change
    what autograd keeps."""

    rows: int
    prompts: int
    prompt: int  # P: prompt tokens per row, visual tokens included
    completion: int  # T: completion tokens (the micro-batch's longest)
    dtype: str = "bfloat16"
    checkpointing: bool = False
    prompt_once: bool = True
    chunked_head: bool = True
    recompute_mlp: bool = True
    recompute_norm: bool = True
    mask_once: bool = True
    trainable_lm: bool = True  # False: LoRA (weights frozen, their inputs still kept by the adapter)
    visual_tokens: int = 0  # per prompt, in the language model (after the spatial merge)
    trainable_vision: bool = False
    packed: bool = False  # train.padding_free: the rows' real tokens as one sequence (prompts not shared)

    @property
    def shared(self) -> bool:
        """Each prompt's forward once per group (prompt_once; gradient checkpointing and packing turn it off)."""
        return self.prompt_once and not self.checkpointing and not self.packed and self.prompts < self.rows

    @property
    def tokens(self) -> int:
        """Tokens the forward computes: prompts once plus (1 + T) per row when shared, else rows x (P + T)
        (packed: the rows' real tokens, all of them at the plan's full lengths)."""
        if self.shared:
            return self.prompts * (self.prompt - 1) + self.rows * (self.completion + 1)
        return self.rows * (self.prompt + self.completion)


def norm_bytes(f: Forward) -> int:
    """Bytes per element one RMSNorm keeps, its output included: float32 input, working copy and output (12);
    bf16/fp16 with recompute_norm: input and output (4); without: float32 copy, normed and output (8)."""
    if f.dtype == "float32":
        return 12
    return 4 if f.recompute_norm else 8


def layer_bytes_per_token(s: ModelShape, f: Forward, kv_ratio: float = 1.0) -> float:
    """Bytes one decoder layer keeps per query token; `kv_ratio` = key length / query length (the
    expanded keys and values span the prompt's cached positions too under prompt_once)."""
    b = DTYPE_BYTES[f.dtype]
    q = s.heads * s.head_dim
    norms = 2 * norm_bytes(f) * s.hidden
    attention = (2 * q + 2 * q * kv_ratio) * b  # rotated queries, output; expanded keys and values
    mlp = (2 if f.recompute_mlp else 4) * s.intermediate * b
    return norms + attention + mlp


def mask_bytes(f: Forward, layers: int) -> float:
    """The (rows, 1, Lq, Lk) attention masks: the boolean one plus its additive copies. Packed, one
    (1, 1, K, K) block-diagonal mask over the K tokens of all rows: it grows with the square of the
    micro-batch's tokens, where the padded one grows with rows x (P + T)^2."""
    b = DTYPE_BYTES[f.dtype]
    copies = 1 if f.mask_once else layers
    if f.packed:
        return f.tokens * f.tokens * (1 + copies * b)
    lq = f.completion + 1 if f.shared else f.prompt + f.completion
    lk = f.prompt + f.completion
    return f.rows * lq * lk * (1 + copies * b)


def head_bytes(s: ModelShape, f: Forward) -> float:
    """The output layer's share in the loss's backward: the final hidden states, float32 logit blocks and
    the float32 (V, H) weight-gradient buffer (chunked, `mmrlvr.models.patches.chunked_head`), or the whole
    (rows, T, V) logits in the model's dtype plus their float32 softmax work (four copies) and the weight's
    gradient."""
    b = DTYPE_BYTES[f.dtype]
    positions = f.rows * f.completion
    whole = positions * s.vocab
    weight = s.vocab * s.hidden
    if f.chunked_head and whole > CHUNK_ELEMENTS:
        grad = weight * (4 + b) if f.trainable_lm else 0
        return f.rows * (f.completion + 1) * s.hidden * b + 4 * CHUNK_ELEMENTS * 4 + grad
    return whole * (b + 4 * 4) + (weight * b if f.trainable_lm else 0)


def backward_bytes(s: ModelShape, f: Forward, tokens: int) -> float:
    """The backward's working tensors in one layer: the recomputed activation and product of the gated
    MLP and one gradient of that size, two hidden-size gradients per token, and (weights trained) the
    gradient of the largest weight matrix as it is computed."""
    b = DTYPE_BYTES[f.dtype]
    work = tokens * (3 * s.intermediate + 2 * s.hidden) * b
    weights = s.largest_matrix * b if f.trainable_lm else 0
    return work + weights


def update_activation_bytes(s: ModelShape, f: Forward) -> dict[str, float]:
    """Peak bytes of one micro-batch's forward + backward beyond weights, gradients and optimizer states,
    by part, and the peak (`peak`): what stays kept (mask, rope, media, vision) plus the largest of
    `layers` + `head` (the loss's backward through the output layer), `layers` + `layer_backward` (one
    layer's backward: its recomputed set under checkpointing, its working tensors) and, when the prompts
    run once, `buffered_grads`: a weight's gradient from the completions waits in autograd's input buffer
    until the prompts' branch reaches the same layer, so late in the backward every layer's weight
    gradients but one are held at once (while the completions' activations are already freed)."""
    b = DTYPE_BYTES[f.dtype]
    tokens = f.tokens
    if f.checkpointing:
        lq = f.prompt + f.completion
        layers = s.layers * tokens * s.hidden * b
        recomputed = tokens * layer_bytes_per_token(s, f)
    else:
        kv_ratio = (f.prompt + f.completion) / (f.completion + 1) if f.shared else 1.0
        tail = f.rows * (f.completion + 1) if f.shared else tokens
        layers = s.layers * (tail * layer_bytes_per_token(s, f, kv_ratio)
                             + (tokens - tail) * layer_bytes_per_token(s, f))
        lq = f.completion + 1 if f.shared else f.prompt + f.completion
        recomputed = 0.0
    parts = {"layers": layers, "mask": mask_bytes(f, s.layers),
             "rope": 2 * f.rows * lq * s.head_dim * 4,  # cos / sin of every position, float32, shared by the layers
             "media": media_bytes(s, f), "vision": vision_bytes(s, f)}
    kept = sum(parts.values()) - layers
    parts["head"] = head_bytes(s, f)
    parts["layer_backward"] = recomputed + backward_bytes(s, f, tokens)
    b_grads = (s.layers - 1) * s.largest_layer * b + 2 * s.largest_matrix * b
    parts["buffered_grads"] = b_grads if (f.shared and f.trainable_lm) else 0.0
    parts["peak"] = kept + max(layers + parts["head"], layers + parts["layer_backward"], parts["buffered_grads"])
    return parts


def media_bytes(s: ModelShape, f: Forward) -> float:
    """The micro-batch's pixel values on the device, every row's copy (float32, as the processor makes them),
    alive at the peak when the prompts run once (the peak is then the forward's end; under checkpointing it
    is in the backward, after they are freed)."""
    if f.checkpointing:
        return 0.0
    patch_inputs = 3 * s.temporal_patch * s.patch * s.patch
    return f.rows * f.visual_tokens * s.merge ** 2 * patch_inputs * 4


def vision_bytes(s: ModelShape, f: Forward) -> float:
    """The vision tower over each distinct prompt's patches: what its blocks keep when it is trained (the
    family's MLPs keep all their intermediate tensors), else one block's working tensors."""
    b = DTYPE_BYTES[f.dtype]
    patches = f.prompts * f.visual_tokens * s.merge ** 2
    if not patches or not s.vision_depth:
        return 0.0
    hv, iv = s.vision_hidden, s.vision_intermediate
    if f.trainable_vision and f.checkpointing:  # the vision blocks are checkpointed too: their inputs
        return s.vision_depth * patches * hv * b
    if f.trainable_vision:
        return s.vision_depth * patches * (2 * norm_bytes(f) * hv + 4 * hv * b + 4 * iv * b)
    return patches * (3 * iv + 6 * hv) * b


def no_grad_forward_bytes(s: ModelShape, f: Forward) -> float:
    """Peak of a no-grad forward (reference, pi_old, a prefill): one layer's working tensors, the
    residual stream and mask, and the output layer's blocks."""
    import dataclasses

    b = DTYPE_BYTES[f.dtype]
    tokens = f.tokens
    work = tokens * (3 * s.intermediate + 6 * s.hidden) * b
    return work + mask_bytes(f, 1) + head_bytes(s, dataclasses.replace(f, trainable_lm=False))


def kv_cache_bytes(s: ModelShape, rows: int, length: int, dtype: str) -> float:
    """A generate call's KV cache: rows x length positions x layers x (keys + values) x kv heads x head dim."""
    return rows * length * s.layers * 2 * s.kv_heads * s.head_dim * DTYPE_BYTES[dtype]
