"""Platform objects are checked like the API server checks them against their CRDs."""

from __future__ import annotations

import pytest

from delegations import services
from delegations.models import Channel, SubagentRequest
from delegations.validation import ObjectInvalid, validate_object
from tests.factories import request_object


def errors_of(kind: str, obj: dict) -> dict[str, str]:
    with pytest.raises(ObjectInvalid) as caught:
        validate_object(kind, obj)
    return {e.field: e.message for e in caught.value.errors}


def test_a_well_formed_request_is_accepted_unchanged():
    obj = request_object("r1")
    assert validate_object("SubagentRequest", obj)["spec"] == obj["spec"]


@pytest.mark.parametrize(
    ("slot", "message"),
    [
        ("Logs", "must match ^[a-z][a-z0-9_]*$"),
        ("1logs", "must match ^[a-z][a-z0-9_]*$"),
        ("log-s", "must match ^[a-z][a-z0-9_]*$"),
        ("", "must not be empty"),
        ("a" * 65, "must be at most 64 characters"),
    ],
)
def test_a_slot_name_outside_the_crd_pattern_is_refused_naming_the_slot(slot, message):
    obj = request_object("r1", slots=[("logs", "t1"), (slot, "t2")], pending=[])
    assert errors_of("SubagentRequest", obj) == {"spec.dataSlots[1].slot": message}


def test_the_longest_legal_slot_and_tag_are_accepted():
    obj = request_object("r1", slots=[("a" * 64, "t" * 256)], pending=[])
    assert validate_object("SubagentRequest", obj)["spec"]["dataSlots"][0]["slot"] == "a" * 64


def test_a_tag_id_longer_than_256_characters_is_refused():
    obj = request_object("r1", slots=[("logs", "t" * 257)], pending=[])
    assert errors_of("SubagentRequest", obj) == {
        "spec.dataSlots[0].tagID": "must be at most 256 characters"
    }


def test_more_than_32_data_slots_are_refused():
    obj = request_object("r1", slots=[(f"s{i}", "t") for i in range(33)], pending=[])
    assert errors_of("SubagentRequest", obj) == {"spec.dataSlots": "must have at most 32 items"}


def test_a_task_must_hold_between_1_and_8192_characters():
    assert errors_of("SubagentRequest", request_object("r1", task="")) == {
        "spec.task": "must not be empty"
    }
    assert errors_of("SubagentRequest", request_object("r1", task="x" * 8193)) == {
        "spec.task": "must be at most 8192 characters"
    }
    assert validate_object("SubagentRequest", request_object("r1", task="x" * 8192))


def test_an_unknown_mode_is_refused_and_an_empty_one_accepted():
    obj = request_object("r1")
    obj["spec"]["mode"] = "autonomous"
    assert "spec.mode" in errors_of("SubagentRequest", obj)
    obj["spec"]["mode"] = ""
    assert validate_object("SubagentRequest", obj)["spec"]["mode"] == ""


def test_required_spec_fields_are_named_when_missing():
    obj = request_object("r1")
    del obj["spec"]["class"]
    del obj["spec"]["parent"]["name"]
    assert errors_of("SubagentRequest", obj) == {
        "spec.class": "is required",
        "spec.parent.name": "is required",
    }


def test_status_enums_formats_and_types_are_checked():
    obj = request_object(
        "r1",
        phase="Paused",
        disclosureRequestedAt="yesterday",
        exchange="one",
        refusedDataSlots=[{"slot": "a", "tagID": "t", "reason": "Because"}],
        inputRequest={"slot": "a", "exchange": 1, "pending": "yes"},
    )
    assert errors_of("SubagentRequest", obj) == {
        "status.phase": "must be one of 'Pending', 'Running', 'AwaitingParent', "
        "'AwaitingDisclosure', 'Succeeded', 'Failed', 'Denied', not 'Paused'",
        "status.disclosureRequestedAt": "must be an RFC 3339 date-time",
        "status.exchange": "must be an integer",
        "status.refusedDataSlots[0].reason": "must be one of 'NotDelegable', 'WouldDisclose', "
        "'GradingUnavailable', not 'Because'",
        "status.inputRequest.why": "is required",
        "status.inputRequest.pending": "must be true or false",
    }


def test_exchanges_remaining_may_be_null_but_exchange_may_not():
    ok = request_object("r1", exchangesRemaining=None)
    assert validate_object("SubagentRequest", ok)["status"]["exchangesRemaining"] is None
    assert errors_of("SubagentRequest", request_object("r1", exchange=None)) == {
        "status.exchange": "must not be null"
    }


def test_fields_the_crd_does_not_declare_are_pruned_like_the_api_server_does():
    obj = request_object("r1")
    obj["spec"]["datum"] = "secret payload"
    obj["spec"]["dataSlots"][0]["content"] = "secret payload"
    obj["status"]["extra"] = 1
    clean = validate_object("SubagentRequest", obj)
    assert "datum" not in clean["spec"]
    assert clean["spec"]["dataSlots"][0] == {"slot": "logs", "tagID": "tag-logs"}
    assert "extra" not in clean["status"]


@pytest.mark.parametrize(
    ("metadata", "field"),
    [
        ({"namespace": "team"}, "metadata.name"),
        ({"namespace": "team", "name": "Has_Upper"}, "metadata.name"),
        ({"namespace": "Team", "name": "ok"}, "metadata.namespace"),
        ({"name": "ok"}, "metadata.namespace"),
    ],
)
def test_object_names_follow_kubernetes_naming_rules(metadata, field):
    obj = request_object("r1")
    obj["metadata"] = metadata
    assert field in errors_of("SubagentRequest", obj)


def test_a_channel_of_an_unknown_kind_is_an_error_not_a_machine_channel():
    assert errors_of(
        "Channel", {"metadata": {"namespace": "t", "name": "c"}, "spec": {"kind": "email"}}
    ) == {
        "spec.kind": "must be one of 'fake', 'slack', 'bento', 'local', 'browser', 'github', "
        "'agent', not 'email'"
    }


def test_a_channel_role_defaults_to_both(db):
    row = services.object_apply(
        "Channel", {"metadata": {"namespace": "t", "name": "c"}, "spec": {"kind": "slack"}}
    )
    assert isinstance(row, Channel)
    assert (row.kind, row.role) == ("slack", "both")


def test_applying_an_invalid_object_stores_nothing_and_keeps_the_previous_version(db):
    services.object_apply("SubagentRequest", request_object("r1", task="first words"))
    bad = request_object("r1", task="")
    with pytest.raises(ObjectInvalid) as caught:
        services.object_apply("SubagentRequest", bad)
    assert caught.value.field == "spec.task"
    stored = SubagentRequest.objects.get(name="r1")
    assert stored.spec["task"] == "first words"


def test_an_unchanged_apply_keeps_the_resource_version_and_a_change_bumps_it(db):
    obj = request_object("r1")
    first = services.object_apply("SubagentRequest", obj)
    again = services.object_apply("SubagentRequest", obj)
    assert again.resource_version == first.resource_version
    changed = services.object_apply("SubagentRequest", request_object("r1", task="other"))
    assert int(changed.resource_version) == int(first.resource_version) + 1
    assert changed.generation == first.generation + 1
