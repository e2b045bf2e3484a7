"""arrol's quality head: its first AdamW step by hand, that it learns a separable signal, when it is
trusted, and that its JSON state resumes it bit for bit (weights, AdamW moments, trust window)."""

import json
import math

import pytest
import torch

from mmrlvr.methods.arrol.head import QualityHead


def test_fresh_head_scores_one_half_and_is_not_trusted():
    head = QualityHead()
    assert torch.equal(head.score(torch.randn(3, 8)), torch.full((3,), 0.5))
    assert not head.trusted() and math.isnan(head.window_auroc())


def test_first_adamw_step_by_hand():
    """w = b = 0, so every p = 0.5 and dBCE/db = mean(p - y). Labels (1, 1, 0): mean(-0.5, -0.5, 0.5) =
    -1/6. AdamW's first step moves a parameter by -lr * g / (|g| + eps) = +lr for b. For w_j the
    gradient is mean((p - y) * LN(h)_j): with h rows (5, 6), (5, 6), (1, 0), LN maps each row to
    (-1, +1), (-1, +1), (+1, -1) (times 1/sqrt(1 + 1e-5)); the gradient of w_0 is
    (0.5 + 0.5 + 0.5) / 3 > 0, so w_0 moves -lr and w_1 moves +lr (without the normalisation the raw
    (5, 6) rows would push both the other way)."""
    head = QualityHead(lr=0.1, steps=1)
    h = torch.tensor([[5.0, 6.0], [5.0, 6.0], [1.0, 0.0]])
    loss = head.fit(h, torch.tensor([1, 1, 0]))
    assert loss == pytest.approx(math.log(2), abs=1e-6)  # the loss before the step: BCE at p = 0.5
    assert head.b.item() == pytest.approx(0.1, abs=1e-6)
    assert head.w.tolist() == pytest.approx([-0.1, 0.1], abs=1e-6)


def test_learns_a_separable_signal_and_becomes_trusted():
    g = torch.Generator().manual_seed(0)
    h = torch.randn(64, 16, generator=g)
    y = (h[:, 3] > 0).long()  # success is written in one direction of the hidden state
    head = QualityHead(lr=0.05, steps=50, window=64, min_labels=32, min_auroc=0.9)
    head.observe(head.score(h), y)  # out of sample, before learning: every score 0.5 -> AUROC 0.5
    assert head.window_auroc() == 0.5 and not head.trusted()
    head.fit(h, y)
    head.observe(head.score(h), y)  # the window keeps the newest 64: these
    assert head.window_auroc() > 0.99 and head.trusted()


def test_trust_needs_enough_labels_of_both_classes():
    head = QualityHead(min_labels=4, min_auroc=0.6, window=5)
    head.observe(torch.tensor([0.9, 0.1, 0.8]), torch.tensor([1, 0, 1]))
    assert head.window_auroc() == 1.0 and not head.trusted()  # 3 < min_labels
    head.observe(torch.tensor([0.2]), torch.tensor([0]))
    assert head.trusted()
    head.observe(torch.tensor([0.7, 0.7, 0.7]), torch.tensor([1, 1, 1]))  # window 5: the first two fall out
    assert [y for _, y in head.seen] == [1, 0, 1, 1, 1]
    # positives {0.8, 0.7 x3} against the negative 0.2: 1.0
    assert head.window_auroc() == 1.0
    head.observe(torch.tensor([0.9, 0.9, 0.9, 0.9, 0.9]), torch.tensor([1, 1, 1, 1, 1]))
    assert math.isnan(head.window_auroc()) and not head.trusted()  # one class only


def test_state_round_trips_through_json_exactly():
    g = torch.Generator().manual_seed(1)
    h, y = torch.randn(10, 6, generator=g), torch.randint(0, 2, (10,), generator=g)
    a = QualityHead(lr=0.03, weight_decay=0.01, steps=3)
    a.fit(h, y)
    a.observe(a.score(h), y)
    b = QualityHead(lr=0.03, weight_decay=0.01, steps=3)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert b.seen == a.seen and b.fits == a.fits == 1
    a.fit(h, y), b.fit(h, y)  # the moments were restored too: the next steps agree bit for bit
    assert torch.equal(a.w, b.w) and torch.equal(a.b, b.b)
    assert torch.equal(a.score(h), b.score(h))
