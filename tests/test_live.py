"""The live-update websocket: who hears what, and that only committed changes are announced."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import channel_layers
from channels.testing import WebsocketCommunicator
from django.db import connections, transaction

from approvals import events
from approvals.consumers import LiveConsumer
from approvals.decisions import card_decide
from approvals.identity import Identity
from approvals.models import Card, Decision
from delegations import services
from tests.conftest import ALICE
from tests.factories import card_for, request_object, subagent_request
from tests.kubeapi.fixtures import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def fresh_layer(settings):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    channel_layers.backends = {}
    yield
    channel_layers.backends = {}


def connect(user, card_id=None):
    path = "/ws/live/" + (f"?card={card_id}" if card_id else "")
    communicator = WebsocketCommunicator(LiveConsumer.as_asgi(), path)
    communicator.scope["user"] = user
    communicator.scope["query_string"] = (f"card={card_id}" if card_id else "").encode()
    return communicator


def run(body):
    """Drive the async test body on a thread of its own: once the browser tests have started,
    Playwright's event loop occupies the main thread for the rest of the session."""

    def drive() -> None:
        try:
            async_to_sync(body)()
        finally:
            connections.close_all()  # this thread's database sessions end with it

    with ThreadPoolExecutor(1) as pool:
        pool.submit(drive).result(timeout=30)


def test_an_anonymous_socket_is_refused(team):
    from django.contrib.auth.models import AnonymousUser

    async def body():
        communicator = connect(AnonymousUser())
        connected, code = await communicator.connect()
        assert not connected and code == 4401

    run(body)


def test_a_card_raised_for_me_is_announced_without_its_words(alice, team):
    async def body():
        communicator = connect(alice)
        assert (await communicator.connect())[0]
        await database_sync_to_async(subagent_request)("live", task="<b>secret task words</b>")
        message = await communicator.receive_json_from(timeout=5)
        card = await database_sync_to_async(card_for)("live")
        assert message == {"event": "raised", "card": card.pk, "state": "open"}
        await communicator.disconnect()

    run(body)


def test_people_the_card_is_not_routed_to_hear_nothing(alice, charlie, team):
    async def body():
        communicator = connect(charlie)
        assert (await communicator.connect())[0]
        await database_sync_to_async(subagent_request)("not-charlies")
        assert await communicator.receive_nothing(timeout=0.3)
        await communicator.disconnect()

    run(body)


def test_a_decision_reaches_the_card_page_and_every_concerned_inbox(alice, bob, team):
    subagent_request("r")
    card = card_for("r")

    async def body():
        bobs_inbox = connect(bob)
        card_page = connect(bob, card.pk)
        assert (await bobs_inbox.connect())[0] and (await card_page.connect())[0]
        result = await database_sync_to_async(card_decide)(
            card_id=card.pk, identity=Identity(ALICE), action_id="approve", channel="web"
        )
        assert result.applied
        received = [await bobs_inbox.receive_json_from(timeout=5) for _ in range(2)]
        assert {m["event"] for m in received} == {"decided", "delivery"}
        assert (await card_page.receive_json_from(timeout=5))["state"] == "approved"
        await bobs_inbox.disconnect()
        await card_page.disconnect()

    run(body)


def test_a_burst_of_cards_reaches_each_concerned_inbox_once(alice, bob, team):
    def raise_three_in_one_batch():
        with transaction.atomic():
            services.objects_mirror_batch(
                "SubagentRequest", [request_object(f"burst-{i}") for i in range(3)]
            )

    async def body():
        alices_inbox, bobs_inbox = connect(alice), connect(bob)
        assert (await alices_inbox.connect())[0] and (await bobs_inbox.connect())[0]
        await database_sync_to_async(raise_three_in_one_batch)()
        # The page refetches itself whole on any message, so one shows all three cards.
        for inbox in (alices_inbox, bobs_inbox):
            message = await inbox.receive_json_from(timeout=5)
            assert message["event"] == "raised"
            assert await inbox.receive_nothing(timeout=0.3)
            await inbox.disconnect()

    run(body)
    assert Card.objects.filter(request_name__startswith="burst-").count() == 3


def test_a_rolled_back_change_is_never_announced(alice, team):
    def raise_then_roll_back():
        with pytest.raises(RuntimeError), transaction.atomic():
            subagent_request("phantom")
            raise RuntimeError("rolled back")

    async def body():
        communicator = connect(alice)
        assert (await communicator.connect())[0]
        await database_sync_to_async(raise_then_roll_back)()
        assert await communicator.receive_nothing(timeout=0.3)
        await communicator.disconnect()

    run(body)


def test_with_the_channel_layer_down_decisions_are_still_recorded(alice, team, settings):
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": ["redis://127.0.0.1:1/0"]},
        }
    }
    channel_layers.backends = {}
    subagent_request("r")
    result = card_decide(
        card_id=card_for("r").pk, identity=Identity(ALICE), action_id="deny", channel="web"
    )
    assert result.applied
    assert Decision.objects.get().outcome == "denied"


@pytest.fixture
def private_redis(tmp_path):
    """A pristine Redis of this test's own on a free port, which the test may stop and start."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    class Server:
        url = f"redis://127.0.0.1:{port}/0"

        def start(self) -> None:
            subprocess.run(  # noqa: S603
                [
                    shutil.which("redis-server") or "redis-server",
                    "--bind",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--daemonize",
                    "yes",
                    "--logfile",
                    str(tmp_path / "redis.log"),
                ],
                check=True,
            )
            wait_until(lambda: self.ping(), what="redis to answer")

        def ping(self) -> bool:
            try:
                return bool(redis.Redis.from_url(self.url, socket_connect_timeout=1).ping())
            except redis.ConnectionError:
                return False

        def stop(self) -> None:
            try:
                redis.Redis.from_url(self.url).shutdown(nosave=True)
            except redis.ConnectionError:
                pass  # the connection drops as the server goes away
            wait_until(lambda: not self.ping(), what="redis to stop")

    server = Server()
    server.start()
    yield server
    server.stop()


def test_redis_down_loses_pushes_not_decisions_and_pushes_resume(
    alice, team, settings, client, private_redis
):
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [private_redis.url]},
        }
    }
    channel_layers.backends = {}
    subagent_request("during-outage")
    private_redis.stop()
    result = card_decide(
        card_id=card_for("during-outage").pk,
        identity=Identity(ALICE),
        action_id="approve",
        channel="web",
    )
    assert result.applied
    assert Decision.objects.get().delivery == "written"
    client.force_login(alice)
    page = client.get(f"/cards/{card_for('during-outage').pk}/")
    assert page.status_code == 200 and "Shared" in page.content.decode()

    private_redis.start()
    channel_layers.backends = {}

    async def body():
        communicator = connect(alice)
        assert (await communicator.connect())[0]
        await database_sync_to_async(subagent_request)("after-outage")
        message = await communicator.receive_json_from(timeout=5)
        assert message["event"] == "raised"
        await communicator.disconnect()

    run(body)


class StallingLayer:
    """A shared channel layer that answers only when let go: Redis slow or unreachable."""

    def __init__(self) -> None:
        self.let_go = threading.Event()
        self.sent: list[str] = []

    async def group_send(self, group, message):
        while not self.let_go.is_set():
            await asyncio.sleep(0.01)
        self.sent.append(group)


def test_a_stalled_layer_holds_up_no_change_and_drops_pushes_beyond_the_backlog(
    monkeypatch, caplog
):
    monkeypatch.setattr(events, "PUSH_BACKLOG", 2)
    layer = StallingLayer()
    pusher = events.Pusher()
    assert pusher.push(layer, [("reviewer.a", {})], "raised")
    assert pusher.push(layer, [("reviewer.b", {})], "decided")
    # Both wait for the layer; the third change's push is dropped, and says so.
    assert not pusher.push(layer, [("reviewer.c", {})], "closed")
    assert not pusher.flush(timeout=0.2)
    layer.let_go.set()
    assert pusher.flush(timeout=5)
    assert layer.sent == ["reviewer.a", "reviewer.b"]  # in the order they were handed over


def test_a_push_the_layer_never_answers_is_given_up_and_logged(monkeypatch, caplog):
    monkeypatch.setattr(events, "PUSH_TIMEOUT", 0.1)
    layer = StallingLayer()
    pusher = events.Pusher()
    assert pusher.push(layer, [("reviewer.a", {})], "raised")
    assert pusher.flush(timeout=5)
    assert layer.sent == []
    assert "live update raised not sent" in caplog.text
