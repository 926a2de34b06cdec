"""Signals the agent side sends so the human side can react without being imported here.

Both are sent inside the transaction that changed the mirror, so a receiver's writes commit or
roll back with it.
"""

from django.dispatch import Signal

# kwargs: request (delegations.models.SubagentRequest)
subagent_request_changed = Signal()
# kwargs: namespace, name, uid
subagent_request_deleted = Signal()
