"""What every domain's inputs share: the mark of a secret input field."""

from __future__ import annotations

# Put on an input field (`strawberry.field(metadata=SECRET)`) whose value must never be
# recorded: credentials, keys, tokens, certificates (schema.access.audit redacts it).
SECRET = {"secret": True}
