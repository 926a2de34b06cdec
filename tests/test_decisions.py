"""Every gate of a decision (domain.md section 4), its refusal class, and what the status holds."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import DatabaseError, connection
from django.test import TestCase
from django.utils import timezone

from approvals.decisions import Refusal, card_decide
from approvals.identity import Identity, canonical_subject
from approvals.models import AuditEntry, Card, CardState, Decision, Delivery
from delegations import services
from delegations.models import SubagentRequest
from delegations.status import KnownState, append_decided_slot
from delegations.store import Conflict, DatabaseStore, NotFound
from tests import factories
from tests.conftest import ALICE, BOB
from tests.factories import card_for, subagent_request

SLOT = {"slot": "logs", "tagID": "tag-logs"}


def decide(card: Card, email: str = ALICE, action: str = "approve", **kwargs):
    """Decide as a surface would, running what is queued after commit as production does."""
    with TestCase.captureOnCommitCallbacks(execute=True):
        return card_decide(
            card_id=card.pk, identity=Identity(email), action_id=action, channel="web", **kwargs
        )


def status_of(name: str) -> dict:
    return SubagentRequest.objects.get(namespace="team", name=name).status


def test_an_owner_approving_appends_the_slot_to_approved_data_slots_and_nothing_else(team):
    subagent_request("r")
    before = status_of("r")
    result = decide(card_for("r"))
    assert result.applied and result.outcome == "approved"
    after = status_of("r")
    assert after["approvedDataSlots"] == [SLOT]
    assert "deniedDataSlots" not in after
    assert {k: v for k, v in after.items() if k != "approvedDataSlots"} == before


def test_denying_appends_the_slot_to_denied_data_slots(team):
    subagent_request("r")
    result = decide(card_for("r"), action="deny", reason="Contains customer emails.")
    assert result.outcome == "denied"
    assert status_of("r")["deniedDataSlots"] == [SLOT]
    assert "approvedDataSlots" not in status_of("r")
    assert card_for("r").decision.reason == "Contains customer emails."


def test_any_action_other_than_approve_is_a_denial(team):
    subagent_request("r")
    assert decide(card_for("r"), action="maybe").outcome == "denied"
    assert status_of("r")["deniedDataSlots"] == [SLOT]


def test_the_decision_records_who_when_and_through_which_channel(team):
    subagent_request("r")
    decide(card_for("r"))
    decision = Decision.objects.get()
    assert decision.decided_by_email == ALICE
    assert decision.decided_by_subject == canonical_subject(ALICE)
    assert decision.decided_by_subject == "YWxpY2VAZXhhbXBsZS5jb20"
    assert decision.channel == "web"
    assert decision.delivery == Delivery.WRITTEN
    assert decision.written_at is not None


def test_a_person_without_a_verified_email_is_not_authorized(team):
    subagent_request("r")
    result = decide(card_for("r"), email="")
    assert result.refusal == Refusal.NOT_AUTHORIZED
    assert card_for("r").is_open


def test_a_non_owner_is_refused_as_not_authorized_and_the_card_stays_open(team):
    subagent_request("r")
    result = decide(card_for("r"), email=BOB)
    assert not result.applied
    assert result.refusal == Refusal.NOT_AUTHORIZED
    assert "only an owner" in result.message
    assert card_for("r").is_open
    assert "approvedDataSlots" not in status_of("r")


def test_ownership_is_checked_at_decision_time_not_when_the_card_was_raised(team):
    subagent_request("r")
    from approvals.models import ResourceOwner

    ResourceOwner.objects.filter(email=ALICE).delete()
    assert decide(card_for("r")).refusal == Refusal.NOT_AUTHORIZED


def test_an_authorizer_failure_fails_closed(team, monkeypatch):
    subagent_request("r")

    class Broken:
        def may_speak_for(self, email, tag_id):
            raise ConnectionError("authorization service unreachable")

    monkeypatch.setattr("approvals.decisions.get_authorizer", lambda: Broken())
    assert decide(card_for("r")).refusal == Refusal.NOT_AUTHORIZED
    assert card_for("r").is_open


def test_the_category_comes_from_the_stored_card_never_from_the_click(team):
    subagent_request("r")
    result = decide(card_for("r"), category="tool_approval")
    assert result.refusal == Refusal.CATEGORY_MISMATCH
    assert card_for("r").is_open
    assert decide(card_for("r"), category="data_slot_disclosure").applied


def test_an_expired_card_is_refused_and_closed_as_expired(team):
    subagent_request("r", requested_minutes_ago=21)
    result = decide(card_for("r"))
    assert result.refusal == Refusal.EXPIRED
    assert card_for("r").state == CardState.EXPIRED
    assert "approvedDataSlots" not in status_of("r")
    assert decide(card_for("r")).refusal == Refusal.EXPIRED


def test_a_second_decision_is_already_resolved_and_says_who_decided(team):
    subagent_request("r")
    decide(card_for("r"))
    again = decide(card_for("r"), action="deny")
    assert again.refusal == Refusal.ALREADY_RESOLVED
    assert ALICE in again.message and "shared" in again.message
    assert status_of("r")["approvedDataSlots"] == [SLOT]
    assert "deniedDataSlots" not in status_of("r")
    assert Decision.objects.count() == 1


def test_a_card_closed_by_the_platform_is_already_resolved(team):
    subagent_request("r")
    services.object_delete("SubagentRequest", "team", "r")
    result = decide(card_for("r"))
    assert result.refusal == Refusal.ALREADY_RESOLVED
    assert "deleted" in result.message


def test_a_card_that_does_not_exist_is_already_resolved(team):
    result = card_decide(
        card_id=999999, identity=Identity(ALICE), action_id="approve", channel="web"
    )
    assert result.refusal == Refusal.ALREADY_RESOLVED


def test_a_failure_while_recording_is_a_handler_error_and_leaves_the_card_open(team, monkeypatch):
    subagent_request("r")

    from delegations import sql

    def card_leaves_open_then_the_disk_fills(writes):
        sql.write_together(writes[:1])  # the card leaves OPEN...
        raise DatabaseError("disk full")  # ...and its Decision cannot be written

    # The card's UPDATE and the Decision go in together through the lean writes
    # (delegations.sql), not the ORM.
    monkeypatch.setattr("approvals.decisions.write_together", card_leaves_open_then_the_disk_fills)
    result = decide(card_for("r"))
    assert result.refusal == Refusal.HANDLER_ERROR
    assert card_for("r").is_open
    assert "approvedDataSlots" not in status_of("r")


def test_gates_run_in_order_so_a_non_owner_on_an_expired_card_hears_not_authorized(team):
    subagent_request("r", requested_minutes_ago=30)
    assert decide(card_for("r"), email=BOB).refusal == Refusal.NOT_AUTHORIZED
    assert card_for("r").is_open


def test_every_decision_and_refusal_is_in_the_audit_log(team):
    subagent_request("r")
    decide(card_for("r"), email=BOB)
    decide(card_for("r"))
    decide(card_for("r"))
    entries = list(
        AuditEntry.objects.filter(request_ref="dsd-r-logs")
        .order_by("id")
        .values_list("action", "actor_email", "outcome")
    )
    assert entries == [
        ("refused", BOB, "not_authorized"),
        ("decided", ALICE, "approved"),
        ("written", "", "approved"),
        ("refused", ALICE, "already_resolved"),
    ]


def test_the_audit_log_cannot_be_changed_or_deleted(team):
    subagent_request("r")
    decide(card_for("r"), email=BOB)
    entry = AuditEntry.objects.get()
    entry.detail = "rewritten"
    with pytest.raises(Exception, match="never changed"):
        entry.save()
    with pytest.raises(Exception, match="never deleted"):
        entry.delete()


def test_two_slots_of_one_request_are_decided_independently(team):
    factories.owned_tag("tag-diff", ALICE)
    subagent_request("pair", slots=[("logs", "tag-logs"), ("diff", "tag-diff")])
    decide(card_for("pair", slot="logs"))
    decide(card_for("pair", slot="diff"), action="deny")
    status = status_of("pair")
    assert status["approvedDataSlots"] == [SLOT]
    assert status["deniedDataSlots"] == [{"slot": "diff", "tagID": "tag-diff"}]


def test_an_approval_of_one_tag_says_nothing_about_the_same_slot_with_another_tag(team):
    factories.owned_tag("tag-other", ALICE)
    subagent_request("same-slot", slots=[("logs", "tag-logs"), ("logs", "tag-other")])
    cards = Card.objects.filter(request_name="same-slot").order_by("tag_id")
    decide(cards[0])
    assert status_of("same-slot")["approvedDataSlots"] == [SLOT]
    assert Card.objects.get(request_name="same-slot", tag_id="tag-other").is_open


def test_writing_the_status_is_idempotent(team):
    subagent_request("r")
    for _ in range(3):
        append_decided_slot(
            store=DatabaseStore(),
            namespace="team",
            name="r",
            field="approvedDataSlots",
            slot="logs",
            tag_id="tag-logs",
        )
    assert status_of("r")["approvedDataSlots"] == [SLOT]


def test_the_status_writer_refuses_to_write_any_other_field(team):
    subagent_request("r")
    with pytest.raises(ValueError, match="only"):
        append_decided_slot(
            store=DatabaseStore(),
            namespace="team",
            name="r",
            field="boundDataSlots",
            slot="logs",
            tag_id="tag-logs",
        )


def test_a_stale_resource_version_is_a_conflict_and_changes_nothing(team):
    subagent_request("r")
    store = DatabaseStore()
    obj = store.read("SubagentRequest", "team", "r")
    services.object_apply("SubagentRequest", {**obj, "status": {**obj["status"], "message": "m"}})
    obj["status"]["approvedDataSlots"] = [SLOT]
    with pytest.raises(Conflict):
        store.replace_status("SubagentRequest", obj)
    assert "approvedDataSlots" not in status_of("r")
    assert status_of("r")["message"] == "m"


def test_a_conflicting_operator_write_is_retried_and_both_writes_survive(team, monkeypatch):
    """The operator changes another status field between our read and our write, twice."""
    subagent_request("r")
    store = DatabaseStore()
    real_read = store.read
    interference = iter(["first", "second"])

    def read_then_operator_writes(kind, namespace, name):
        obj = real_read(kind, namespace, name)
        note = next(interference, None)
        if note:
            current = real_read(kind, namespace, name)
            current["status"]["determination"] = note
            services.object_apply("SubagentRequest", current)
        return obj

    monkeypatch.setattr(store, "read", read_then_operator_writes)
    append_decided_slot(
        store=store,
        namespace="team",
        name="r",
        field="approvedDataSlots",
        slot="logs",
        tag_id="tag-logs",
    )
    status = status_of("r")
    assert status["approvedDataSlots"] == [SLOT]
    assert status["determination"] == "second"


def test_a_decision_on_a_request_that_vanished_is_kept_and_the_card_says_it_is_gone(
    team, monkeypatch
):
    subagent_request("r")

    def gone(self, kind, namespace, name, **_write):
        raise NotFound("gone")

    # Gone for every access: the read-append-write and the optimistic patch from the mirror.
    monkeypatch.setattr(DatabaseStore, "read", gone)
    monkeypatch.setattr(DatabaseStore, "patch_status", gone)
    result = decide(card_for("r"))
    assert result.applied
    decision = Decision.objects.get()
    assert decision.delivery == Delivery.FAILED
    assert "no longer exists" in decision.delivery_detail


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_racing_decisions_apply_exactly_once(team):
    assert connection.vendor == "postgresql"
    subagent_request("race")
    card = card_for("race")
    barrier = threading.Barrier(2)
    results = []

    def attempt(action: str) -> None:
        barrier.wait()
        try:
            results.append(decide(card, action=action))
        finally:
            connection.close()

    threads = [threading.Thread(target=attempt, args=(a,)) for a in ("approve", "deny")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(r.applied for r in results) == [False, True]
    assert [r.refusal for r in results if not r.applied] == [Refusal.ALREADY_RESOLVED]
    winner = next(r for r in results if r.applied)
    status = status_of("race")
    decided_lists = [k for k in ("approvedDataSlots", "deniedDataSlots") if k in status]
    assert decided_lists == [
        "approvedDataSlots" if winner.outcome == "approved" else "deniedDataSlots"
    ]
    assert Decision.objects.count() == 1


def test_expiry_is_exactly_twenty_minutes_after_the_disclosure_was_requested(team):
    subagent_request("r", requested_minutes_ago=19.9)
    card = card_for("r")
    assert card.expires_at - timezone.now() < timedelta(minutes=1)
    assert decide(card).applied


def test_a_decision_from_a_current_mirror_is_written_without_reading_the_request(team, monkeypatch):
    subagent_request("r")

    def no_read(self, kind, namespace, name):
        raise AssertionError("the mirror was current: no read expected")

    monkeypatch.setattr(DatabaseStore, "read", no_read)
    assert decide(card_for("r")).applied
    assert status_of("r")["approvedDataSlots"] == [SLOT]
    assert status_of("r")["phase"] == "AwaitingDisclosure"
    assert Decision.objects.get().delivery == Delivery.WRITTEN


def test_a_status_patch_changes_only_the_field_it_names_and_a_stale_version_conflicts(team):
    row = subagent_request("r")
    store = DatabaseStore()
    with pytest.raises(Conflict):
        store.patch_status(
            "SubagentRequest",
            "team",
            "r",
            resource_version=str(int(row.resource_version) - 1),
            fields={"approvedDataSlots": [SLOT]},
        )
    assert "approvedDataSlots" not in status_of("r")
    written = store.patch_status(
        "SubagentRequest",
        "team",
        "r",
        resource_version=row.resource_version,
        fields={"approvedDataSlots": [SLOT]},
    )
    assert written["metadata"]["resourceVersion"] == str(int(row.resource_version) + 1)
    assert status_of("r") == {**row.status, "approvedDataSlots": [SLOT]}


def test_an_optimistic_write_from_a_stale_mirror_falls_back_and_writes_once(team):
    """The operator writes between the mirror's copy and our write: the patch conflicts, the
    read-append-write lands the slot once, and the operator's field survives."""
    row = subagent_request("r")
    known = KnownState(row.resource_version, row.status)
    services.object_apply(
        "SubagentRequest",
        {**row.as_kubernetes_object(), "status": {**row.status, "message": "operator"}},
    )
    for _ in range(2):
        append_decided_slot(
            store=DatabaseStore(),
            namespace="team",
            name="r",
            field="approvedDataSlots",
            slot="logs",
            tag_id="tag-logs",
            known=known,
        )
    status = status_of("r")
    assert status["approvedDataSlots"] == [SLOT]
    assert status["message"] == "operator"
