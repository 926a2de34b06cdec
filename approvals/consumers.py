"""The websocket that keeps a reviewer's open pages current.

``/ws/live/`` joins the signed-in reviewer's own group; ``/ws/live/?card=<id>`` also joins that
card's group when the card is routed to them (or they are staff). Messages are one line of JSON,
``{"event", "card", "state"}``: no agent words, only what tells a page to refresh itself.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from approvals.events import card_group, reviewer_group
from approvals.identity import Identity
from approvals.selectors import card_visible_to


class LiveConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        user = self.scope.get("user")
        email = Identity.of_user(user).email if user is not None else ""
        if not email:
            await self.close(code=4401)
            return
        self.groups_joined = [reviewer_group(email)]
        card_id = parse_qs(self.scope.get("query_string", b"").decode()).get("card", [""])[0]
        if card_id.isdigit() and await database_sync_to_async(card_visible_to)(int(card_id), user):
            self.groups_joined.append(card_group(int(card_id)))
        for group in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        for group in getattr(self, "groups_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        """Pages only listen; anything they send is ignored."""

    async def card_event(self, message: dict[str, Any]) -> None:
        await self.send_json(
            {"event": message["event"], "card": message["card"], "state": message["state"]}
        )
