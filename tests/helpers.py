"""Small builders shared by several test files."""

from pathlib import Path

import torch


def tiny_bert_folder(tok, path: Path, dropout: float = 0.1, layers: int = 1) -> Path:
    """A small random BERT saved with ``tok``: stands in for a user's pre-trained sentence encoder."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(3)
    cfg = BertConfig(
        vocab_size=len(tok),
        hidden_size=48,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=96,
        max_position_embeddings=64,
        hidden_dropout_prob=dropout,
    )
    BertModel(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def seg_batch(docs, tok, pairs, page_reader: bool = False):
    """A fine-tuning batch of (page, question) ``pairs`` of the ``docs`` fixture's pages (256 px, 128-px masks)."""
    from docjepa.data.collate import CollateConfig
    from docjepa.data.segment import SegmentCollator
    from docjepa.data.shards import DocumentDataset

    ds = DocumentDataset(docs / "d")
    cfg = CollateConfig(image_size=256, mask_size=128, max_tokens=128)
    collate = SegmentCollator(tok, tok, cfg, seed=0, page_reader=page_reader)
    return collate([(i, (ds[p], q)) for i, (p, q) in enumerate(pairs)])


def cli_error(argv: list[str], capsys) -> str:
    """Run ``docjepa ARGV``, expect the one-line error of a user mistake (exit status 2, no traceback); its text."""
    import pytest

    from docjepa.apps.cli import main

    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"docjepa {argv[0]}: ") and "Traceback" not in err
    return err


def model_pair(tok, folder: Path, added: dict, module: str, **settings):
    """The same tiny segmentation model twice, its question tower loaded from ``folder`` and frozen, with config
    ``settings``: as it is, then with ``added`` too, all weights but the new ``module``'s copied from the first."""
    from transformers import BertConfig

    from docjepa.modeling import build_config
    from docjepa.modeling.prompt_encoder import tower_spec
    from docjepa.modeling.segmentation import DocJepaForSegmentation

    built = []
    for extra in ({}, added):
        torch.manual_seed(0)
        config = build_config("tiny", len(tok))
        config.question_tower = BertConfig.from_pretrained(folder).to_dict()
        config.freeze_question_tower = True
        for key, value in {**settings, **extra}.items():
            setattr(config, key, value)
        seg = DocJepaForSegmentation(config)
        seg.question_encoder.load_pretrained_tower(folder)
        seg.config.question_tower = tower_spec(seg.question_encoder.clip)
        built.append(seg)
    plain, more = built
    missing, unexpected = more.load_state_dict(plain.state_dict(), strict=False)
    assert missing and all(k.startswith(f"{module}.") for k in missing) and not unexpected
    return plain, more
