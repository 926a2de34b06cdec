"""OpenAPI v3 structural schemas of the three platform kinds, as their CRDs declare them.

One source of truth: the validator (delegations.validation) checks objects against these, and the
CRD manifests under deploy/crds/ are generated from them, so nothing Disclosure Desk reads or
writes can be pruned by the API server.
"""

from __future__ import annotations

from typing import Any

from delegations.platform import ChannelKind, ChannelRole, Mode, Phase, RefusalReason

Schema = dict[str, Any]


def _string(**extra: Any) -> Schema:
    return {"type": "string", **extra}


def _object(properties: dict[str, Schema], required: list[str] | None = None) -> Schema:
    schema: Schema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


DATE_TIME = _string(format="date-time")
INT64 = {"type": "integer", "format": "int64"}

OBJECT_REF = _object(
    {"name": _string(minLength=1), "namespace": _string(minLength=1)}, ["name", "namespace"]
)

SLOT_NAME = _string(minLength=1, maxLength=64, pattern=r"^[a-z][a-z0-9_]*$")
TAG_ID = _string(minLength=1, maxLength=256)
DATA_SLOT = _object({"slot": SLOT_NAME, "tagID": TAG_ID}, ["slot", "tagID"])
SLOT_LIST = {"type": "array", "items": DATA_SLOT}

SUBAGENT_REQUEST_SPEC = _object(
    {
        "parent": OBJECT_REF,
        "class": _string(minLength=1),
        "task": _string(minLength=1, maxLength=8192),
        "mode": _string(enum=["", *[m.value for m in Mode]]),
        "dataSlots": {"type": "array", "maxItems": 32, "items": DATA_SLOT},
    },
    ["parent", "class", "task"],
)

SUBAGENT_REQUEST_STATUS = _object(
    {
        "phase": _string(enum=["", *[p.value for p in Phase]]),
        "pendingDataSlots": SLOT_LIST,
        "approvedDataSlots": SLOT_LIST,
        "deniedDataSlots": SLOT_LIST,
        "boundDataSlots": SLOT_LIST,
        "refusedDataSlots": {
            "type": "array",
            "items": _object(
                {
                    "slot": _string(),
                    "tagID": _string(),
                    "reason": _string(enum=[r.value for r in RefusalReason]),
                },
                ["slot", "tagID", "reason"],
            ),
        },
        "disclosureRequestedAt": DATE_TIME,
        "message": _string(),
        "exchange": INT64,
        "exchangesRemaining": {**INT64, "nullable": True},
        "awaitingParentSince": DATE_TIME,
        "inputRequest": _object(
            {
                "slot": _string(),
                "why": _string(),
                "exchange": INT64,
                "pending": {"type": "boolean"},
            },
            ["slot", "why", "exchange"],
        ),
        "result": _string(),
        "artifacts": {
            "type": "array",
            "items": _object({"id": _string(), "description": _string()}, ["id", "description"]),
        },
        "childRef": OBJECT_REF,
        "completionTime": DATE_TIME,
        "failureReason": _string(),
        "determination": _string(),
        "observedGeneration": INT64,
    }
)

CHANNEL_BINDING = _object(
    {
        "name": _string(minLength=1),
        "kind": _string(enum=[k.value for k in ChannelKind]),
        "key": _string(),
        "capabilities": {"type": "array", "items": _string()},
        "natsSubjectPrefix": _string(),
        "external": {"type": "boolean"},
    },
    ["name", "kind"],
)

PENDING_INTERACTION = _object(
    {
        "requestID": _string(minLength=1),
        "category": _string(),
        "requestRef": _string(),
        "requestedAt": DATE_TIME,
        "agentDisplayName": _string(),
        "summary": _string(),
        "approverSubject": _string(),
    },
    ["requestID"],
)

AGENT_SESSION_SPEC = _object(
    {"parent": OBJECT_REF, "inputChannel": CHANNEL_BINDING, "outputChannel": CHANNEL_BINDING}
)
AGENT_SESSION_STATUS = _object(
    {"pendingInteractions": {"type": "array", "items": PENDING_INTERACTION}}
)

CHANNEL_SPEC = _object(
    {
        "kind": _string(enum=[k.value for k in ChannelKind]),
        "role": _string(enum=[r.value for r in ChannelRole], default=ChannelRole.BOTH.value),
    },
    ["kind"],
)
CHANNEL_STATUS = _object({})

KINDS: dict[str, dict[str, Any]] = {
    "SubagentRequest": {
        "plural": "subagentrequests",
        "shortNames": ["subreq"],
        "spec": SUBAGENT_REQUEST_SPEC,
        "status": SUBAGENT_REQUEST_STATUS,
        "specRequired": True,
    },
    "AgentSession": {
        "plural": "agentsessions",
        "shortNames": ["agses"],
        "spec": AGENT_SESSION_SPEC,
        "status": AGENT_SESSION_STATUS,
        "specRequired": False,
    },
    "Channel": {
        "plural": "channels",
        "shortNames": ["apch"],
        "spec": CHANNEL_SPEC,
        "status": CHANNEL_STATUS,
        "specRequired": True,
    },
}
