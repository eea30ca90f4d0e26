"""``docjepa demo``'s size options reach the demo's configuration (the recipe of a longer-trained model)."""

import pytest

from docjepa.apps import demo as demo_module
from docjepa.apps.cli import main


def test_size_options_set_the_demo_config(monkeypatch, tmp_path):
    seen = {}
    monkeypatch.setattr(demo_module, "run_demo", lambda cfg, out, progress: seen.update(cfg=cfg, out=out))
    sizes = ["--train-pages", "1200", "--pretrain-steps", "400", "--finetune-steps", "2000"]
    main(["demo", "--out", str(tmp_path / "run"), *sizes, "--threads", "1", "--no-progress"])
    cfg = seen["cfg"]
    assert (cfg.train_pages, cfg.pretrain_steps, cfg.finetune_steps, cfg.threads) == (1200, 400, 2000, 1)
    main(["demo", "--out", str(tmp_path / "run"), "--no-progress"])  # unset options keep the defaults
    default = demo_module.DemoConfig()
    assert (seen["cfg"].train_pages, seen["cfg"].finetune_steps) == (default.train_pages, default.finetune_steps)


def test_size_options_refuse_zero(capsys, tmp_path):
    with pytest.raises(SystemExit):
        main(["demo", "--out", str(tmp_path), "--finetune-steps", "0"])
    assert "--finetune-steps" in capsys.readouterr().err
