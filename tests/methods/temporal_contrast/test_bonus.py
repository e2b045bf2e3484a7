"""Temporal contrast inside collect: shuffled frames sampled, scored, never trained on."""

from pathlib import Path

import torch

from mmrlvr.checks.resolve import resolve_algo
from mmrlvr.methods.temporal_contrast.maths import tgrpo_bonus
from mmrlvr.config import load_config
from mmrlvr.data.media import ShuffledVideo
from mmrlvr.rollout.hf import HFRolloutEngine
from mmrlvr.tasks import load_task
from mmrlvr.data.sources import SeededStream
from mmrlvr.recipe.step import collect
from tests.train.step_helpers import with_algo
from mmrlvr.verifiers.score import make_scorer

EVEN = str(Path(__file__).resolve().parents[2] / "e2e" / "user_verifier.py") + ":even_length"


class Spy:
    """The real HF engine, with its calls recorded."""

    def __init__(self, engine):
        self.engine, self.calls = engine, []

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def rollout(self, samples, group_size, sampling, seed, **kw):
        out = self.engine.rollout(samples, group_size, sampling, seed, **kw)
        self.calls.append((list(samples), group_size, out))
        return out


def test_collect_adds_the_tgrpo_bonus_from_shuffled_frames(tiny):
    model, processor = tiny
    videos = load_task("video_motion", "train", 3, seed=0)
    images = load_task("counting", "train", 1, seed=0)
    cfg = load_config(None, ["rollout.group_size=4", "rollout.prompts_per_step=4", "rollout.max_new_tokens=5",
                             "rollout.temperature=1.5", "temporal_contrast.enabled=true", "verifier_workers=0",
                             "rollout.sampler=multinomial",  # the seed below was picked for these draws
                             f"rewards=[{{verifier: '{EVEN}', weight: 1.0}}]"])
    algo = resolve_algo(cfg.algo, cfg.rollout.max_new_tokens)
    spy = Spy(HFRolloutEngine(model, processor))
    batch = collect(spy, SeededStream(videos + images, seed=0), make_scorer(workers=0), with_algo(cfg, algo), seed=3)

    (ordered, g, out), (shuffled, k, sout) = spy.calls
    assert g == 4 and k == 2  # G / 2 shuffled samples
    assert [s.id for s in shuffled] == [f"{s.id}#shuffled" for s in ordered if s.videos]  # video prompts only
    for s in shuffled:
        (v,) = s.videos
        assert isinstance(v, ShuffledVideo) and v.video in {x.videos[0] for x in videos}
    # trained on the ordered completions only
    assert batch.completion_ids.shape[0] == 16 and len(batch.texts) == 16
    base = torch.tensor([float(len(c.text) % 2 == 0) for c in out.completions]).view(4, 4)
    shuf = torch.tensor([float(len(c.text) % 2 == 0) for c in sout.completions]).view(-1, 2)
    rows = [i for i, s in enumerate(ordered) if s.videos]
    want = base.clone()
    want[rows] += tgrpo_bonus(base[rows], shuf, alpha=0.3, mu=1.0)
    assert torch.allclose(batch.rewards, want)
    assert (want != base).any(), "pick a seed whose bonus is not all zero"
    # what prompt sources and per-prompt statistics learn: the verifier's rewards, the bonus apart
    assert [sid for sid, _ in batch.scored] == [s.id for s in ordered]
    assert torch.equal(torch.tensor([r for _, r in batch.scored]), base)
    assert torch.allclose(batch.bonus, want - base)
    assert batch.metrics["temporal/ordered_acc"] == base[rows].mean().item()
    assert batch.metrics["temporal/shuffled_acc"] == shuf.mean().item()


THIRDS = EVEN.replace(":even_length", ":length_thirds")


def test_partial_credit_threshold_reaches_the_bonus(tiny):
    """A non-default correct_threshold decides which partial scores count as correct."""
    model, processor = tiny
    videos = load_task("video_motion", "train", 4, seed=0)
    cfg = load_config(None, ["rollout.group_size=4", "rollout.prompts_per_step=4", "rollout.max_new_tokens=5",
                             "rollout.temperature=1.5", "temporal_contrast.enabled=true", "verifier_workers=0",
                             "rollout.sampler=multinomial",  # the seed below was picked for these draws
                             "temporal_contrast.correct_threshold=0.6", "temporal_contrast.shuffled_samples=4",
                             f"rewards=[{{verifier: '{THIRDS}', weight: 1.0}}]"])
    algo = resolve_algo(cfg.algo, cfg.rollout.max_new_tokens)
    spy = Spy(HFRolloutEngine(model, processor))
    batch = collect(spy, SeededStream(videos, seed=0), make_scorer(workers=0), with_algo(cfg, algo), seed=5)
    (_, _, out), (_, _, sout) = spy.calls
    base = torch.tensor([(len(c.text) % 3) / 2 for c in out.completions]).view(4, 4)
    shuf = torch.tensor([(len(c.text) % 3) / 2 for c in sout.completions]).view(4, 4)
    at_06 = tgrpo_bonus(base, shuf, alpha=0.3, mu=1.0, threshold=0.6)  # only scores of 1 count
    at_01 = tgrpo_bonus(base, shuf, alpha=0.3, mu=1.0, threshold=0.1)  # 0.5 counts too
    assert torch.allclose(batch.rewards, base + at_06)
    assert not torch.equal(at_06, at_01), "pick a seed where the threshold matters"


def test_without_temporal_contrast_nothing_extra_is_sampled(tiny):
    model, processor = tiny
    cfg = load_config(None, ["rollout.group_size=2", "rollout.prompts_per_step=2", "rollout.max_new_tokens=3",
                             "verifier_workers=0"])
    spy = Spy(HFRolloutEngine(model, processor))
    batch = collect(spy, SeededStream(load_task("video_motion", "train", 2, seed=0), seed=0),
                    make_scorer(workers=0), with_algo(cfg, resolve_algo(cfg.algo, 3)), seed=0)
    assert len(spy.calls) == 1 and not any(k.startswith("temporal/") for k in batch.metrics)


def test_prompts_shown_demonstrations_get_no_shuffled_frames(tiny):
    """A prompt with demos answers with their help, not from frame order: temporal contrast skips
    it (no shuffled copy, no bonus) and still contrasts the other video prompts."""
    import dataclasses

    model, processor = tiny
    videos = load_task("video_motion", "train", 3, seed=0)

    class MarkFirst(SeededStream):
        def take(self, n, step=0):
            out = super().take(n, step)
            return [dataclasses.replace(out[0], meta={**out[0].meta, "demo_ids": ["x"]}), *out[1:]]

    cfg = load_config(None, ["rollout.group_size=2", "rollout.prompts_per_step=3", "rollout.max_new_tokens=3",
                             "temporal_contrast.enabled=true", "verifier_workers=0",
                             f"rewards=[{{verifier: '{EVEN}', weight: 1.0}}]"])
    spy = Spy(HFRolloutEngine(model, processor))
    collect(spy, MarkFirst(videos, seed=0), make_scorer(workers=0), with_algo(cfg, resolve_algo(cfg.algo, 3)), seed=0)
    (ordered, _, _), (shuffled, _, _) = spy.calls
    assert "demo_ids" in ordered[0].meta
    assert [s.id for s in shuffled] == [f"{s.id}#shuffled" for s in ordered[1:]]
