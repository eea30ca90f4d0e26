"""Fixtures shared by the apps' tests."""

import pytest


@pytest.fixture(scope="session")
def tiny_model(docs, tmp_path_factory):
    """A randomly initialised tiny segmentation model saved with its tokenizer (a model folder)."""
    import torch
    from transformers import PreTrainedTokenizerFast

    from docjepa.modeling import build_config
    from docjepa.modeling.segmentation import DocJepaForSegmentation

    tok = PreTrainedTokenizerFast.from_pretrained(str(docs / "tok"))
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("tiny-model")
    DocJepaForSegmentation(build_config("tiny", len(tok))).save_pretrained(out)
    tok.save_pretrained(out)
    return out
