"""The samples and token-roles writers on a batch whose groups differ in size (3, 1, 2), as hints,
pruning and episodes make them: every written row names its own prompt and its own reward.

Rows (groups contiguous): 0-2 prompt p0, 3 prompt p1, 4-5 prompt p2; rewards (3, 3) NaN-padded.
A writer that assumes N // B rows per group (6 // 3 = 2) would give row 2 to p1 and row 3 to p1
with the reward of rewards.view(-1)[3] = p1's first, and row 4 to p2 with view(-1)[4] = NaN.
"""

from __future__ import annotations

import json
import math

import torch

from mmrlvr.recipe.loop import _write_samples
from mmrlvr.methods.token_weighting.weigher import TokenWeighting, write_token_roles
from mmrlvr.types import RolloutBatch, Sample
from mmrlvr.verifiers.base import Verdict

NAN = float("nan")


def _batch(tokenizer=None) -> RolloutBatch:
    samples = [Sample(f"p{b}", [{"role": "user", "content": [{"type": "text", "text": f"question {b}"}]}], str(b), "exact")
               for b in range(3)]
    rewards = torch.tensor([[0.1, 0.2, 0.3], [0.4, NAN, NAN], [0.5, 0.6, NAN]])
    texts = [f"c{i}" for i in range(6)]  # c0..c5, one per row
    ids = torch.tensor([[5, 6, 7], [8, 9, 0], [10, 0, 0], [11, 12, 13], [14, 15, 0], [16, 0, 0]])
    mask = (ids != 0).long()
    return RolloutBatch(samples, {}, ids, mask, torch.zeros(6, dtype=torch.bool), rewards, texts,
                        [Verdict(float(i) / 10, f"why {i}") for i in range(6)], {}, group_sizes=[3, 1, 2])


def test_row_groups_place_each_row_in_its_group():
    assert _batch().row_groups() == [(0, 0), (0, 1), (0, 2), (1, 0), (2, 0), (2, 1)]


def test_samples_writer_names_each_rows_prompt_and_reward(tmp_path):
    # k=8: the first min(3, 8 // 2) = 3 prompts, up to 8 // 3 = 2 rows of each: rows 0, 1 | 3 | 4, 5
    _write_samples(tmp_path, 7, _batch(), k=8)
    rows = [json.loads(x) for x in (tmp_path / "samples" / "step_7.jsonl").read_text().splitlines()]
    got = [(r["id"], r["prompt"], r["completion"], r["score"]) for r in rows]
    assert got == [("p0", 0, "c0", 0.0), ("p0", 0, "c1", 0.1), ("p1", 1, "c3", 0.3), ("p2", 2, "c4", 0.4), ("p2", 2, "c5", 0.5)]
    for r, want in zip(rows, [0.1, 0.2, 0.4, 0.5, 0.6], strict=True):  # float32 rewards
        assert math.isclose(r["reward"], want, rel_tol=1e-6)
    assert rows[2]["prompt_text"] == "question 1" and rows[2]["reference"] == "1"


def test_token_roles_writer_names_each_rows_prompt_and_reward(tmp_path, tiny):
    _, processor = tiny
    batch = _batch()
    adv = torch.tensor([[1.0], [2.0], [3.0], [4.0], [5.0], [6.0]])  # (N, 1) flat, as advantages_for gives
    rows = [2, 3, 4]  # the rows around the group boundaries
    tw = TokenWeighting(torch.ones(6, 3) * torch.arange(1, 7).view(6, 1), rows,
                        {"entropy": torch.tensor([[0.5, 0.0, 0.0], [0.25, 0.75, 1.0], [1.5, 2.5, 0.0]])})
    path = write_token_roles(tmp_path, 3, batch, adv, tw, processor.tokenizer, "none", k=3)
    recs = [json.loads(x) for x in path.read_text().splitlines()]
    assert [(r["row"], r["sample_id"], r["advantage"]) for r in recs] == [(2, "p0", 3.0), (3, "p1", 4.0), (4, "p2", 5.0)]
    assert [round(r["reward"], 6) for r in recs] == [0.3, 0.4, 0.5]
    assert [r["token_ids"] for r in recs] == [[10], [11, 12, 13], [14, 15]]  # padding excluded
    assert [r["weights"] for r in recs] == [[3.0], [4.0, 4.0, 4.0], [5.0, 5.0]]
    assert recs[1]["signals"] == {"entropy": [0.25, 0.75, 1.0]} and recs[2]["labels"] == ["other", "other"]
