"""arrol's quality head: a logistic probe on the policy's final hidden state at the prefix, trained on
the fly from the rows that finished, saved in the run state (JSON) so a resume continues exactly.

OUR READING (the paper says "a lightweight quality head trained on-the-fly to predict the success
probability of partial rollouts"; no code is public):
- input: the (H,) final hidden state `lm_head` read when the row's last prefix token was drawn
  (`PrefixView.hidden`, captured during generation: no extra forward), layer-normalised without
  affine parameters so its scale does not depend on the model;
- model: p = sigmoid(w . LN(h) + b), w (H,) and b zero at the start (every row scores 0.5);
- data: each round's survivors once they are scored, label 1 when verifier reward / largest reward
  >= `positive_at`; the pruned rows never finish, so they are never labelled;
- optimiser: AdamW (float32, on the CPU), `steps` full-batch steps of binary cross-entropy per round
  on that round's survivors, constant learning rate, no buffer of older rows;
- trust: the survivors' scores are recorded before the head learns from them (out of sample); the
  head selects only while the AUROC of the newest `window` such pairs is >= `min_auroc` (with at
  least `min_labels` pairs and both classes), else the caller falls back to a head-free choice.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mmrlvr.methods.arrol.pruning import auroc


def _to_json(value):
    """Tensors -> {"tensor": nested lists, "dtype": name}: float32 values round-trip exactly through
    JSON (each is a float64 Python float written in its shortest exact form)."""
    if isinstance(value, torch.Tensor):
        return {"tensor": value.tolist(), "dtype": str(value.dtype).removeprefix("torch.")}
    if isinstance(value, dict):
        return {str(k): _to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_json(v) for v in value]
    return value


_DTYPES = {"float32": torch.float32, "float64": torch.float64, "int64": torch.int64}


def _from_json(value):
    if isinstance(value, dict) and set(value) == {"tensor", "dtype"}:
        if value["dtype"] not in _DTYPES:
            raise ValueError(f"arrol head state: unknown dtype {value['dtype']!r}")
        return torch.tensor(value["tensor"], dtype=_DTYPES[value["dtype"]])
    if isinstance(value, dict):
        return {k: _from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    return value


class QualityHead:
    """p(success | prefix hidden state); built lazily at the first hidden state (its width H)."""

    def __init__(self, lr: float = 1e-2, weight_decay: float = 0.0, steps: int = 4, window: int = 256,
                 min_labels: int = 16, min_auroc: float = 0.6):
        self.lr, self.weight_decay, self.steps = lr, weight_decay, steps
        self.window, self.min_labels, self.min_auroc = window, min_labels, min_auroc
        self.w: torch.Tensor | None = None  # (H,) float32
        self.b: torch.Tensor | None = None  # (1,) float32
        self.opt: torch.optim.AdamW | None = None
        self.seen: list[tuple[float, int]] = []  # the newest `window` out-of-sample (score, label) pairs
        self.fits = 0  # rounds learned from

    def _build(self, width: int) -> None:
        self.w = torch.zeros(width, requires_grad=True)
        self.b = torch.zeros(1, requires_grad=True)
        self.opt = torch.optim.AdamW([self.w, self.b], lr=self.lr, weight_decay=self.weight_decay)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(R, H) hidden states -> (R,) logits (with the graph when the head trains)."""
        h = hidden.detach().float().cpu()
        if self.w is None:
            self._build(h.shape[-1])
        if h.shape[-1] != self.w.shape[0]:
            raise ValueError(f"arrol head: hidden width {h.shape[-1]}, the head was built for {self.w.shape[0]}")
        return F.layer_norm(h, (h.shape[-1],)) @ self.w + self.b

    @torch.no_grad()
    def score(self, hidden: torch.Tensor) -> torch.Tensor:
        """(R, H) -> (R,) predicted success probabilities."""
        return torch.sigmoid(self.logits(hidden))

    def window_auroc(self) -> float:
        if not self.seen:
            return float("nan")
        s, y = zip(*self.seen)
        return auroc(torch.tensor(s), torch.tensor(y))

    def trusted(self) -> bool:
        """Better than chance by the margin asked for, on enough out-of-sample labels of both classes."""
        a = self.window_auroc()
        return len(self.seen) >= self.min_labels and a == a and a >= self.min_auroc

    def observe(self, scores: torch.Tensor, labels: torch.Tensor) -> None:
        """Record out-of-sample (score, label) pairs (scored before the head learned from them)."""
        self.seen = (self.seen + list(zip(scores.float().tolist(), labels.long().tolist())))[-self.window:]

    def fit(self, hidden: torch.Tensor, labels: torch.Tensor) -> float:
        """`steps` AdamW steps of BCE on (K, H) hidden states and (K,) labels; the last loss."""
        if hidden.shape[0] == 0:
            return float("nan")
        y = labels.float().cpu()
        loss = torch.tensor(float("nan"))
        with torch.enable_grad():
            for _ in range(self.steps):
                self.opt.zero_grad(set_to_none=True) if self.opt is not None else None
                loss = F.binary_cross_entropy_with_logits(self.logits(hidden), y)
                loss.backward()
                self.opt.step()
        self.fits += 1
        return float(loss.detach())

    def state_dict(self) -> dict:
        """JSON-serialisable: weights, AdamW state, the trust window, rounds learned."""
        built = self.w is not None
        return {"w": _to_json(self.w.detach()) if built else None, "b": _to_json(self.b.detach()) if built else None,
                "opt": _to_json(self.opt.state_dict()) if built else None,
                "seen": [list(p) for p in self.seen], "fits": self.fits}

    def load_state_dict(self, state: dict) -> None:
        if state.get("w") is not None:
            w = _from_json(state["w"])
            self._build(w.shape[0])
            with torch.no_grad():
                self.w.copy_(w)
                self.b.copy_(_from_json(state["b"]))
            opt = _from_json(state["opt"])
            for group in opt["param_groups"]:
                group["params"] = [int(p) for p in group["params"]]
            opt["state"] = {int(k): v for k, v in opt["state"].items()}
            self.opt.load_state_dict(opt)
        self.seen = [(float(s), int(y)) for s, y in state.get("seen", [])]
        self.fits = int(state.get("fits", 0))
