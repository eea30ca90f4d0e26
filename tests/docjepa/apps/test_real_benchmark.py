"""The real-page benchmark end to end on two small real-like PDFs, calibration, and predict's candidate overlay."""

import json
import shutil

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("reportlab")

from PIL import Image

from docjepa.apps import real_benchmark as rb
from docjepa.apps.cli import main
from docjepa.apps.predict import load_page, predict_file
from docjepa.core.errors import UsageError
from docjepa.data.import_folder import import_paths
from docjepa.data.shards import iter_pages
from docjepa.data.touching import LINE_GAP
from docjepa.eval.calibrate import SPAN_RULES, calibrate
from docjepa.inference.calibration import Calibration
from docjepa.inference.predictor import DocumentPredictor
from tests.docjepa.data.test_structure import make_manual


@pytest.fixture
def pdfs(tmp_path):
    root = tmp_path / "pdfs"
    (root / "a").mkdir(parents=True)
    make_manual(root / "a" / "widget.pdf")
    make_manual(root / "gadget.pdf", title="Gadget Handbook", author="Ravi Kumar", date="2021-07-09", version="0.9b")
    return root


@pytest.fixture
def model(tiny_model, tmp_path):
    """A copy of the tiny model (calibration writes beside its weights)."""
    return shutil.copytree(tiny_model, tmp_path / "model")


def test_propose_verify_run_report(pdfs, model, tmp_path, capsys, monkeypatch):
    spec = rb.propose(pdfs, tmp_path / "prop", dpi=72, per_kind=3, packages=["made in the test"])
    assert set(spec["documents"]) == {"a/widget.pdf", "gadget.pdf"}
    kinds = {q["kind"] for q in spec["questions"]}
    assert {"title", "author", "date", "version", "section", "contents", "page-number", "header", "caption"} <= kinds
    assert all(q["verified"] is None for q in spec["questions"])
    assert sum(q["kind"] == "section" for q in spec["questions"]) == 3  # per_kind caps each kind
    assert sorted(p.name for p in (tmp_path / "prop").glob("sheet-*.png"))[0] == "sheet-00.png"
    path = tmp_path / "prop" / "questions.json"
    with pytest.raises(UsageError, match="no verified question"):
        rb.build(rb.load(path), pdfs, tmp_path / "none")
    ids = [q["id"] for q in spec["questions"]]
    bad = [q["id"] for q in spec["questions"] if q["kind"] == "version"]
    main(["benchmark", "real", "verify", str(path), "--good", *[i for i in ids if i not in bad]])
    main(["benchmark", "real", "verify", str(path), "--bad", *bad, "--note", "wrong on purpose"])
    counted = rb.counts(rb.load(path))
    assert counted["rejected"] == len(bad) and counted["unchecked"] == 0 and "version" not in counted["per_kind"]
    with pytest.raises(UsageError, match="unknown question ids"):
        rb.verify(path, ["q9999"], [])
    capsys.readouterr()

    out = tmp_path / "run"
    main(
        [
            "benchmark",
            "real",
            "run",
            str(path),
            "--pdfs",
            str(pdfs),
            "--model",
            f"tiny={model}",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    result = json.loads((out / "real.json").read_text())
    n = len(ids) - len(bad)
    assert result["questions"] == n and result["benchmark"]["verified"] == n
    per_kind = result["models"]["tiny"]["per_type"]
    assert set(per_kind) == set(counted["per_kind"]) == set(result["baseline"]["per_type"])
    assert sum(v["n"] for v in per_kind.values()) == n
    assert len(result["models"]["tiny"]["questions"]) == n
    assert result["models"]["tiny"]["reliability"]["n"] == n
    for name in ("reliability.png", "overlays.png"):
        assert Image.open(out / name).size[0] > 100
    doc = tmp_path / "doc.md"
    doc.write_text(f"# x\n{rb.MARKDOWN_START}\nPLACEHOLDER\n{rb.MARKDOWN_END}\ntail\n")
    readme = tmp_path / "readme.md"
    readme.write_text(f"{rb.SUMMARY_START}\n{rb.SUMMARY_END}\n")
    main(["benchmark", "real", "report", str(out / "real.json"), f"--markdown={doc}", f"--summary={readme}"])
    assert "| tiny |" in readme.read_text() and "of 9 |" in readme.read_text()
    text = doc.read_text()
    assert "| caption |" in text and "hand-verified questions on 2 documents" in text and "PLACEHOLDER" not in text
    assert text.endswith("tail\n")

    # A changed file is reported and its questions left out; the other document still counts.
    make_manual(pdfs / "gadget.pdf", title="Another Gadget")
    built = rb.build(rb.load(path), pdfs, tmp_path / "rebuilt")
    assert any("SHA-256 differs" in p for p in built["problems"]) and 0 < built["questions"] < n
    # Only the pages asked about are read; a page the file does not have is reported, the others still count.
    spec = rb.load(path)
    moved = next(q for q in spec["questions"] if q["verified"] is True and q["doc_id"] == "a/widget.pdf")
    moved["page"] = 99
    from docjepa.data import importer

    rendered, encode = [], importer._encode
    monkeypatch.setattr(importer, "_encode", lambda image: rendered.append(1) or encode(image))
    built = rb.build(spec, pdfs, tmp_path / "moved")
    assert any("a/widget.pdf: page 100 out of range" in p for p in built["problems"])
    kept = list(iter_pages(tmp_path / "moved"))
    assert built["questions"] < n and len(rendered) == len(kept) == len({(p.doc_id, p.page) for p in kept})


def test_import_exclude_keeps_benchmark_documents_out(pdfs, tmp_path):
    rb.propose(pdfs, tmp_path / "prop", dpi=72, per_kind=1)
    summary = import_paths(
        [pdfs],
        tmp_path / "train",
        dpi=72,
        exclude=rb.benchmark_digests(tmp_path / "prop" / "questions.json"),
        progress=False,
    )
    assert summary.files == 0 and summary.excluded == 2
    digests = tmp_path / "digests.txt"
    digests.write_text(next(iter(rb.load(tmp_path / "prop" / "questions.json")["documents"].values()))["sha256"] + "\n")
    main(["import", str(pdfs), "--out", str(tmp_path / "train2"), "--dpi", "72", "--structure", "--max-pages", "2",
          "--exclude", str(digests), "--no-progress"])  # fmt: skip
    pages = list(iter_pages(tmp_path / "train2"))
    assert len({p.doc_id for p in pages}) == 1 and len(pages) == 2 and all(p.questions for p in pages)


def test_calibrate_and_predict_show_confidence(pdfs, model, tmp_path):
    data = tmp_path / "labelled"
    import_paths([pdfs], data, dpi=72, structure=True, progress=False)
    result = calibrate(model, [data], threshold=0.5, progress=False)
    assert (model / "calibration.json").is_file() and result["questions"] > 10
    cal = Calibration.load(model)
    assert np.all(np.diff(cal.values) >= -1e-12)
    # The word span's threshold is the grid's best on these pages, and is stored with its own IoU map.
    paths = result["answer_paths"]
    assert cal.words_threshold == paths["words_threshold"]
    assert paths["mIoU_by_threshold"][cal.words_threshold] == max(paths["mIoU_by_threshold"].values())
    assert cal.words_knots and np.all(np.diff(cal.words_values) >= -1e-12)
    # The span rule is chosen first: the thresholds the grid's best for the word spans joining the nearest lines,
    # further lines or none with them; predictions use it.
    rules = result["word_span"]["words_mIoU_by_rule"]
    spans = {(r["span_logit"], r["line_logit"], r["line_gap"], r["far_logit"]): r["mIoU"] for r in rules}
    rule = (cal.span_logit, cal.line_logit, cal.line_gap or LINE_GAP, cal.far_logit)
    near = {r[:2]: m for r, m in spans.items() if r[3] is None}
    assert set(spans) == set(SPAN_RULES) and near[rule[:2]] == max(near.values())
    assert paths["words_mIoU"] == pytest.approx(spans[rule])
    predictor = DocumentPredictor.from_pretrained(model)
    assert predictor.policy.calibration is not None and predictor.policy.span_threshold == cal.span_logit
    assert predictor.policy.line_threshold == cal.line_logit and predictor.policy.far_threshold == cal.far_logit
    assert predictor.policy.line_spacing == rule[2]

    res = predict_file(model, "What is the title?", tmp_path / "pred" / "t", load_page(pdf=pdfs / "gadget.pdf", dpi=72))
    assert [c["rank"] for c in res["candidates"]] == [1, 2, 3]
    assert res["candidates"][0]["index"] == res["best"]
    assert list(res)[:3] == ["answer", "confidence", "known"]  # the answer first: its text and how far to trust it
    assert res["answer"] == " ".join(res["words"])
    assert res["expected_iou"] == pytest.approx(float(cal(res["scores"][res["best"]])), abs=1e-6)
    expected = cal.words(res["words_confidence"]) if res["path"] == "words" else res["expected_iou"]
    assert res["confidence"] == pytest.approx(expected, abs=1e-4)
    assert res["known"] == (res["answered"] and expected >= 0.5)
    # auto: the span where the calibration's path model (fitted on these pages) estimates it at least its threshold
    predictor.set_page(load_page(pdf=pdfs / "gadget.pdf", dpi=72))
    reading = predictor.read(predictor.decode("What is the title?"))
    assert (cal.path_model is None) == (reading.path_score == reading.words_confidence)
    spanned = reading.path_score >= cal.words_threshold and reading.word_answer[1]
    assert res["path"] == ("words" if spanned else "mask")
    overlay = Image.open(res["files"]["overlay"])
    assert overlay.height > res["height"]  # the band with the question and the candidates' scores

    # A calibration that expects little makes the model say it does not know; one that expects much, that it does.
    predictor.policy.calibration = Calibration([0.0, 1.0], [0.0, 0.1])

    predictor.set_page(load_page(pdf=pdfs / "gadget.pdf", dpi=72))
    assert predictor.predict("What is the title?").known is False
    predictor.policy.calibration = Calibration([0.0, 1.0], [0.9, 1.0])
    p = predictor.predict("What is the title?")
    assert p.known is bool(p.answer.any())
    predictor.policy.calibration = None
    assert predictor.predict("What is the title?").known is None


def test_the_packaged_benchmark_is_found_by_name_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = rb.load("real")
    verified = [q for q in spec["questions"] if q.get("verified") is True]
    assert len(verified) == 162 and len({q["doc_id"] for q in verified}) == 60  # as docs/docjepa-real.md states
    assert rb.load("benchmarks/real/questions.json") == spec  # the path older commands give
    assert rb.benchmark_digests("real") == {d["sha256"] for d in spec["documents"].values()}
    with pytest.raises(UsageError, match="no questions file"):
        rb.load("elsewhere.json")
