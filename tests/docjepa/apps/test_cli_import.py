"""The command line answers ``--help`` and usage errors without importing torch or transformers."""

import json
import subprocess
import sys


def test_the_parser_imports_neither_torch_nor_transformers():
    code = (
        "import contextlib, io, json, sys\n"
        "from docjepa.apps.cli import main\n"
        "for argv in (['--help'], ['predict', '--help'], ['finetune', '--help'], ['import', '--help']):\n"
        "    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "        main(argv)\n"
        "print(json.dumps(sorted(m for m in ('torch', 'transformers') if m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
