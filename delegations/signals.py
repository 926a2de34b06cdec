"""Signals the agent side sends so the human side can react without being imported here.

Both are sent inside the transaction that changed the mirror, so a receiver's writes commit or
roll back with it.
"""

from django.dispatch import Signal

# kwargs: request (delegations.models.SubagentRequest), previous ((spec, status) before the
# change, or None for a new object)
subagent_request_changed = Signal()
# kwargs: changes (list of (request, previous) as above, distinct requests). Sent once for a
# mirrored watch batch instead of subagent_request_changed for each request in it, so that the
# receiver can share its lookups across the batch.
subagent_requests_changed = Signal()
# kwargs: namespace, name, uid
subagent_request_deleted = Signal()
# Sent by the active watcher about every LEASE_DURATION_SECONDS / 3, for periodic upkeep.
watcher_tick = Signal()
# kwargs: session (delegations.models.AgentSession), probed (for a new session written together
# with the answers to delegations.services.SESSION_PROBES: those answers by name; else None)
agent_session_changed = Signal()
