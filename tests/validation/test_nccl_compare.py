"""The public nccl-tests comparison: every row priced, sourced and within a factor of the published bandwidth."""

from trainsim.validation.nccl_compare import compare, load_public, nccl_section


def test_every_public_row_has_a_source_and_a_prediction():
    df = load_public()
    assert len(df) >= 5 and df["source_url"].str.startswith("http").all()
    rows = compare()
    assert len(rows) == len(df)
    for c in rows:
        assert c.predicted_busbw > 0
        assert 0.5 < c.predicted_busbw / c.published_busbw < 2.0, c.id


def test_section_is_a_markdown_table_with_sources():
    text = nccl_section()
    assert text.startswith("## Collectives against public nccl-tests results")
    assert "| case | system |" in text and "Sources:" in text
    assert text.count("\n| ") == len(compare()) + 1
