"""`mmrlvr config --show` prints the chosen task's arguments: this config's value, else the default."""

import yaml

from mmrlvr.cli import main


def _args_block(out: str) -> list[str]:
    lines = out.splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith("  args:"))
    block = [lines[start]]
    for x in lines[start + 1:]:
        if not x.startswith("    "):
            break
        block.append(x)
    return block


def test_config_show_lists_the_task_arguments_with_defaults(capsys):
    assert main(["config", "--show", "configs/chart_tiny.yaml", "task.args.kinds=[bar]", "task.args.questions=[value, max, diff, tallest]",
                 "task.eval_size=7", "task.args.flaw_prob=0.25", "task.args.typo=1"]) == 0
    block = _args_block(capsys.readouterr().out)
    assert "The arguments of task chart (also `mmrlvr tasks chart`)" in block[0]
    assert "    kinds: [bar]  # set; default [bar, line]" in block
    assert "    questions: [value, max, diff, tallest]  # default" in block  # a list equal to the tuple default
    assert "    flaw_prob: 0.25  # set; default 0.7" in block
    assert "    holdout_frac: 0.1  # default" in block and "    prompt_template: null  # default" in block
    assert "    eval_size: 7  # from task.eval_size" in block
    assert block[-1] == "    typo: 1  # not an argument of task 'chart'"
    # the block is YAML: the arguments as the task will receive them (typo included, as given)
    args = yaml.safe_load("\n".join(x[2:] for x in block))["args"]
    assert args["kinds"] == ["bar"] and args["flaw_prob"] == 0.25 and args["template"] == "answer" and len(args) == 15  # 14 build() arguments + typo


def test_config_show_without_a_file_shows_the_default_task(capsys):
    assert main(["config", "--show"]) == 0
    block = _args_block(capsys.readouterr().out)
    # counting's build(): max_red=5, max_total=9, flaw_min=3, flaw_prob=0.7, eval_size from task.eval_size (256)
    assert block[1:] == ["    max_red: 5  # default", "    max_total: 9  # default", "    flaw_min: 3  # default",
                         "    flaw_prob: 0.7  # default", "    eval_size: 256  # from task.eval_size",
                         "    prompt_template: null  # default", "    system_prompt: null  # default"]
