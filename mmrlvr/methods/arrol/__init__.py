"""arrol (`sample_efficiency.arrol`): online rollout pruning. Each group is over-generated to a
prefix, a small quality head scores every row from its prefix hidden state, and only
`rollout.group_size` rows per prompt are finished; the head learns the survivors' outcomes.

Fills `state` (the `ArrolPruner`, restored from the checkpoint's `arrol` entry), `generate` and
`learn` (round.py: a round by segmented generation, then the head's update), and `eval_rank`
(eval.py: head_best@k / head_vote@k for `mmrlvr eval --samples k` when
`sample_efficiency.arrol.eval_weighting: head`). Maths: `mmrlvr.methods.arrol.pruning`. Docs:
explanation/arrol.md.
Its config section's dataclass is `settings.py` (light: the config reads it without the method).
"""
