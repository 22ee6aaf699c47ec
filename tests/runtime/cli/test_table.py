from runtime.cli.table import render


def test_columns_align_to_the_widest_cell():
    assert render(["id", "status"], [["trg_1", "ok"], ["t", "owner_offline"]]) == [
        "ID     STATUS",
        "trg_1  ok",
        "t      owner_offline",
    ]


def test_no_rows_is_just_the_header():
    assert render(["a", "bb"], []) == ["A  BB"]
