"""A config that would expand to billions of values is refused at once; errors never print huge values."""

import time

import pytest

from mmrlvr.cli import main
from mmrlvr.config import ConfigError, check_expanded_size, load_config, short

# inside task.args (a free-form mapping the schema accepts): 6 levels of 9 aliases, 9**6 = 531,441
# strings once expanded from ~250 bytes; each level more multiplies by 9 (9 levels: 387 million)
BOMB = "task:\n  args:\n    a: &a [" + ",".join(['"lol"'] * 9) + "]\n" + "".join(
    f"    {n}: &{n} [" + ",".join([f"*{p}"] * 9) + "]\n" for p, n in zip("abcde", "bcdef"))


def test_alias_bomb_is_refused_fast(tmp_path, capsys):
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    t0 = time.perf_counter()
    for cmd in (["train", str(path)], ["eval", str(path), "--checkpoint", "tiny"]):
        assert main(cmd) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "holds more than 100000 values once YAML aliases are expanded" in err[0]
    assert time.perf_counter() - t0 < 10


def test_aliases_within_the_bound_still_work(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text("rewards: &r [{verifier: count, weight: 0.5}]\neval: {verifiers: [count]}\n")
    assert load_config(path).rewards[0].weight == 0.5
    # the walk counts shared nodes each time they are used: 1 list + 3 x (list of 2) = 1 + 3 + 6 = 10
    shared = [1, 2]
    check_expanded_size([shared, shared, shared], "x", limit=10)
    with pytest.raises(ConfigError, match="more than 9 values"):
        check_expanded_size([shared, shared, shared], "x", limit=9)


def test_errors_print_a_short_value(tmp_path):
    path = tmp_path / "long.yaml"
    path.write_text("seed: ['" + "x" * 100_000 + "']\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert len(str(err.value)) < 200 and "seed: expected int" in str(err.value)
    assert len(short(list(range(10**6)))) <= 80


def test_a_python_dict_past_the_bound_is_refused_naming_the_config():
    """A dict from Python (mmrlvr.run) goes through the same bound: 6 levels of one list shared 9
    times is 531,441 values once copied."""
    from mmrlvr.api import as_config

    node = ["lol"] * 9
    for _ in range(5):
        node = [node] * 9
    with pytest.raises(ConfigError, match=r"^config: holds more than 100000 values"):
        as_config({"task": {"args": {"a": node}}})
