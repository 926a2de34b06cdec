"""Routing a human-directed prompt up the session lineage (domain.md section 5).

A child of mode task/chat talks to its parent over an ``agent`` channel that nobody reads, so a
prompt meant for a person climbs the lineage to the nearest session whose outbound binding a
person watches. The walk never falls back to an agent channel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from delegations.platform import LINEAGE_MAX_HOPS, UnknownChannelKind, delivers_to_human


@dataclass(frozen=True, order=True)
class SessionRef:
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    def as_chain_entry(self) -> dict[str, str]:
        return {"ns": self.namespace, "name": self.name}


@dataclass(frozen=True)
class SessionView:
    """What the walk needs to know of one AgentSession."""

    ref: SessionRef
    parent: SessionRef | None
    outbound: dict[str, Any] | None  # the ChannelBinding, or None


class SessionReader(Protocol):
    def read_session(self, ref: SessionRef) -> SessionView | None:
        """The session, or None when it does not exist or cannot be read."""


class RoutingError(Exception):
    """The walk could not be completed; the prompt must not be delivered anywhere."""

    reason = "routing_error"


class ParentUnreadable(RoutingError):
    reason = "parent_unreadable"


class LineageCycle(RoutingError):
    reason = "lineage_cycle"


class UnknownKind(RoutingError):
    reason = "unknown_channel_kind"


@dataclass(frozen=True)
class Route:
    """Where a prompt goes. ``binding`` is None when no human-readable channel exists."""

    chain: tuple[SessionRef, ...]
    binding: dict[str, Any] | None
    owner: SessionRef | None

    @property
    def deliverable(self) -> bool:
        return self.binding is not None

    @property
    def asking_chain(self) -> list[dict[str, str]]:
        """``askingChain`` as the card carries it: only when the walk climbed at least once."""
        if len(self.chain) <= 1:
            return []
        return [ref.as_chain_entry() for ref in self.chain]


def route_prompt(asking: SessionRef, reader: SessionReader) -> Route:
    """Walk from ``asking`` to the nearest session whose outbound binding a person reads.

    Returns a Route whose ``binding`` is None when no session on the way has one (undeliverable).
    Raises ParentUnreadable when the asking session or a parent cannot be read (never treated as
    a root), LineageCycle after more than LINEAGE_MAX_HOPS climbs or on a repeated session, and
    UnknownKind for a binding whose kind the platform does not define.
    """
    chain: list[SessionRef] = []
    seen: set[SessionRef] = set()
    current = asking
    while True:
        session = reader.read_session(current)
        if session is None:
            what = "asking session" if not chain else f"parent of {chain[-1]}"
            raise ParentUnreadable(f"the {what}, {current}, cannot be read")
        chain.append(current)
        seen.add(current)
        binding = session.outbound
        if binding:
            kind = str(binding.get("kind") or "")
            try:
                human = delivers_to_human(kind)
            except UnknownChannelKind as exc:
                raise UnknownKind(
                    f"session {current} is bound to channel {binding.get('name')!r} of {exc}"
                ) from exc
            if human:
                return Route(chain=tuple(chain), binding=dict(binding), owner=current)
        if session.parent is None:
            return Route(chain=tuple(chain), binding=None, owner=None)
        if len(chain) > LINEAGE_MAX_HOPS or session.parent in seen:
            raise LineageCycle(
                f"the lineage above {asking} does not end within {LINEAGE_MAX_HOPS} hops "
                f"(at {session.parent})"
            )
        current = session.parent


class DatabaseSessionReader:
    """Reads sessions from the local mirror, memoising within one walk's lifetime."""

    def __init__(self) -> None:
        self._cache: dict[SessionRef, SessionView | None] = {}

    def read_session(self, ref: SessionRef) -> SessionView | None:
        if ref not in self._cache:
            from delegations.models import AgentSession

            row = AgentSession.objects.filter(namespace=ref.namespace, name=ref.name).first()
            self._cache[ref] = None if row is None else session_view(row)
        return self._cache[ref]


def session_view(row: Any) -> SessionView:
    parent = None
    if row.parent_name:
        parent = SessionRef(row.parent_namespace or row.namespace, row.parent_name)
    return SessionView(
        ref=SessionRef(row.namespace, row.name), parent=parent, outbound=row.outbound_binding
    )
