"""``business_pages.py``: the docs table is the committed run; each question counts in its kind, family, language
and held-out groups."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "scripts"))

import business_pages as bp  # noqa: E402


def test_the_docs_table_is_the_committed_run():
    result = json.loads((ROOT / "benchmarks/results/docjepa/business/shipped.json").read_text())
    text = (ROOT / "docs/docjepa-extract.md").read_text()
    assert text.split(bp.START, 1)[1].split(bp.END, 1)[0].strip() == bp.markdown(result)
    s = result["scores"]
    assert s["all"]["questions"] == sum(s[k]["questions"] for k in s if k.startswith("kind: "))
    held = s["held-out family (boxed)"]["questions"] + s["held-out language (it)"]["questions"]
    assert s["families and languages trained on"]["questions"] + held >= s["all"]["questions"]  # boxed Italian: twice


def test_groups_and_rates():
    rows = [
        {
            "layout": "business/boxed/it",
            "kind": "key",
            "iou": 1.0,
            "baseline_iou": 0.0,
            "anls": 1.0,
            "baseline_anls": 0.5,
        },
        {
            "layout": "business/right/de",
            "kind": "key",
            "iou": 0.5,
            "baseline_iou": 1.0,
            "anls": 0.2,
            "baseline_anls": 1.0,
        },
        {"layout": "business/right/de", "kind": "field", "iou": 0.0, "baseline_iou": 0.0, "anls": None},
    ]
    s = bp.summarise(rows)
    assert s["all"] == {"questions": 3, "model mIoU": 0.5, "baseline mIoU": 0.3333, "model exact": 0.5,
                        "baseline exact": 0.5}  # fmt: skip
    for r, words in zip(rows, (1.0, 0.25, 0.0)):
        r["paths"] = {"mask": r["iou"], "words": words}
    s = bp.summarise(rows)
    assert (s["all"]["mask mIoU"], s["all"]["words mIoU"]) == (0.5, 0.4167)
    assert (s["kind: key"]["mask mIoU"], s["kind: key"]["words mIoU"]) == (0.75, 0.625)
    assert s["held-out family (boxed)"]["questions"] == s["held-out language (it)"]["questions"] == 1
    assert s["families and languages trained on"]["questions"] == 2 and s["kind: field"]["model exact"] == 0.0


def test_each_question_counts_in_what_it_asks_for():
    from docjepa.data.synth.business import BY_LABEL, NAMES, PARTIES, QUESTIONS
    from docjepa.data.synth.phrasings import EXTRA

    fields = bp.field_names()
    assert fields[QUESTIONS["due date"][1]] == "value: due date" and fields[NAMES["seller"][0]] == "name: seller"
    assert fields[PARTIES["buyer"][0]] == "block: buyer" and fields[BY_LABEL[0]] == "by label"
    extra = EXTRA[QUESTIONS["number"][0]]
    assert extra and all(fields[t] == "value: number" for t in extra)
    row = {"layout": "business/right/de", "kind": "key", "iou": 0.5, "baseline_iou": 0.0, "anls": 1.0}
    rows = [row | {"template": NAMES["buyer"][2]}, row | {"template": "Some other question?", "iou": 0.0}]
    s = bp.summarise(rows)
    assert s["asks name: buyer"]["questions"] == 1 and s["asks name: buyer"]["model mIoU"] == 0.5
    assert s["all"]["questions"] == 2 and not any(k.startswith("asks") and k != "asks name: buyer" for k in s)


def test_a_question_worded_as_no_training_question_counts_apart():
    from docjepa.data.split import SplitConfig, template_held_out
    from docjepa.data.synth.phrasings import EXTRA

    wordings = [t for ts in EXTRA.values() for t in ts]
    held = next(t for t in wordings if template_held_out(t, SplitConfig()))
    kept = next(t for t in wordings if not template_held_out(t, SplitConfig()))
    row = {"layout": "business/right/de", "kind": "key", "iou": 0.5, "baseline_iou": 0.0, "anls": 1.0}
    s = bp.summarise([row | {"template": held}, row | {"template": kept, "iou": 0.0}, row])
    assert s["held-out wording"]["questions"] == 1 and s["held-out wording"]["model mIoU"] == 0.5
    assert s["trained wording"]["questions"] == 1 and s["trained wording"]["model mIoU"] == 0.0
    assert s["all"]["questions"] == 3  # a question without a template counts in neither


def test_the_continued_run_table_is_the_committed_runs():
    """The shipped / continued / joint-reader / real-mix / wider-grammar (500 and 1,000 steps) table of
    docs/docjepa-extract.md quotes the thirteen committed JSON files (the model shipped then: ``shipped-before``)."""
    res = ROOT / "benchmarks/results/docjepa"
    runs = ("shipped", "continued-500", "joint-500", "real-mix-500", "wider-500", "wider-1000")
    files = ("shipped-before", *runs[1:])
    business = [json.loads((res / f"business/{n}.json").read_text())["scores"] for n in files]
    real = json.loads((res / "business/real.json").read_text())["models"]
    # other generators' invoices as every run here was scored: word answers with the key kept before a value
    scored = ("shipped-keys", *runs[1:])
    foreign = [
        json.loads((res / f"foreign/{n}.json").read_text())["scores"]["by_generator"]["all"]["all"] for n in scored
    ]
    want = {
        "business pages, `key` mIoU": [f"{b['kind: key']['model mIoU']:.3f}" for b in business],
        "business pages, `field` mIoU": [f"{b['kind: field']['model mIoU']:.3f}" for b in business],
        "held-out family (`boxed`), mIoU": [f"{b['held-out family (boxed)']['model mIoU']:.3f}" for b in business],
        "held-out language (Italian), mIoU": [f"{b['held-out language (it)']['model mIoU']:.3f}" for b in business],
        "business pages, exact answers": [f"{b['all']['model exact']:.0%}".replace("%", " %") for b in business],
        "real pages (structure questions), mIoU": [f"{real[n]['mIoU']:.3f}" for n in runs],
        "other generators' invoices, exact answers": [f"{f['model exact']:.0%}".replace("%", " %") for f in foreign],
    }
    text = (ROOT / "docs/docjepa-extract.md").read_text().split("### What training on the grammar does", 1)[1]
    rows = {
        cells[0]: cells[1:]
        for line in text.splitlines()
        if line.startswith("| ") and len(cells := [c.strip() for c in line.strip("|").split("|")]) == 1 + len(runs)
    }
    for name, values in want.items():
        assert rows[name] == values, name


def test_the_joint_layers_table_is_the_committed_runs():
    import question_cost as qc

    text = (ROOT / "docs/docjepa-extract.md").read_text()
    assert text.split(qc.START, 1)[1].split(qc.END, 1)[0].strip() == qc.layers_table(
        ROOT / "benchmarks/results/docjepa"
    )


def test_the_word_span_table_is_the_committed_runs():
    """The mask / reading-order span / touching span table of docs/docjepa-extract.md quotes the two JSON files."""
    res = ROOT / "benchmarks/results/docjepa/business"
    now = json.loads((res / "wider-1000.json").read_text())["scores"]
    before = json.loads((res / "wider-1000-reading-order-span.json").read_text())["scores"]
    groups = {
        "business pages, `key` mIoU": "kind: key",
        "business pages, `field` mIoU": "kind: field",
        "held-out family (`boxed`), mIoU": "held-out family (boxed)",
        "held-out language (Italian), mIoU": "held-out language (it)",
        "all business questions, mIoU": "all",
    }
    text = (ROOT / "docs/docjepa-extract.md").read_text().split("### The word decoder's answers", 1)[1]
    rows = {
        cells[0]: cells[1:]
        for line in text.split("###", 1)[0].splitlines()
        if line.startswith("| ") and len(cells := [c.strip() for c in line.strip("|").split("|")]) == 4
    }
    for name, group in groups.items():
        want = [now[group]["mask mIoU"], before[group]["words mIoU"], now[group]["words mIoU"]]
        assert rows[name] == [f"{v:.3f}" for v in want], name


def test_the_path_model_table_is_the_committed_runs():
    """The mask / word span / auto table of docs/docjepa-extract.md quotes the run's committed JSON files, and the
    auto column is the predictor's answer under the calibration that chose it."""
    import path_model_table as pm

    res = ROOT / "benchmarks/results/docjepa"
    text = (ROOT / "docs/docjepa-extract.md").read_text()
    assert text.split(pm.START, 1)[1].split(pm.END, 1)[0].strip() == pm.table(res)
    business = json.loads((res / f"business/{pm.RUN}.json").read_text())
    calibration = json.loads((res / f"business/{pm.RUN}-calibration.json").read_text())["answer_paths"]
    assert business["words_threshold"] == calibration["words_threshold"] and calibration["path_model"] is not None


def test_the_longer_training_and_field_tables_are_the_committed_runs():
    """docs/docjepa-extract.md's longer-training table quotes each run's committed JSON files (each run's business
    answers under its own calibration), and every business question counts in what it asks for."""
    import path_model_table as pm

    res = ROOT / "benchmarks/results/docjepa"
    text = (ROOT / "docs/docjepa-extract.md").read_text()
    longer = text.split(pm.LONGER_START, 1)[1].split(pm.LONGER_END, 1)[0].strip()
    assert longer == pm.longer_table(res)
    everything = next(line for line in longer.splitlines() if "all business questions, mIoU" in line)
    for i, run in enumerate(pm.LONGER.values()):
        business = json.loads((res / f"business/{run}.json").read_text())
        calibration = json.loads((res / f"business/{run}-calibration.json").read_text())["answer_paths"]
        assert business["words_threshold"] == calibration["words_threshold"]
        assert everything.split("|")[2 + i].strip() == f"{business['scores']['all']['model mIoU']:.3f}"
    scores = json.loads((res / f"business/{pm.LONGER['2,000 steps']}.json").read_text())["scores"]
    asked = [k for k in scores if k.startswith("asks ")]
    assert "asks name: seller" in asked and "asks value: total" in asked
    assert sum(scores[k]["questions"] for k in asked) == scores["all"]["questions"]


def test_the_token_loss_table_is_the_committed_runs():
    """docs/docjepa-extract.md's token-loss table quotes each run's committed JSON files, each run scored with the
    span threshold and path threshold its own calibration chose."""
    import path_model_table as pm

    res = ROOT / "benchmarks/results/docjepa"
    text = (ROOT / "docs/docjepa-extract.md").read_text()
    assert text.split(pm.BALANCED_START, 1)[1].split(pm.BALANCED_END, 1)[0].strip() == pm.balanced_table(res)
    from docjepa.inference.word_answer import WORD_LOGIT

    for run in pm.BALANCED.values():
        calibration = json.loads((res / f"business/{run}-calibration.json").read_text())
        chosen = calibration.get("word_span", {}).get("span_logit", WORD_LOGIT)  # none chosen: the default
        for scored in (res / f"business/{run}.json", res / f"foreign/{run}-words.json", res / f"foreign/{run}.json"):
            assert json.loads(scored.read_text()).get("span_logit", WORD_LOGIT) == chosen, scored
        business = json.loads((res / f"business/{run}.json").read_text())
        assert business["words_threshold"] == calibration["answer_paths"]["words_threshold"]
        errors = json.loads((res / f"business/{run}-errors.json").read_text())["fields"]["all"]
        assert sum(errors[s] for s in ("exact", "runs on", "cut short", "another")) == errors["questions"]


def test_the_line_break_table_is_each_model_under_two_calibrations():
    """docs/docjepa-extract.md's line-break table quotes the committed JSON files of each model calibrated without
    and with the line-break threshold, each scored under the thresholds its calibration chose."""
    import path_model_table as pm

    res = ROOT / "benchmarks/results/docjepa"
    text = (ROOT / "docs/docjepa-extract.md").read_text()
    table = text.split(pm.LINES_START, 1)[1].split(pm.LINES_END, 1)[0].strip()
    assert table == pm.balanced_table(res, pm.LINES, lines=True)
    runs = list(pm.LINES.values())
    for before, run in zip(runs[::2], runs[1::2]):
        assert run == f"{before}-lines"
        old, new = (json.loads((res / f"business/{r}-calibration.json").read_text()) for r in (before, run))
        assert old["word_span"].get("line_logit") is None and new["word_span"]["line_logit"] is not None
        rules = {(r["span_logit"], r["line_logit"]): r["mIoU"] for r in new["word_span"]["words_mIoU_by_rule"]}
        chosen = (new["word_span"]["span_logit"], new["word_span"]["line_logit"])
        assert rules[chosen] == max(rules.values()) and rules[chosen] > rules[chosen[0], None]
        for scored in (res / f"business/{run}.json", res / f"foreign/{run}-words.json", res / f"foreign/{run}.json"):
            s = json.loads(scored.read_text())
            assert (s["span_logit"], s["line_logit"]) == chosen, scored


@pytest.mark.parametrize("which", ["NAMES", "GRAMMAR"])
def test_the_party_names_and_grammar_tables_are_the_committed_runs(which):
    """docs/docjepa-extract.md's party-names and grammar tables quote each run's committed JSON files, each scored
    under the span rule and path threshold its own calibration chose."""
    import path_model_table as pm

    res = ROOT / "benchmarks/results/docjepa"
    text = (ROOT / "docs/docjepa-extract.md").read_text()
    start, end, runs = getattr(pm, f"{which}_START"), getattr(pm, f"{which}_END"), getattr(pm, which)
    table = text.split(start, 1)[1].split(end, 1)[0].strip()
    assert table == pm.balanced_table(res, runs, lines=True)
    for run in runs.values():
        calibration = json.loads((res / f"business/{run}-calibration.json").read_text())
        chosen = (calibration["word_span"]["span_logit"], calibration["word_span"]["line_logit"])
        business = json.loads((res / f"business/{run}.json").read_text())
        assert business["words_threshold"] == calibration["answer_paths"]["words_threshold"]
        for scored in (business, *(json.loads((res / f"foreign/{run}{s}.json").read_text()) for s in ("-words", ""))):
            assert (scored["span_logit"], scored["line_logit"]) == chosen


def test_the_wordings_table_is_the_committed_runs():
    """docs/docjepa-extract.md's wordings table quotes each run's committed JSON files, each scored under the span
    rule and path threshold its own calibration chose, and every business question counts in one wording group."""
    import path_model_table as pm

    res = ROOT / "benchmarks/results/docjepa"
    text = (ROOT / "docs/docjepa-extract.md").read_text()
    assert text.split(pm.WORDINGS_START, 1)[1].split(pm.WORDINGS_END, 1)[0].strip() == pm.wordings_table(res)
    for run in pm.WORDINGS.values():
        calibration = json.loads((res / f"business/{run}-calibration.json").read_text())
        business = json.loads((res / f"business/{run}.json").read_text())
        assert business["words_threshold"] == calibration["answer_paths"]["words_threshold"]
        chosen = (calibration["word_span"]["span_logit"], calibration["word_span"]["line_logit"])
        assert (business["span_logit"], business["line_logit"]) == chosen
        s = business["scores"]
        assert s["held-out wording"]["questions"] + s["trained wording"]["questions"] == s["all"]["questions"]


def test_the_any_order_table_is_the_committed_runs():
    """docs/docjepa-extract.md's any-order table quotes each run's committed JSON files, each scored under its own
    calibration's thresholds, with keys left out of word answers where its heading says so and kept where it does
    not (a result scored before the rule records no setting: keys kept)."""
    import path_model_table as pm

    res = ROOT / "benchmarks/results/docjepa"
    text = (ROOT / "docs/docjepa-extract.md").read_text()
    assert text.split(pm.ORDER_START, 1)[1].split(pm.ORDER_END, 1)[0].strip() == pm.wordings_table(
        res, pm.ORDER, spans=True
    )
    for heading, run in pm.ORDER.items():
        model = run.removesuffix("-keys")
        calibration = json.loads((res / f"business/{model}-calibration.json").read_text())
        chosen = (calibration["word_span"]["span_logit"], calibration["word_span"]["line_logit"])
        for scored in (res / f"business/{run}.json", res / f"foreign/{run}-words.json"):
            result = json.loads(scored.read_text())
            assert (result["span_logit"], result["line_logit"]) == chosen, scored
            assert result.get("drop_keys", False) == ("left out" in heading), scored
            assert model in result["command"] and ("--keep-keys" in result["command"]) == run.endswith("-keys")
