"""What the service does to its database, one transaction per operation, by resource: :mod:`.accounts` (users,
roles, sign-in), :mod:`.pages` (pages, uploads), :mod:`.tasks` (tasks and leases), :mod:`.annotations` (versioned
saves, automatic labels), :mod:`.review`, :mod:`.audit` and :mod:`.settings` (the serving model, counts).

Every function takes a :class:`~docjepa.apps.engine.db.Database` and opens its own transaction, so a killed
server loses at most the operation in flight. Conflicts raise :class:`Conflict` carrying the current value.
Callers use the names below (``store.claim_next(db, …)``).
"""

from .accounts import (
    SESSION_SECONDS,
    add_user,
    change_own_password,
    list_users,
    login,
    logout,
    rank,
    session_user,
    set_active,
    set_password,
    set_role,
    user_id,
    user_json,
)
from .annotations import (
    AUTOLABEL_USER,
    MAX_SECONDS,
    Answer,
    annotation_json,
    check_answer,
    create_annotation,
    create_machine_annotation,
    get_annotation,
    machine_user,
    my_annotations,
    update_annotation,
)
from .audit import audit_log
from .errors import Conflict, Forbidden, Invalid, NotFound
from .pages import add_pages, load_page, page_image, page_info, page_json, page_record, record_upload
from .proposals import record_proposal
from .review import next_for_review, review_annotation
from .settings import counts, serving_model, serving_setting, set_serving_model
from .tasks import LEASE_SECONDS, add_task, claim_next, release, release_all, renew, set_priority, task_for, task_json
from .throttle import Throttle, Throttled

__all__ = [
    "AUTOLABEL_USER",
    "LEASE_SECONDS",
    "MAX_SECONDS",
    "SESSION_SECONDS",
    "Answer",
    "Conflict",
    "Forbidden",
    "Invalid",
    "NotFound",
    "Throttle",
    "Throttled",
    "add_pages",
    "add_task",
    "add_user",
    "annotation_json",
    "audit_log",
    "change_own_password",
    "check_answer",
    "claim_next",
    "counts",
    "create_annotation",
    "create_machine_annotation",
    "get_annotation",
    "list_users",
    "load_page",
    "login",
    "logout",
    "machine_user",
    "my_annotations",
    "next_for_review",
    "page_image",
    "page_info",
    "page_json",
    "page_record",
    "rank",
    "record_proposal",
    "record_upload",
    "release",
    "release_all",
    "renew",
    "review_annotation",
    "serving_model",
    "serving_setting",
    "session_user",
    "set_active",
    "set_password",
    "set_priority",
    "set_role",
    "set_serving_model",
    "task_for",
    "task_json",
    "update_annotation",
    "user_id",
    "user_json",
]
