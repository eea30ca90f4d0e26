"""``python -m docjepa.apps.cli``: the ``docjepa`` command."""

from . import main

main()
