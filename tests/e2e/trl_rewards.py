"""Reward functions written for TRL and EasyR1, unchanged, named in configs as file.py:fn."""

import asyncio


def reward_len(completions, **kwargs):
    """TRL's documentation example: reward completions close to 20 characters."""
    return [-abs(20 - len(completion)) for completion in completions]


def reward_len_seen_kwargs(completions, prompts, completion_ids, solution, **kwargs):
    """Scores what TRL would pass: 1 when the prompt, the ids and the solution column arrived."""
    return [float(bool(p) and ids is not None and len(ids) > 0 and s is not None)
            for p, ids, s in zip(prompts, completion_ids, solution)]


def only_short(completions, **kwargs):
    """None where the reward does not apply (TRL: excluded from the sum)."""
    return [1.0 if len(c) < 5 else None for c in completions]


def compute_score(reward_inputs):
    """EasyR1's batch shape: overall and named sub-scores per input."""
    return [{"overall": float(len(x["response"]) % 2 == 0), "format": 1.0, "length": float(x["response_length"] or 0)}
            for x in reward_inputs]


def compute_score_sequential(predict_str, ground_truth):
    """EasyR1's sequential shape."""
    return {"overall": float(str(ground_truth) in predict_str), "accuracy": float(str(ground_truth) in predict_str)}


def always_raises(completions, **kwargs):
    """A reward broken on every item (a typo'd column, say)."""
    raise KeyError("answer_text")


def takes_three(completion, sample, reference):
    """No known shape: three required positional parameters."""
    return 0.0


CALLS = {"n": 0}


def breaks_after_twelve_items(completions, **kwargs):
    """Works for the 4 held-out items before RL and step 1's 8 completions, then raises on every
    item (in-process scoring keeps the count)."""
    CALLS["n"] += len(completions)
    if CALLS["n"] > 12:
        raise ValueError("the grader's service went away")
    return [float(len(c) % 2 == 0) for c in completions]


async def reward_len_async(completions, **kwargs):
    """TRL's example written `async def` (a reward that calls a judge over the network, say)."""
    await asyncio.sleep(0.01)
    return [-abs(20 - len(completion)) for completion in completions]


async def judge(completion, sample):
    """mmrlvr's own shape, `async def`."""
    await asyncio.sleep(0.01)
    return 1.0 if str(sample.reference) in completion else 0.0


async def compute_score_async(predict_str, ground_truth):
    """EasyR1's sequential shape, `async def`."""
    await asyncio.sleep(0.01)
    return {"overall": float(str(ground_truth) in predict_str), "accuracy": 0.5}


async def judge_never_answers(completions, **kwargs):
    """A judge that hangs: awaited past any time-out."""
    await asyncio.sleep(60)
    return [1.0 for _ in completions]


async def slow_judge(completions, **kwargs):
    """A judge that answers after 0.6 s: within a 5 s time-out, past a 0.2 s one."""
    await asyncio.sleep(0.6)
    return [1.0 for _ in completions]
