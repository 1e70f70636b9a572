"""Why a space has its status, for programs: one StatusReasonCode per reason, beside the
reason words people read.

The space, its events and its last probe use one wording and one code per reason. A
probe failure's words come from `providers.errors`, whose reasons start with fixed
words (`DNS`, `connection refused`, `TLS`, `401 unauthorized`, ...); `failure_code`
is the one mapping from those words to codes. It runs once, when a probe result is
written; the code is stored beside the words, since a failure to mint a credential
cannot be told from the words alone.
"""

from __future__ import annotations

from enum import StrEnum


class StatusReasonCode(StrEnum):
    REGISTERED = "REGISTERED"
    PROBE_OK = "PROBE_OK"
    DNS = "DNS"
    CONNECTION_REFUSED = "CONNECTION_REFUSED"
    TLS = "TLS"
    UNAUTHORIZED = "UNAUTHORIZED"
    FORBIDDEN = "FORBIDDEN"
    TIMEOUT = "TIMEOUT"
    HTTP_ERROR = "HTTP_ERROR"
    BAD_RESPONSE = "BAD_RESPONSE"
    ACCESS_REVOKED = "ACCESS_REVOKED"
    CREDENTIALS_UNAVAILABLE = "CREDENTIALS_UNAVAILABLE"
    OPERATOR_HOLD = "OPERATOR_HOLD"
    HOLD_LIFTED = "HOLD_LIFTED"
    PROBE_STALE = "PROBE_STALE"
    DEREGISTERED = "DEREGISTERED"


# First words of a failure's reason, most specific first ("HTTP 200" before "HTTP ").
FAILURE_WORDS = (
    ("cluster access revoked", StatusReasonCode.ACCESS_REVOKED),
    ("DNS", StatusReasonCode.DNS),
    ("connection refused", StatusReasonCode.CONNECTION_REFUSED),
    ("connection failed", StatusReasonCode.CONNECTION_REFUSED),
    ("TLS", StatusReasonCode.TLS),
    ("401 unauthorized", StatusReasonCode.UNAUTHORIZED),
    ("403 forbidden", StatusReasonCode.FORBIDDEN),
    ("timeout", StatusReasonCode.TIMEOUT),
    ("HTTP 200", StatusReasonCode.BAD_RESPONSE),
    ("unexpected answer", StatusReasonCode.BAD_RESPONSE),
    ("HTTP ", StatusReasonCode.HTTP_ERROR),
)


def failure_code(words: str, *, minting: bool = False) -> StatusReasonCode:
    """The code of a probe failure. `minting`: the failure came from getting a credential
    (a cloud token, a revoked grant) rather than from calling the cluster."""
    for start, code in FAILURE_WORDS:
        if words.startswith(start):
            if minting and code not in (StatusReasonCode.ACCESS_REVOKED, StatusReasonCode.TIMEOUT):
                return StatusReasonCode.CREDENTIALS_UNAVAILABLE
            return code
    if minting:
        return StatusReasonCode.CREDENTIALS_UNAVAILABLE
    # Anything else kept the probe from reaching the API server (a denied address, a
    # connection that could not be made).
    return StatusReasonCode.CONNECTION_REFUSED
