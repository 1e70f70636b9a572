"""What a model may see of a finding: its names replaced by placeholders before anything
is sent, and put back in the answer (k8sgpt's anonymize, applied to every name a finding
mentions, not only the object's).

A finding lists every name it mentions (namespace, object, pods, containers, images,
Services, the app): each becomes `<namespace-1>`, `<object-2>`, `<image-1>`, … wherever
it stands on its own (not inside a longer word), longest first, so `web-7d9f` is
masked whole before `web`. Evidence an application wrote (a termination message, a
probe's answer) is never sent at all; secrets and environment values are never read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# A name stands on its own when no letter, digit, '-' or '_' touches it.
EDGE = r"[A-Za-z0-9_-]"
PLACEHOLDER = re.compile(r"<(namespace|object|image|app|name)-(\d+)>")


class Masks:
    def __init__(
        self,
        *,
        namespaces: Iterable[str] = (),
        objects: Iterable[str] = (),
        images: Iterable[str] = (),
        apps: Iterable[str] = (),
        names: Iterable[str] = (),
    ) -> None:
        self._placeholder: dict[str, str] = {}
        counters: dict[str, int] = {}
        for kind, values in (
            ("image", images),
            ("app", apps),
            ("namespace", namespaces),
            ("object", objects),
            ("name", names),
        ):
            for value in sorted({v for v in values if v}):
                if value in self._placeholder:
                    continue
                counters[kind] = counters.get(kind, 0) + 1
                self._placeholder[value] = f"<{kind}-{counters[kind]}>"
        self._real = {placeholder: value for value, placeholder in self._placeholder.items()}
        ordered = sorted(self._placeholder, key=len, reverse=True)
        self._pattern = (
            re.compile(
                f"(?<!{EDGE})(?:" + "|".join(re.escape(value) for value in ordered) + f")(?!{EDGE})"
            )
            if ordered
            else None
        )

    def mask(self, text: str) -> str:
        if self._pattern is None:
            return text
        return self._pattern.sub(lambda found: self._placeholder[found.group(0)], text)

    def unmask(self, text: str) -> str:
        return PLACEHOLDER.sub(lambda found: self._real.get(found.group(0), found.group(0)), text)

    @property
    def hidden(self) -> frozenset[str]:
        return frozenset(self._placeholder)
