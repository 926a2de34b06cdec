"""Names, enums and constants of the agentprimitives platform, exactly as the platform spells them.

Source: ../shared/docs/domain.md and the SubagentRequest seed document.
"""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum

GROUP = "agentprimitives.authzed.com"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

DECISION_WINDOW = timedelta(minutes=20)
LINEAGE_MAX_HOPS = 16


class Phase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    AWAITING_PARENT = "AwaitingParent"
    AWAITING_DISCLOSURE = "AwaitingDisclosure"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    DENIED = "Denied"


TERMINAL_PHASES = frozenset({Phase.SUCCEEDED, Phase.FAILED, Phase.DENIED})


class Mode(StrEnum):
    SINGLE_TURN = "single_turn"
    TASK = "task"
    CHAT = "chat"
    ATTENDED = "attended"


class RefusalReason(StrEnum):
    NOT_DELEGABLE = "NotDelegable"
    WOULD_DISCLOSE = "WouldDisclose"
    GRADING_UNAVAILABLE = "GradingUnavailable"


class ChannelKind(StrEnum):
    FAKE = "fake"
    SLACK = "slack"
    BENTO = "bento"
    LOCAL = "local"
    BROWSER = "browser"
    GITHUB = "github"
    AGENT = "agent"


class ChannelRole(StrEnum):
    INPUT = "input"
    OUTPUT = "output"
    BOTH = "both"
    MONITORING = "monitoring"


# Whether a person reads a channel is a property of its kind, not a field of the Channel.
_HUMAN_KINDS = frozenset(
    {ChannelKind.SLACK, ChannelKind.BROWSER, ChannelKind.LOCAL, ChannelKind.FAKE}
)
_MACHINE_KINDS = frozenset({ChannelKind.AGENT, ChannelKind.BENTO, ChannelKind.GITHUB})


class UnknownChannelKind(ValueError):
    """A channel kind the platform does not define. Never read as "no human reads it"."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"unknown channel kind {kind!r}")
        self.kind = kind


def delivers_to_human(kind: str) -> bool:
    """True when a person reads channels of this kind; raises UnknownChannelKind otherwise."""
    if kind in _HUMAN_KINDS:
        return True
    if kind in _MACHINE_KINDS:
        return False
    raise UnknownChannelKind(kind)


# The two status fields Disclosure Desk writes; every other status field belongs to the operator.
APPROVED_SLOTS = "approvedDataSlots"
DENIED_SLOTS = "deniedDataSlots"
DECIDED_SLOT_LISTS = (APPROVED_SLOTS, DENIED_SLOTS)
