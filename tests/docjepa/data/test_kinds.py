"""Question kinds: one registry, from which the structure rules and the generator take their kinds."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from docjepa.data import kinds
from docjepa.data.kinds import canonical, check_kind, row_kind
from docjepa.data.record import Page
from docjepa.data.shards import SCHEMA, DocumentDataset
from docjepa.data.synth.layouts import Asker


def test_the_registry_names_each_kind_once_and_says_who_asks_it():
    names = [k.name for k in kinds.REGISTRY]
    assert len(names) == len(set(names)) == len(kinds.KINDS)
    askers = {"structure", "generator", "engine", "person"}
    assert all(k.askers and set(k.askers) <= askers and k.asks for k in kinds.REGISTRY)
    assert kinds.STRUCTURE_KINDS[0] == "title" and "page-number" in kinds.STRUCTURE_KINDS
    assert {"key", "field", "table", "layout", "choice", "ambiguous"} == set(kinds.GENERATED_KINDS)
    assert all(canonical(old) in kinds.KINDS for old in kinds.LEGACY)


def test_a_kind_nobody_registered_is_refused_where_a_question_is_made():
    with pytest.raises(ValueError, match="unknown question kind 'amount'"):
        check_kind("amount")
    with pytest.raises(ValueError, match="not one generator asks"):
        check_kind("title", "generator")
    with pytest.raises(ValueError, match="unknown question kind"):
        Asker(None, None).ask(["Where?"], "amount")


def test_rows_written_before_the_rename_read_with_their_kind(tmp_path, docs):
    """A shard whose questions still carry ``qtype`` (and the engine's older labels) reads as ``kind``."""
    page = DocumentDataset(docs / "d")[0]
    row = page.to_row()
    assert "kind" in row["questions"][0] and "qtype" not in row["questions"][0]
    old_question = pa.struct(
        [(f.name if f.name != "kind" else "qtype", f.type) for f in SCHEMA.field("questions").type.value_type]
    )
    old_schema = pa.schema([(f.name, pa.list_(old_question)) if f.name == "questions" else f for f in SCHEMA])
    old = dict(row)
    old["questions"] = [{("qtype" if k == "kind" else k): v for k, v in q.items()} for q in row["questions"]]
    old["questions"][0]["qtype"] = "engine-key"
    (tmp_path / "old").mkdir()
    pq.write_table(pa.Table.from_pylist([old], schema=old_schema), tmp_path / "old" / "shard-00000.parquet")
    back = DocumentDataset(tmp_path / "old")[0]
    assert back.questions[0].kind == "key"
    assert [q.kind for q in back.questions[1:]] == [q.kind for q in page.questions[1:]]
    assert Page.from_row(row).questions[0].kind == page.questions[0].kind
    assert row_kind({"text": "q"}) == "user" and row_kind({"kind": "a-users-own"}) == "a-users-own"
