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
