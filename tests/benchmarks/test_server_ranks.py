"""benchmarks/speed/server_ranks.py measures what it says, at toy size: both arms sample every rank's
prompts (each server's load adds up to the pool's expected tokens of both ranks' prompts), A sends one
request per rank to each server and B one in all, B moves at least the images' pixels between ranks,
and the script writes its JSON and table rows. Splitting one output by rank gives each rank its own."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.speed import server_ranks  # noqa: E402


def test_both_arms_sample_every_prompt_and_b_moves_the_images(tmp_path, capsys, tiny):
    from mmrlvr.data.collate import encode_prompts

    out = tmp_path / "sr.json"
    argv = ["--repeats", "2", "--prompts-per-rank", "2", "--group-size", "2", "--max-new-tokens", "3",
            "--image-size", "56", "--costs", "tokens", "--out", str(out)]
    assert server_ranks.main(argv) == 0
    a, b = json.loads(out.read_text())["results"]
    # by hand: each prompt costs its processor length (its image's tokens included) + 3 new tokens x 2
    samples = [s for rank in (0, 1) for s in server_ranks.samples_of(rank, 2, 56)]
    lengths = encode_prompts(tiny[1], samples)["attention_mask"].sum(dim=1).tolist()
    expected = sum(n + 3 * 2 for n in lengths)
    assert len(set(lengths)) == 1  # equal prompts: two per server in both arms
    assert sum(a["tokens_per_server_per_call"]) == sum(b["tokens_per_server_per_call"]) == expected
    assert a["tokens_per_server_per_call"] == b["tokens_per_server_per_call"] == [expected / 2] * 2
    assert a["requests_per_server_per_call"] == [2, 2] and b["requests_per_server_per_call"] == [1, 1]
    assert b["bytes_gathered"] > 2 * 56 * 56 * 3  # rank 1's two images cross, as pixels
    assert b["bytes_scattered"] > 0 and "bytes_gathered" not in a
    assert a["repeats"] == b["repeats"] == 2 and len(b["b_over_a"]) == 2
    assert all(s > 0 for s in a["slower_rank_s"] + b["slower_rank_s"])
    assert "| tokens | A |" in capsys.readouterr().out


def test_splitting_one_output_gives_each_rank_its_prompts_and_completions(tiny):
    from mmrlvr.data.collate import encode_prompts
    from mmrlvr.rollout.vllm_inputs import SampledText, rollout_output

    _, processor = tiny
    samples = [*server_ranks.samples_of(0, 2, 56), *server_ranks.samples_of(1, 1, 112)]
    raw = [[SampledText([10 * i + j], f"{i}{j}", "stop", [-0.5]) for j in range(2)] for i in range(3)]
    whole = rollout_output(processor, samples, raw, 0, True)
    first, second = server_ranks.split(whole, [2, 1], 2)
    alone = encode_prompts(processor, samples[2:])
    assert [c.sample_index for c in second.completions] == [0, 0] and second.completion_ids.tolist() == [[20], [21]]
    assert [c.text for c in first.completions] == ["00", "01", "10", "11"]
    assert second.prompt_inputs["pixel_values"].equal(alone["pixel_values"])  # the 112 px image's patches alone
    assert second.prompt_inputs["image_grid_thw"].tolist() == alone["image_grid_thw"].tolist()
    assert first.prompt_inputs["pixel_values"].shape[0] + second.prompt_inputs["pixel_values"].shape[0] == \
        whole.prompt_inputs["pixel_values"].shape[0]
    assert second.prompt_inputs["_n_images"] == [1]


def test_one_prompt_per_rank_goes_to_a_server_each_in_both_arms(tmp_path, tiny):
    # each rank spreads only its own prompt, and breaks a tie between two idle servers from its own
    # server (rank r starts at server r): A sends one prompt to each server, as B does after gathering
    out = tmp_path / "sr.json"
    argv = ["--repeats", "1", "--prompts-per-rank", "1", "--group-size", "2", "--max-new-tokens", "3",
            "--image-size", "56", "--costs", "batched", "--out", str(out)]
    assert server_ranks.main(argv) == 0
    a, b = json.loads(out.read_text())["results"]
    per_prompt = b["tokens_per_server_per_call"][0]
    assert a["tokens_per_server_per_call"] == [per_prompt, per_prompt] and a["requests_per_server_per_call"] == [1, 1]
    assert b["tokens_per_server_per_call"] == [per_prompt, per_prompt] and b["requests_per_server_per_call"] == [1, 1]
    assert a["server_imbalance"] == 1.0 and b["server_imbalance"] == 1.0
