"""docjepa average: the mean of a run's checkpoints, as a model folder every command loads."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from docjepa.core.errors import UsageError
from docjepa.train.average import RECORD, average_checkpoints, choose, run_checkpoints


def _fake_run(root, steps, gen, tweak=None):
    """A run folder whose checkpoints hold random float32 and bf16 tensors, one integer tensor, a config, a
    tokenizer file and a calibration."""
    for step in steps:
        model = root / "checkpoints" / f"step-{step:07d}" / "model"
        (model / "question_tokenizer").mkdir(parents=True)
        tensors = {
            "w": torch.randn(4, 3, generator=gen),
            "h": torch.randn(5, generator=gen).to(torch.bfloat16),
            "index": torch.arange(6),
        }
        if tweak is not None:
            tweak(step, tensors)
        save_file(tensors, str(model / "model.safetensors"), metadata={"format": "pt"})
        (model / "config.json").write_text(json.dumps({"architectures": ["DocJepaForSegmentation"], "size": 3}))
        (model / "tokenizer.json").write_text(f"{step}")
        (model / "question_tokenizer" / "vocab.txt").write_text("a\nb\n")
        (model / "calibration.json").write_text("{}")
        torch.save({"step": step}, model.parent / "state.pt")
    return root


def test_the_mean_of_the_second_half_is_taken_in_float64_and_stored_in_each_dtype(tmp_path, gen):
    run = _fake_run(tmp_path / "run", [100, 200, 300, 400], gen)
    record = average_checkpoints(run, tmp_path / "avg")
    assert record["steps"] == [200, 300, 400]
    folders = [run / "checkpoints" / f"step-{s:07d}" / "model" for s in (200, 300, 400)]
    sources = [load_file(str(folder / "model.safetensors")) for folder in folders]
    got = load_file(str(tmp_path / "avg" / "model.safetensors"))
    for name in ("w", "h"):
        want = sum(t[name].double() for t in sources) / 3
        assert got[name].dtype == sources[0][name].dtype
        assert torch.equal(got[name], want.to(got[name].dtype))
    assert not torch.equal(got["w"], sources[-1]["w"])
    assert torch.equal(got["index"], torch.arange(6))
    out = tmp_path / "avg"
    assert not (out / "calibration.json").exists(), "the calibration was fitted to other weights"
    assert (out / "tokenizer.json").read_text() == "400"
    assert (out / "question_tokenizer" / "vocab.txt").is_file()
    assert json.loads((out / RECORD).read_text())["steps"] == [200, 300, 400]


def test_the_checkpoints_are_chosen_by_count_or_first_step(tmp_path, gen):
    ckpts = run_checkpoints(_fake_run(tmp_path / "run", [250, 500, 750, 1000], gen))
    assert [s for s, _ in choose(ckpts)] == [500, 750, 1000]
    assert [s for s, _ in choose(ckpts, last=2)] == [750, 1000]
    assert [s for s, _ in choose(ckpts, from_step=250)] == [250, 500, 750, 1000]
    with pytest.raises(UsageError, match="steps 250, 500, 750, 1000"):
        choose(ckpts, from_step=1000)
    with pytest.raises(UsageError, match="not both"):
        choose(ckpts, last=2, from_step=500)
    with pytest.raises(UsageError, match="the last 5"):
        choose(ckpts, last=5)


def test_an_incomplete_checkpoint_is_not_averaged(tmp_path, gen):
    run = _fake_run(tmp_path / "run", [100, 200, 300], gen)
    (run / "checkpoints" / "step-0000300" / "state.pt").unlink()  # killed while writing
    assert [s for s, _ in run_checkpoints(run)] == [100, 200]
    with pytest.raises(UsageError, match="not a training run"):
        run_checkpoints(tmp_path / "avg")


def test_checkpoints_that_do_not_match_are_refused(tmp_path, gen):
    def other_index(step, tensors):
        tensors["index"] = tensors["index"] + (step == 200)

    run = _fake_run(tmp_path / "a", [100, 200], gen, other_index)
    with pytest.raises(UsageError, match="integer tensor"):
        average_checkpoints(run, tmp_path / "avg", last=2)

    def other_shape(step, tensors):
        tensors["w"] = tensors["w"][: 2 + step // 100]

    with pytest.raises(UsageError, match="is \\("):
        average_checkpoints(_fake_run(tmp_path / "b", [100, 200], gen, other_shape), tmp_path / "avg", last=2)
    assert not (tmp_path / "avg").exists(), "nothing is left behind by a refused average"
    run = _fake_run(tmp_path / "c", [100, 200], gen)
    (tmp_path / "avg").mkdir()
    with pytest.raises(UsageError, match="already exists"):
        average_checkpoints(run, tmp_path / "avg", last=2)


def test_the_average_of_a_fine_tuned_model_loads_and_answers(docs, tmp_path):
    from transformers import PreTrainedTokenizerFast

    from docjepa.apps.cli import main
    from docjepa.modeling import build_config
    from docjepa.modeling.segmentation import DocJepaForSegmentation

    tok = PreTrainedTokenizerFast.from_pretrained(str(docs / "tok"))
    models = []
    for step in (1, 2):
        torch.manual_seed(step)
        model = DocJepaForSegmentation(build_config("tiny", len(tok)))
        folder = tmp_path / "run" / "checkpoints" / f"step-{step:07d}"
        model.save_pretrained(folder / "model")
        tok.save_pretrained(folder / "model")
        torch.save({"step": step}, folder / "state.pt")
        models.append(model.state_dict())
    main(["average", str(tmp_path / "run"), "--out", str(tmp_path / "avg"), "--last", "2"])
    averaged = DocJepaForSegmentation.from_pretrained(tmp_path / "avg").state_dict()
    floats = [name for name, t in averaged.items() if t.is_floating_point()]
    assert floats
    for name in floats:
        want = (models[0][name].double() + models[1][name].double()) / 2
        torch.testing.assert_close(averaged[name].double(), want, rtol=0, atol=1e-6)
