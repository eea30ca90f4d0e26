"""How the annotation service runs: :class:`ServerConfig` (``docjepa engine serve`` fills it from its options)."""

from __future__ import annotations

from dataclasses import dataclass, field

from . import uploads
from .store import LEASE_SECONDS, Throttle


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
    model_queue: int = 32
    """Requests that may wait for the model; one more is answered 503 with ``Retry-After`` at once."""
    model_batch: int = 8
    """Waiting requests the model answers in one turn (questions about one page decoded together)."""
    follow_seconds: float = 5.0
    """How often the server looks for a model promoted by a retraining round."""
    rounds_dir: str = "runs/engine/rounds"
    """Where retraining rounds started from the page write their runs."""
    sign_in_free_attempts: int = 5
    """Failed sign-ins of one account before attempts on it have to wait."""
    sign_in_free_per_address: int = 20
    """Failed sign-ins from one client address before attempts from it have to wait."""
    sign_in_base_delay: float = 1.0
    """Seconds the first throttled attempt waits; each further failure doubles it."""
    sign_in_max_delay: float = 900.0
    """The longest wait between sign-in attempts."""
    allowed_origins: list[str] = field(default_factory=list)
    """Origins (``https://host``) whose pages may change state besides the served one (behind a proxy that
    rewrites the host)."""
    api_docs: bool = False
    """Serve the OpenAPI description at ``/api/openapi.json`` (to signed-in users; off by default)."""

    def throttle(self) -> Throttle:
        return Throttle(
            self.sign_in_free_attempts, self.sign_in_free_per_address, self.sign_in_base_delay, self.sign_in_max_delay
        )
