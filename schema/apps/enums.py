"""The apps' enums, core's own made the contract's (schema.common.enums.contract_enum)."""

from __future__ import annotations

from core.apps.history import EventKind as AppEventKind
from core.apps.history import RevisionState as AppRevisionState
from core.apps.status import AppStatus as AppStatus
from schema.common.enums import contract_enum

contract_enum(
    AppStatus,
    "An app's state as Flux reports it, in one vocabulary for Git and Helm apps.",
    {
        "READY": "Flux applied the source's current revision and what it runs is ready.",
        "PROGRESSING": "Flux is fetching, applying or waiting for workloads (or the app "
        "waits for its first delivery or its CloudSpace).",
        "FAILED": "Flux (or the source) reports a failure; statusReason and statusMessage "
        "have its words.",
        "SUSPENDED": "suspendApp: Flux applies no change until resumeApp.",
        "UNKNOWN": "The target cannot be read now (statusMessage says why), or the app's "
        "Flux objects are missing from it.",
        "DELETING": "deleteApp: its Flux objects are being removed; statusMessage names "
        "what blocks it.",
    },
)
contract_enum(
    AppRevisionState,
    "Where a revision stands: QUEUED, APPLYING, APPLIED, then READY or FAILED.",
    {
        "QUEUED": "Waiting to be delivered (tries and reason say why it waits).",
        "APPLYING": "Its Flux objects are being written to the target.",
        "APPLIED": "Written; Flux has not answered for it yet.",
        "READY": "Flux applied it and what it runs is ready (fluxRevision says what).",
        "FAILED": "Flux, or the target, refused it; reason has the words.",
        "DEAD_LETTERED": "Not delivered after 3 tries against an unavailable target, or its "
        "target is gone; requeueAppRevision puts it back.",
        "SUPERSEDED": "A later revision was applied before Flux answered for this one.",
    },
)
contract_enum(
    AppEventKind,
    "What an AppEvent is about.",
    {
        "STATUS": "The app's status, reason, message or workloads changed.",
        "REVISION": "One of its revisions changed state (or spent a try).",
        "DELETED": "The app is gone; the last event.",
    },
)

__all__ = ["AppEventKind", "AppRevisionState", "AppStatus"]
