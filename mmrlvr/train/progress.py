"""A rich progress bar for warm start and RL: step, reward, accuracy at a glance."""

from __future__ import annotations

from mmrlvr.data.heldout import small_split_note

import sys


class Progress:
    def __init__(self, total_steps: int, enabled: bool = True):
        self.enabled = enabled
        # the held-out split is rows held out of a data file (not a synthetic task's own draw): only
        # then does the small-split note's advice (eval_data, a larger holdout_frac) apply
        self.held_out_rows = True
        self.total = total_steps
        self._bar = None
        self._task = None
        if enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn, TimeElapsedColumn

            self.console = Console(file=sys.stderr)
            self._bar = RichProgress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                TextColumn("{task.fields[info]}"), console=self.console, transient=False,
                # no stdout/stderr capture: in a Jupyter kernel rich's capture of stderr flushes
                # into its own display call and recurses without end (ipykernel 7)
                redirect_stdout=False, redirect_stderr=False,
            )
            self._bar.start()

    def note(self, text: str) -> None:
        if self.enabled:
            self._bar.console.print(text)

    def warm_start(self, steps: int):
        if not self.enabled:
            return None
        task = self._bar.add_task("warm start", total=steps, info="")

        def cb(step: int, loss: float) -> None:
            self._bar.update(task, completed=step, info=f"loss {loss:.3f}")

        return cb

    def stop(self) -> None:
        """Stop redrawing the bar (idempotent): a run that fails leaves the terminal as it found it."""
        if self.enabled:
            self._bar.stop()

    def update(self, step: int, metrics: dict) -> None:
        if not self.enabled:
            return
        if self._task is None:
            self._task = self._bar.add_task("RL", total=self.total, info="", completed=step - 1)
        info = f"reward {metrics.get('reward/mean', float('nan')):.3f}"
        info += f"  mixed {metrics.get('rollout/mixed_group_frac', float('nan')):.2f}"
        acc = [v for k, v in metrics.items() if k.startswith("eval/")]
        if acc:
            info += f"  eval acc {acc[0]:.3f}"
        info += f"  {metrics.get('time/step', 0.0):.2f}s/step"
        self._bar.update(self._task, completed=step, info=info)

    def close(self, summary: dict) -> None:
        if not self.enabled:
            return
        self._bar.stop()
        from mmrlvr.train.evaluate import said

        before, after = summary["eval_before"]["accuracy"], summary["eval_after"]["accuracy"]
        name = said(summary["eval_after"].get("headline", "accuracy"))
        gain = f"{100 * (after - before):+.1f} points" if name == "accuracy" else f"{after - before:+.3f}"
        self.console.print(
            f"held-out {name}: before RL {before:.3f} -> after RL {after:.3f} "
            f"({gain}, n={summary['eval_after']['n']}){small_split_note(summary['eval_after']['n']) if self.held_out_rows else ''}; "
            f"run dir {summary['run_dir']}"
        )
