import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Triton kernels (rsngd.kernels) run in Triton's interpreter on CPU tensors; it must be chosen before torch imports
# Triton.
os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch

torch.set_num_threads(min(2, torch.get_num_threads()))


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(1234)


@pytest.fixture(scope="session")
def docs(tmp_path_factory):
    """24 synthetic pages (512 px) in ``d/`` and a 600-token WordPiece tokenizer in ``tok/``."""
    pytest.importorskip("faker")
    pytest.importorskip("transformers")
    from docjepa.apps.cli import main
    from docjepa.data.synth.generate import generate

    root = tmp_path_factory.mktemp("docs")
    generate(24, root / "d", seed=11, size=512, workers=1, progress=False)
    main(["tokenizer", "train", str(root / "d"), "--out", str(root / "tok"), "--vocab-size", "600"])
    return root


@pytest.fixture
def tok(docs):
    """The ``docs`` fixture's tokenizer."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(str(docs / "tok"))
