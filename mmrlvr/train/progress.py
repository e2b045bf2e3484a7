"""Progress of warm start and RL: a rich bar on a terminal, plain lines in a log file.

A bar redraws one line in place, which a file cannot show: with stderr redirected, rich draws
nothing until the run ends (a 300-step warm start once wrote 0 bytes in 4.5 minutes). So where
stderr is not a terminal, each `train.log_every`-th RL step and each tenth of the warm start is
one plain, flushed line (step, reward, mixed share, seconds per step) that `tail -f` shows.
"""

from __future__ import annotations

import sys
import time

from mmrlvr.data.heldout import small_split_note

WARM_LINES = 10  # plain lines a warm start writes (every steps // 10 steps, and the last)


class Progress:
    def __init__(self, total_steps: int, enabled: bool = True, log_every: int = 1, plain: bool | None = None):
        """`plain`: lines instead of a bar (None: when stderr is not a terminal)."""
        self.enabled = enabled
        # the held-out split is rows held out of a data file (not a synthetic task's own draw): only
        # then does the small-split note's advice (eval_data, a larger holdout_frac) apply
        self.held_out_rows = True
        self.total = total_steps
        self.log_every = max(1, int(log_every))
        self.plain = (not _is_terminal(sys.stderr)) if plain is None else plain
        self._bar = None
        self._task = None
        if enabled and self.plain:
            from rich.console import Console

            # no wrapping, colour or markup guessing: one log line stays one line
            self.console = Console(file=sys.stderr, soft_wrap=True, highlight=False, color_system=None)
        elif enabled:
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

    def _line(self, text: str) -> None:
        self.console.print(text, markup=False)
        self.console.file.flush()

    def note(self, text: str) -> None:
        if self.enabled:
            self._line(text) if self.plain else self._bar.console.print(text)

    def warm_start(self, steps: int):
        if not self.enabled:
            return None
        if self.plain:
            return self._warm_lines(steps)
        task = self._bar.add_task("warm start", total=steps, info="")

        def cb(step: int, loss: float) -> None:
            self._bar.update(task, completed=step, info=f"loss {loss:.3f}")

        return cb

    def _warm_lines(self, steps: int):
        every, t0 = max(1, steps // WARM_LINES), time.perf_counter()

        def cb(step: int, loss: float) -> None:
            if step % every == 0 or step == steps:
                self._line(f"warm start {step}/{steps}: loss {loss:.3f}  {(time.perf_counter() - t0) / step:.2f}s/step")

        return cb

    def stop(self) -> None:
        """Stop redrawing the bar (idempotent): a run that fails leaves the terminal as it found it."""
        if self.enabled and self._bar is not None:
            self._bar.stop()

    def update(self, step: int, metrics: dict) -> None:
        if not self.enabled:
            return
        info = f"reward {metrics.get('reward/mean', float('nan')):.3f}"
        info += f"  mixed {metrics.get('rollout/mixed_group_frac', float('nan')):.2f}"
        acc = [v for k, v in metrics.items() if k.startswith("eval/")]
        if acc:
            info += f"  eval acc {acc[0]:.3f}"
        info += f"  {metrics.get('time/step', 0.0):.2f}s/step"
        if self.plain:
            if step % self.log_every == 0 or step == self.total:
                self._line(f"RL step {step}/{self.total}: {info}")
            return
        if self._task is None:
            self._task = self._bar.add_task("RL", total=self.total, info="", completed=step - 1)
        self._bar.update(self._task, completed=step, info=info)

    def close(self, summary: dict) -> None:
        if not self.enabled:
            return
        self.stop()
        from mmrlvr.train.evaluate import said

        before, after = summary["eval_before"]["accuracy"], summary["eval_after"]["accuracy"]
        name = said(summary["eval_after"].get("headline", "accuracy"))
        gain = f"{100 * (after - before):+.1f} points" if name == "accuracy" else f"{after - before:+.3f}"
        self.console.print(
            f"held-out {name}: before RL {before:.3f} -> after RL {after:.3f} "
            f"({gain}, n={summary['eval_after']['n']}){small_split_note(summary['eval_after']['n']) if self.held_out_rows else ''}; "
            f"run dir {summary['run_dir']}"
        )


def _is_terminal(stream) -> bool:
    """A display that redraws a bar: a terminal (rich's test, so FORCE_TERMINAL=1 forces one) or a
    Jupyter kernel (whose stderr is no terminal, but rich draws its bar as a widget there)."""
    from rich.console import Console

    try:
        console = Console(file=stream)
        return console.is_terminal or console.is_jupyter
    except (AttributeError, ValueError):  # a closed or replaced stream: no terminal to redraw
        return False
