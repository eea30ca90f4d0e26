"""Names a user can give where a model folder is asked for, shared by the command line and the engine's commands
without importing either (nor torch)."""

from __future__ import annotations

SHIPPED = "shipped"
"""What a model argument says for the model shipped in the package (a folder of that name: ``./shipped``)."""
