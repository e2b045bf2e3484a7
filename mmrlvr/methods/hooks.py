"""A method's record of named hook points, the registry of methods, and the calls the recipe makes.

The recipe (`mmrlvr.recipe`) never names a method: it asks this module for the active methods'
hooks at fixed points of a run, in a fixed order (the order the methods are registered, which
`mmrlvr.methods.builtin` fixes by importing their records in turn). A method fills only the hooks it needs;
an empty hook costs nothing. The closed set, in the order a run meets them:

- `on(cfg) -> bool`: whether the (resolved) config turns the method on; every other hook but
  `check` runs only then.
- `check(cfg) -> lines` and `rules` (value `Rule`s on full dotted keys): the method's own settings
  checked with the whole config before anything heavy runs, on or off (a typo is named before
  someone turns it on). `register` puts them in the validation's table
  (`mmrlvr.checks.rules.METHOD_SETTINGS`), which runs them without naming the method.
- `warn(cfg) -> line | None`: a valid setting that does not do what it looks like (a warning
  printed before the model loads, `mmrlvr.checks.notes`); in the same table.
- `resolve(cfg) -> cfg`: what the method writes into the one config a run reads and saves (its
  switches made to agree, `mmrlvr.checks.resolve.resolve_config`); in the same table.
- `launch(cfg, accelerator) -> cfg`: adjust or refuse the config for this launch (sharded or not),
  before the model loads.
- `source(cfg, train_set, source) -> source`: replace or wrap the RL prompt source.
- `weights(cfg, engine, processor) -> weigher`: the per-token weigher the learner scales
  advantages with (at most one method fills it; None: no weighting).
- `state(cfg, saved: dict) -> object`: the method's run-time state, built from what the last
  checkpoint saved under the method's name ({} on a fresh run); the object's `state_dict()` is
  saved again at every checkpoint.
- `generate(state, engine, prompts, sampling, seed) -> (output, pending)`: generate a round in
  place of the engine's rollout (at most one method fills it); `learn(state, pending, rewards)
  -> metrics` then hears the round's verifier rewards (B, G).
- `collect(rnd, ctx) -> rnd`: a collect-time step after a round is scored (a reward bonus, an
  episode's own second stage, hints); may change rewards, add or replace groups.
- `estimator(cfg) -> settings`: the settings record the advantage estimator reads.
- `sync(stats, sample_ids)`: after the advantages, share what each rank learned (all ranks call it).
- `record(run_dir, step, batch, advantages, weights, tokenizer, cfg)`: rank 0's files on logged steps.
- `eval_rank(cfg, checkpoint, samples) -> ranker`: a way to choose among k evaluation samples
  (`mmrlvr eval --samples k`), or None.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable

from mmrlvr.checks.rules import METHOD_SETTINGS, MethodSettings
from mmrlvr.registry import Registry


@dataclasses.dataclass(frozen=True)
class Method:
    """One method: its name, its docs page and the hooks it fills (None: not used)."""

    name: str
    doc: str  # the docs page that explains it (relative to docs/)
    on: Callable[[Any], bool]
    experimental: bool = False  # settings and numbers may still change (docs/explanation/methods.md)
    rules: tuple = ()  # the `Rule`s of its settings' values (mmrlvr.checks.rules.Rule)
    check: Callable | None = None
    warn: Callable | None = None
    resolve: Callable | None = None
    launch: Callable | None = None
    source: Callable | None = None
    weights: Callable | None = None
    state: Callable | None = None
    generate: Callable | None = None
    learn: Callable | None = None
    collect: Callable | None = None
    estimator: Callable | None = None
    sync: Callable | None = None
    record: Callable | None = None
    eval_rank: Callable | None = None


HOOKS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Method)
                               if f.name not in ("name", "doc", "on", "experimental", "rules"))
"""The closed set of hook points, in the order a run meets them."""

METHODS: Registry[Method] = Registry("method", plugins="mmrlvr.methods.builtin")


def register(method: Method) -> Method:
    """Add a method's record (a duplicate name is refused by the registry), and its settings' checks
    to the validation's table."""
    METHODS.register(method.name)(method)
    parts = MethodSettings(tuple(method.rules), method.check, method.warn, method.resolve)
    if parts != MethodSettings():
        METHOD_SETTINGS.register(method.name)(parts)
    return method


def episode_is(name: str) -> Callable[[Any], bool]:
    """`on` for a method that is an episode: the config's `rollout.episode` names it."""
    return lambda cfg: getattr(cfg.rollout, "episode", "single") == name


def active(cfg) -> list[Method]:
    """The methods `cfg` turns on, in registration order."""
    return [m for m in map(METHODS.get, METHODS.in_order()) if m.on(cfg)]


def filled(cfg, hook: str) -> list[Method]:
    """The active methods that fill `hook`."""
    return [m for m in active(cfg) if getattr(m, hook) is not None]


def only(cfg, hook: str) -> Method | None:
    """The one active method filling a hook at most one may fill (`generate`, `weights`, `eval_rank`)."""
    chosen = filled(cfg, hook)
    if len(chosen) > 1:
        raise ValueError(f"methods {', '.join(m.name for m in chosen)} each fill `{hook}`; turn all but one off")
    return chosen[0] if chosen else None


def launch(cfg, accelerator):
    """The config each active method leaves for this launch (applied in order)."""
    for m in filled(cfg, "launch"):
        cfg = m.launch(cfg, accelerator)
    return cfg


def source(cfg, train_set, base):
    """The RL prompt source after each active method replaced or wrapped it (in order)."""
    for m in filled(cfg, "source"):
        base = m.source(cfg, train_set, base)
    return base


def collect_steps(cfg) -> tuple[Callable, ...]:
    """The active methods' collect steps, in order."""
    return tuple(m.collect for m in filled(cfg, "collect"))


def estimator_settings(cfg):
    """The settings record of the estimator the config picks (None where no method gives one)."""
    chosen = [m.estimator(cfg) for m in filled(cfg, "estimator")]
    return next((s for s in chosen if s is not None), None)


@dataclasses.dataclass
class Live:
    """The run's active methods and their run-time state (what a checkpoint saves per method)."""

    methods: list[Method]
    states: dict[str, Any]  # name -> the object its `state` hook built

    @classmethod
    def start(cls, cfg, saved: dict[str, dict]) -> "Live":
        """Build each active method's state from `saved` (name -> what the checkpoint kept)."""
        methods = active(cfg)
        return cls(methods, {m.name: m.state(cfg, saved.get(m.name) or {}) for m in methods if m.state is not None})

    def state_dicts(self) -> dict[str, dict]:
        """name -> state to save; a method with an empty state saves nothing."""
        out = {name: s.state_dict() for name, s in self.states.items()}
        return {k: v for k, v in out.items() if v}

    def generator(self) -> tuple[Method, Any] | None:
        """(method, its state) of the one active method that generates rounds itself, or None."""
        chosen = [m for m in self.methods if m.generate is not None]
        if len(chosen) > 1:
            raise ValueError(f"methods {', '.join(m.name for m in chosen)} each generate rounds; turn all but one off")
        return (chosen[0], self.states.get(chosen[0].name)) if chosen else None

    def sync(self, stats, sample_ids: Iterable[str]) -> None:
        """Every active method's `sync` (all ranks call this, in the same order)."""
        ids = list(dict.fromkeys(sample_ids))
        for m in self.methods:
            if m.sync is not None:
                m.sync(stats, ids)

    def record(self, *args) -> None:
        """Every active method's files for a logged step (rank 0)."""
        for m in self.methods:
            if m.record is not None:
                m.record(*args)
