"""User mistakes become one line and exit status 2; bugs keep their traceback."""

import pytest
import torch

from docjepa.core.errors import UsageError, is_expected, run_command
from tests.helpers import cli_error


def test_user_mistakes_are_expected_and_bugs_are_not(capsys):
    def bad_setting():
        raise UsageError("run.steps must be at least 1, got 0")

    with pytest.raises(SystemExit) as exc:
        run_command("docjepa x", bad_setting)
    assert exc.value.code == 2 and capsys.readouterr().err == "docjepa x: run.steps must be at least 1, got 0\n"
    assert is_expected(FileNotFoundError(2, "No such file or directory", "/nowhere"))

    def bug():
        return {}["missing"]

    with pytest.raises(KeyError):  # a real bug shows its traceback
        run_command("docjepa x", bug)

    def library_value_error():
        torch.zeros(2).view(3)  # raised deep inside torch: a bug of ours, not the user's

    with pytest.raises(RuntimeError):
        run_command("docjepa x", library_value_error)
    with pytest.raises(TypeError):
        run_command("docjepa x", lambda: len(5))


def test_a_value_error_is_the_users_when_this_projects_code_raised_it():
    """Decided by the module of the raising frame, not by where the package is installed."""
    import json

    import rsngd

    with pytest.raises(ValueError) as ours:
        rsngd.RSNGD([torch.nn.Parameter(torch.randn(3, 3))], history=0)
    assert is_expected(ours.value)
    with pytest.raises(ValueError) as theirs:
        json.loads("{")  # a ValueError raised inside the standard library
    assert not is_expected(theirs.value)
    assert not is_expected(ValueError("never raised"))


def test_config_mistakes_are_one_line(tmp_path, capsys):
    broken = tmp_path / "broken.yaml"
    broken.write_text("run:\n  steps: [1, 2\n")
    out = ["--out", str(tmp_path / "run"), "--no-progress"]
    err = cli_error(["pretrain", "--config", str(broken), *out], capsys)
    assert "broken.yaml (line 3, column 1): not valid YAML" in err
    assert "run.steps must be at least 1, got 0" in cli_error(["pretrain", *out, "--run.steps=0"], capsys)
    assert "optim.lr: expected float" in cli_error(["pretrain", *out, "--optim.lr=fast"], capsys)
    if not torch.cuda.is_available():
        err = cli_error(["pretrain", *out, "--run.device=cuda"], capsys)
        assert "run.device=cuda but no CUDA device is available" in err
