"""Everything that changes the model's forward while the learner runs it: memory patches, each entered
for the length of one forward and undone on leaving it, each giving the numbers of the unpatched
forward (bit for bit, or to float rounding where named).

Why here, in `mmrlvr.models` and not in `mmrlvr.train`: a patch acts on the model's modules and
needs only torch and `mmrlvr.models.wrapping` (to look through DDP / DeepSpeed / peft wrappers and
see sharded parameters); it knows nothing of training. `models` sits below `train` in the layers
of `tests/test_layers.py`, so nothing here may import training code, and nothing does. Training
decides when to patch: `mmrlvr.train.logprobs.completion_logprobs` enters the patches around its
one forward, with the flags of `train.*` handed down as one `ForwardOptions` record
(`mmrlvr.models.patches.options`) by the learner (`mmrlvr.train.learner`) and the supervised warm
start (`mmrlvr.train.sft`). That composition stays in `train/logprobs.py`, with
the log-prob math and the prompt-once forward it shares a function with. `mmrlvr.plan.activations`
counts the bytes each patch saves, from the same flags.

The patches. Each is a context manager (or a pair of functions, for the head); each leaves the
model as it found it on exit, exceptions included (`try / finally`); each steps aside, patching
nothing, where it could not give the same numbers (its `why_not_*` / `eligible_*` says why):

- `chunked_head` (`train.chunked_head`, default on): the output layer's forward is replaced on the
  instance (`kept_head_input`) by one that keeps the final hidden states and returns an empty
  (..., 0) tensor, so the (N, T, V) completion logits are never made; `head_logprobs` then computes
  log-probs and entropies in blocks of positions, recomputing each block's logits in the backward
  (`_BlockedHead`). Applies with gradients or without, where `why_not_chunked` is None: a plain
  `nn.Linear` output layer without accelerate hooks, logits larger than one block
  (`mmrlvr.train.logprobs.CHUNK_ELEMENTS`, 4 M entries), unsharded parameters, no logit rescaling
  by the family. Undone on exit: the instance's `forward` is deleted (or an instance-level forward
  it found, such as accelerate's, put back). Same numbers to float rounding, not bit for bit (the
  vocabulary is summed in blocks): `tests/models/test_family_chunked_head.py`
  (`test_blocks_equal_whole_logits`: every tiny family, joined and prompt-once, log-probs and
  entropies within 1e-5, gradients within 1e-4 relative; `test_a_wide_vocabulary_against_float64`
  at Qwen's 151,936 entries; `test_the_output_layer_is_put_back`).
- `gated_mlp` (`train.recompute_mlp`, default on): each eligible gated MLP's forward is replaced on
  the instance by `_GatedDown`, which keeps gate(x) and up(x) and recomputes the activation and the
  product in the backward (2 of 4 (n, T, I) tensors kept). Applies with gradients, without
  autocast, without gradient checkpointing or sharded parameters, to the MLP classes of
  `GATED_MLPS` whose `down_proj` is a plain bias-free Linear (not LoRA's). Undone on exit:
  `del mlp.forward`, the class's forward shows through again. Bit for bit:
  `tests/models/test_family_gated_mlp.py` (`test_recomputed_mlps_give_the_same_numbers_and_keep_half`:
  log-probs, entropies, every gradient `torch.equal`, in every family;
  `test_function_against_autograd_in_bfloat16_with_a_noncontiguous_gradient`).
- `rms_norm` (`train.recompute_norm`, default on; acts in bf16 / fp16 only): each eligible RMSNorm's
  forward is replaced on the instance by `_RMSNorm`, which keeps only its input and recomputes the
  float32 copy and the normed tensor in the backward. Applies with gradients, without autocast,
  without gradient checkpointing or sharded parameters, to the classes of `RMS_NORMS` with a
  non-float32 1-D weight; a float32 input is handed to the norm's own forward. Undone on exit:
  `del norm.forward`. Bit for bit: `tests/models/test_family_rms_norm.py`
  (`test_recomputed_norms_give_the_same_numbers_and_keep_less`, in every family whose norm this is;
  `test_function_against_autograd_with_a_residual_and_a_noncontiguous_gradient`).
- `attention_mask` (`train.mask_once`, default on): a forward pre-hook on each eligible attention
  layer hands it one additive copy of the boolean mask, made once per forward, instead of SDPA
  making and keeping one per layer. Applies with gradients, without autocast, without gradient
  checkpointing, to the language-model attentions of `TEXT_ATTENTIONS` running `sdpa`. Undone on
  exit: the hooks' handles are removed and the converted masks dropped. Bit for bit:
  `tests/models/test_family_attention_mask.py` (`test_one_mask_per_forward_gives_the_same_numbers`,
  in every family; `test_the_conversion_is_sdpas_own`).
- `swaps`: no patch, the conditions the three swaps above share (`swap_allowed`: the flag on,
  gradients on, no autocast; `checkpointed`); `tests/models/test_swaps.py`.

Together: `tests/e2e/test_bf16_swaps.py` (a whole bf16 run, warm start to evaluation, gives the same
metrics and final weights bit for bit with `recompute_mlp`, `mask_once` and `recompute_norm` on as
with all three off) and `tests/e2e/test_step_reference.py` (the pinned step numbers, run with the
defaults: every patch on where it applies). That each flag reaches the learner's forward:
`tests/train/test_update.py`; the bytes saved: `tests/benchmarks/test_mlp_memory.py`.
"""
