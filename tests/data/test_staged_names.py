"""Rows `mmrlvr.run` staged are named in messages as the user handed them over: `train_data` /
`eval_data` and the row's index in their list, never `.mmrlvr_inputs/train-<hash>/...`."""

from mmrlvr.data.staged import row_place, shown

RUN = "/runs/a/.mmrlvr_inputs"


def test_staged_rows_are_named_train_data_and_eval_data():
    assert shown(f"{RUN}/train-0123456789abcdef/train") == "train_data"
    assert shown(f"{RUN}/eval-0123456789abcdef/eval.jsonl") == "eval_data"
    assert shown("/data/rows.jsonl") == "/data/rows.jsonl"
    assert shown(f"{RUN}/train-nothex/train") == f"{RUN}/train-nothex/train"  # not a folder mmrlvr.run wrote


def test_a_staged_jsonl_line_is_the_row_index_of_the_list():
    # JSONL line 3 is the third row: index 2 in the list passed as train_data
    assert row_place(f"{RUN}/train-0123456789abcdef/train.jsonl", 3) == "train_data row 2"
    assert row_place("/data/clips.jsonl", 3) == "/data/clips.jsonl:3"
