"""How the annotation service runs: :class:`ServerConfig` (``docjepa engine serve`` fills it from its options)."""

from __future__ import annotations

from dataclasses import dataclass

from . import uploads
from .store import LEASE_SECONDS


@dataclass
class ServerConfig:
    """How the service runs."""

    db: str
    """Database URL (``sqlite:///FILE`` or ``postgresql+psycopg://USER@HOST/DB``)."""
    checkpoint: str | None = None
    """Fine-tuned model (run folder, checkpoint or model folder) that proposes masks; None: no proposals."""
    media: str = "runs/engine/media"
    """Folder of uploaded files (stored under generated names)."""
    lease_seconds: float = LEASE_SECONDS
    """How long a task stays with the annotator it was handed to."""
    max_upload_bytes: int = uploads.MAX_UPLOAD_BYTES
    """Largest upload."""
    secure_cookie: bool = False
    """Mark the session cookie Secure (set when the service is behind HTTPS)."""
    device: str | None = None
    """Model device (default: CUDA when available)."""
    model_threads: int | None = None
    """PyTorch threads of the model worker (default: all cores but one)."""
    follow_seconds: float = 5.0
    """How often the server looks for a model promoted by a retraining round."""
    rounds_dir: str = "runs/engine/rounds"
    """Where retraining rounds started from the page write their runs."""
