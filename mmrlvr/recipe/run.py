"""What one RL step reads and writes, held by one object so the step is `rl_step(run, step)`.

`loop.open_run` builds it (run directory, data, policy, learner, engine, scorer, writers); the loop
hands it to every step and closes it on every exit, so the background workers (the decode thread,
the verifier processes, a lagged engine's generation thread) never outlive a run that failed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from mmrlvr.config import Config
from mmrlvr.methods.hooks import Live
from mmrlvr.rollout.base import RolloutEngine
from mmrlvr.train.evaluate import evaluate
from mmrlvr.train.learner import Learner
from mmrlvr.train.metrics import MetricsWriter
from mmrlvr.train.progress import Progress
from mmrlvr.recipe.run_state import RunState
from mmrlvr.types import Sample

if TYPE_CHECKING:  # names for the fields only: importing them here would load what the run builds lazily
    from accelerate import Accelerator
    from transformers import ProcessorMixin

    from mmrlvr.data.feed import MediaStream
    from mmrlvr.rollout.lagged import Lookahead
    from mmrlvr.verifiers.pool import VerifierPool
    from mmrlvr.verifiers.score import InProcessScorer


@dataclass
class Run:
    """One training run's objects. `state` is what a checkpoint keeps; the rest is rebuilt on resume."""

    cfg: Config  # resolved (presets filled in): the one config read from here on
    run_dir: Path
    accelerator: Accelerator
    processor: ProcessorMixin  # the model's processor (its `tokenizer` included)
    learner: Learner  # policy, reference, optimizer, schedule, float32 masters
    engine: RolloutEngine  # maybe wrapped by `LaggedEngine` (`rollout.async_steps`)
    source: MediaStream | Lookahead  # the decoded prompt stream (`Lookahead` around it with async rollouts)
    scorer: VerifierPool | InProcessScorer
    state: RunState
    log: MetricsWriter
    progress: Progress
    eval_set: Sequence[Sample]  # the held-out rows (`TaskSamples` from a file, or a synthetic draw)
    eval_terms: list[tuple[str, float]]  # (verifier, weight): the reward terms evaluation reports
    bad_limit: float | None  # task.max_bad_frac (rows bad at load or at decode, one limit)
    methods: Live = dataclasses.field(default_factory=lambda: Live([], {}))  # the active methods and their state
    t_start: float = 0.0  # perf_counter at launch, for the summary's wall time

    @property
    def write(self) -> bool:
        """Only rank 0 writes the run directory (metrics, samples, token roles, summary)."""
        return self.accelerator.is_main_process

    @property
    def tokenizer(self):
        return self.processor.tokenizer

    def evaluate(self) -> dict:
        """Held-out evaluation with the engine as it is now (greedy, the run's verifiers)."""
        c = self.cfg
        return evaluate(self.engine, self.eval_set, self.scorer, c.rollout, c.eval.batch_size, c.eval.max_new_tokens,
                        terms=self.eval_terms, max_bad_frac=self.bad_limit)

    def close(self) -> None:
        """Stop the background workers, the writers and the progress bar; safe to call twice, and on
        a failed run."""
        self.source.close()
        self.engine.close()
        self.scorer.close()
        self.log.close()  # the trackers' writer threads (tensorboard's) too
        self.progress.stop()
