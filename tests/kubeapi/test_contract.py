"""Contract of the test Kubernetes API server, checked through the official `kubernetes` client.

Each test pins one behaviour of the real API server that production code relies on:

- discovery: /version, legacy group and resource lists (with /status entries and short names),
  aggregated discovery when asked for;
- create: 201 with uid, creationTimestamp, generation 1 and a resourceVersion; 409 AlreadyExists;
  namespace from the URL; `.status` ignored; generateName;
- schema: unknown fields pruned on create, update and patch; defaults applied; `required`,
  `enum`, `type`, `pattern`, `minLength`, `maxLength`, `maxItems` violations are 422 Invalid
  naming the field; status writes validated against the status schema;
- `fieldValidation=Strict` refuses unknown fields (400) instead of pruning them;
- one global, increasing resourceVersion counter, never "0";
- get: 404 NotFound Status with details; unknown resources are 404 too;
- list: items and the list's resourceVersion, namespaced and across namespaces; label selectors
  (equality, inequality, existence, absence, set membership), field selectors; limit/continue;
- PUT: changes metadata and spec but not status; spec changes bump generation, metadata changes
  do not; stale resourceVersion is 409 Conflict; a missing one is 422 (custom resources never
  allow unconditional updates);
- PUT /status: changes only status; stale resourceVersion is 409;
- PATCH: the client sends merge patch by default; merge patch and JSON patch on main and status
  endpoints; a resourceVersion in a merge patch is a precondition; strategic merge patch is 415;
  a failing JSON patch test is 422;
- no-op writes keep the resourceVersion and emit no event;
- DELETE: answers the object, emits DELETED, 404 when missing; preconditions; finalizers;
- watch: chunked newline-delimited events; from a resourceVersion, exactly the later events;
  from "0"/absent, synthetic ADDED events then live ones; 410 Expired ERROR event when the
  history was forgotten or has moved on; timeoutSeconds ends the stream cleanly; bookmarks while
  idle and right before a timeout; namespace and label-selector filtering (objects entering or
  leaving the selection are ADDED/DELETED); all-namespaces watches; a resourceVersion the
  server has not reached is 504 ResourceVersionTooLarge;
- controls: fail_next with Retry-After (and the client's own retry of GETs), drop_watches,
  require_token (401), stop/start keeping objects, in-process status writes, the request log;
- transport: keep-alive (one connection for many requests, Content-Length), Nagle off;
- leases: create, read, update (409 when stale), strategic merge patch, delete, list, watch.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.watch import Watch

from tests.kubeapi.server import KubeApiServer

G, V = "agentprimitives.authzed.com", "v1alpha1"
NS = "team"
REQUESTS = "subagentrequests"
SESSIONS = "agentsessions"
CHANNELS = "channels"
ITEM_PATH = f"/apis/{G}/{V}/namespaces/{NS}/{REQUESTS}"


def request_body(
    name: str,
    *,
    namespace: str | None = None,
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A valid SubagentRequest; keyword arguments override spec fields (None removes one)."""
    full_spec: dict[str, Any] = {
        "parent": {"namespace": NS, "name": "root"},
        "class": "researcher",
        "task": "summarise the logs",
        "dataSlots": [{"slot": "logs", "tagID": "tag-logs"}],
    }
    for key, value in spec.items():
        key = "class" if key == "class_" else key
        if value is None:
            full_spec.pop(key, None)
        else:
            full_spec[key] = value
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    if labels:
        metadata["labels"] = labels
    return {
        "apiVersion": f"{G}/{V}",
        "kind": "SubagentRequest",
        "metadata": metadata,
        "spec": full_spec,
    }


def status_of(error: ApiException) -> dict[str, Any]:
    """The Status body of a failed call."""
    return json.loads(error.body)


@pytest.fixture
def custom(kube_api_client: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(kube_api_client)


@pytest.fixture
def coordination(kube_api_client: client.ApiClient) -> client.CoordinationV1Api:
    return client.CoordinationV1Api(kube_api_client)


def create(custom: client.CustomObjectsApi, name: str, **kwargs: Any) -> dict[str, Any]:
    return custom.create_namespaced_custom_object(G, V, NS, REQUESTS, request_body(name, **kwargs))


def get(custom: client.CustomObjectsApi, name: str) -> dict[str, Any]:
    return custom.get_namespaced_custom_object(G, V, NS, REQUESTS, name)


def list_rv(custom: client.CustomObjectsApi) -> str:
    return custom.list_namespaced_custom_object(G, V, NS, REQUESTS)["metadata"]["resourceVersion"]


def watch(
    function: Callable[..., Any],
    *args: Any,
    until: Callable[[list[dict[str, Any]]], bool] | None = None,
    **kwargs: Any,
) -> list[dict[str, Any]]:
    """Events of one watch, until the server ends it (pass timeout_seconds) or `until(events)`."""
    kwargs.setdefault("timeout_seconds", 10)
    kwargs.setdefault("_request_timeout", 30)
    watcher, events = Watch(), []
    for event in watcher.stream(function, *args, **kwargs):
        events.append(event)
        if until is not None and until(events):
            watcher.stop()
            break
    return events


def caught_up(
    kube: KubeApiServer, function: Callable[..., Any], *args: Any, **kwargs: Any
) -> list[dict[str, Any]]:
    """Events of a watch up to its first BOOKMARK, without the bookmark. A bookmark carries the
    current resourceVersion and follows every event up to it, so this is exactly what the watch
    delivers from its start until now, with no clock involved."""
    kube.bookmark_interval = 0.02
    events = watch(
        function,
        *args,
        allow_watch_bookmarks=True,
        until=lambda events: events[-1]["type"] == "BOOKMARK",
        **kwargs,
    )
    assert events and events[-1]["type"] == "BOOKMARK", "the watch ended before a bookmark"
    return events[:-1]


def summary(events: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    return [(e["type"], e["raw_object"]["metadata"].get("name")) for e in events]


# ---------------------------------------------------------------------------------- discovery


def test_version_reports_a_kubernetes_1_32_server(kube_api_client: client.ApiClient) -> None:
    info = client.VersionApi(kube_api_client).get_code()
    assert (info.major, info.minor) == ("1", "32")


def test_discovery_lists_each_platform_resource_with_its_status_subresource(
    kube_api_client: client.ApiClient,
) -> None:
    groups = client.ApisApi(kube_api_client).get_api_versions()
    assert {g.name for g in groups.groups} >= {G, "coordination.k8s.io"}
    resources = client.CustomObjectsApi(kube_api_client).get_api_resources(G, V)
    by_name = {r.name: r for r in resources.resources}
    assert set(by_name) == {
        "subagentrequests",
        "subagentrequests/status",
        "agentsessions",
        "agentsessions/status",
        "channels",
        "channels/status",
    }
    request = by_name["subagentrequests"]
    assert (request.kind, request.singular_name, request.namespaced) == (
        "SubagentRequest",
        "subagentrequest",
        True,
    )
    assert request.short_names == ["subreq"]
    assert {"get", "list", "watch", "create", "update", "patch", "delete"} <= set(request.verbs)
    assert by_name["agentsessions"].short_names == ["agses"]
    assert by_name["channels"].short_names == ["apch"]
    assert set(by_name["subagentrequests/status"].verbs) == {"get", "patch", "update"}
    leases = client.CoordinationV1Api(kube_api_client).get_api_resources()
    assert [(r.name, r.kind) for r in leases.resources] == [("leases", "Lease")]


def test_aggregated_discovery_is_answered_when_the_accept_header_asks_for_it(
    kube: KubeApiServer, kube_api_client: client.ApiClient
) -> None:
    accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
    response = kube_api_client.rest_client.request(
        "GET", f"{kube.url}/apis", headers={"Accept": accept}, _request_timeout=10
    )
    assert response.getheader("Content-Type") == (
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    )
    document = json.loads(response.read())
    group = next(i for i in document["items"] if i["metadata"]["name"] == G)
    resources = {r["resource"]: r for r in group["versions"][0]["resources"]}
    assert resources["subagentrequests"]["responseKind"]["kind"] == "SubagentRequest"
    assert resources["subagentrequests"]["scope"] == "Namespaced"
    assert resources["subagentrequests"]["subresources"][0]["subresource"] == "status"


# ---------------------------------------------------------------------------------- create


def test_create_answers_201_and_assigns_uid_timestamp_generation_and_resource_version(
    custom: client.CustomObjectsApi,
) -> None:
    # *_with_http_info answers (data, status code, headers) in this client.
    data, code, _ = custom.create_namespaced_custom_object_with_http_info(
        G, V, NS, REQUESTS, request_body("r1")
    )
    assert code == 201
    meta = data["metadata"]
    assert meta["uid"] and meta["resourceVersion"].isdigit()
    assert meta["generation"] == 1
    datetime.strptime(meta["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ")
    assert get(custom, "r1") == data


def test_creating_a_duplicate_name_is_409_already_exists(custom: client.CustomObjectsApi) -> None:
    create(custom, "r1")
    with pytest.raises(ApiException) as caught:
        create(custom, "r1")
    status = status_of(caught.value)
    assert (caught.value.status, status["reason"], status["code"]) == (409, "AlreadyExists", 409)
    assert status["details"] == {"name": "r1", "group": G, "kind": REQUESTS}


def test_the_namespace_defaults_to_the_one_in_the_url(custom: client.CustomObjectsApi) -> None:
    created = create(custom, "r1")
    assert created["metadata"]["namespace"] == NS


def test_a_namespace_in_the_body_that_differs_from_the_url_is_400(
    custom: client.CustomObjectsApi,
) -> None:
    with pytest.raises(ApiException) as caught:
        create(custom, "r1", namespace="elsewhere")
    assert caught.value.status == 400


def test_status_in_a_create_body_is_ignored(custom: client.CustomObjectsApi) -> None:
    body = request_body("r1")
    body["status"] = {"phase": "Succeeded"}
    created = custom.create_namespaced_custom_object(G, V, NS, REQUESTS, body)
    assert "status" not in created
    assert "status" not in get(custom, "r1")


def test_generate_name_gives_each_object_a_unique_name(custom: client.CustomObjectsApi) -> None:
    body = request_body("ignored")
    body["metadata"] = {"generateName": "req-"}
    names = {custom.create_namespaced_custom_object(G, V, NS, REQUESTS, body)["metadata"]["name"]}
    names.add(custom.create_namespaced_custom_object(G, V, NS, REQUESTS, body)["metadata"]["name"])
    assert len(names) == 2 and all(n.startswith("req-") and len(n) == 9 for n in names)


# ---------------------------------------------------------------------------------- schema


def test_fields_absent_from_the_schema_are_pruned_on_create(
    custom: client.CustomObjectsApi,
) -> None:
    body = request_body("r1", labels={"team": "a"})
    body["spec"]["bogus"] = "dropped"
    body["spec"]["dataSlots"][0]["datum"] = "never stored"
    body["spec"]["parent"]["uid"] = "dropped"
    body["extra"] = {"top": "level"}
    body["metadata"]["annotations"] = {"kept": "yes"}
    body["metadata"]["notObjectMeta"] = "dropped"
    created = custom.create_namespaced_custom_object(G, V, NS, REQUESTS, body)
    assert created["spec"] == request_body("r1")["spec"]
    assert "extra" not in created
    assert "notObjectMeta" not in created["metadata"]
    assert created["metadata"]["labels"] == {"team": "a"}
    assert created["metadata"]["annotations"] == {"kept": "yes"}
    assert get(custom, "r1") == created


def test_fields_absent_from_the_schema_are_pruned_on_update_and_patch(
    custom: client.CustomObjectsApi,
) -> None:
    created = create(custom, "r1")
    created["spec"]["bogus"] = 1
    replaced = custom.replace_namespaced_custom_object(G, V, NS, REQUESTS, "r1", created)
    assert "bogus" not in replaced["spec"]
    patched = custom.patch_namespaced_custom_object_status(
        G, V, NS, REQUESTS, "r1", {"status": {"phase": "Pending", "secret": "x"}}
    )
    assert patched["status"] == {"phase": "Pending"}


def test_strict_field_validation_refuses_unknown_fields_instead_of_pruning_them(
    custom: client.CustomObjectsApi,
) -> None:
    body = request_body("r1")
    body["spec"]["bogus"] = 1
    with pytest.raises(ApiException) as caught:
        custom.create_namespaced_custom_object(G, V, NS, REQUESTS, body, field_validation="Strict")
    assert caught.value.status == 400
    assert 'unknown field "spec.bogus"' in status_of(caught.value)["message"]


def test_schema_defaults_are_applied(custom: client.CustomObjectsApi) -> None:
    body = {"apiVersion": f"{G}/{V}", "kind": "Channel", "metadata": {"name": "web"}}
    body["spec"] = {"kind": "browser"}
    created = custom.create_namespaced_custom_object(G, V, NS, CHANNELS, body)
    assert created["spec"] == {"kind": "browser", "role": "both"}


@pytest.mark.parametrize(
    ("spec", "field", "reason"),
    [
        ({"task": None}, "spec.task", "FieldValueRequired"),
        ({"mode": "forever"}, "spec.mode", "FieldValueNotSupported"),
        ({"task": 42}, "spec.task", "FieldValueTypeInvalid"),
        (
            {"dataSlots": [{"slot": "Logs", "tagID": "t"}]},
            "spec.dataSlots[0].slot",
            "FieldValueInvalid",
        ),
        ({"dataSlots": [{"slot": "logs"}]}, "spec.dataSlots[0].tagID", "FieldValueRequired"),
        ({"task": "x" * 8193}, "spec.task", "FieldValueTooLong"),
        ({"class_": ""}, "spec.class", "FieldValueInvalid"),
        (
            {"dataSlots": [{"slot": f"s{i}", "tagID": "t"} for i in range(33)]},
            "spec.dataSlots",
            "FieldValueTooMany",
        ),
    ],
    ids=[
        "required",
        "enum",
        "type",
        "pattern",
        "nested-required",
        "maxLength",
        "minLength",
        "maxItems",
    ],
)
def test_a_schema_violation_is_422_invalid_naming_the_field(
    custom: client.CustomObjectsApi, spec: dict[str, Any], field: str, reason: str
) -> None:
    with pytest.raises(ApiException) as caught:
        create(custom, "r1", **spec)
    status = status_of(caught.value)
    assert (caught.value.status, status["reason"]) == (422, "Invalid")
    assert status["message"].startswith(f'SubagentRequest.{G} "r1" is invalid: {field}: ')
    assert status["details"]["causes"] == [
        {"reason": reason, "field": field, "message": status["details"]["causes"][0]["message"]}
    ]
    assert custom.list_namespaced_custom_object(G, V, NS, REQUESTS)["items"] == []


def test_a_spec_that_the_crd_requires_cannot_be_left_out(custom: client.CustomObjectsApi) -> None:
    body = request_body("r1")
    del body["spec"]
    with pytest.raises(ApiException) as caught:
        custom.create_namespaced_custom_object(G, V, NS, REQUESTS, body)
    assert status_of(caught.value)["details"]["causes"][0]["field"] == "spec"


def test_status_writes_are_validated_against_the_status_schema(
    custom: client.CustomObjectsApi,
) -> None:
    create(custom, "r1")
    with pytest.raises(ApiException) as caught:
        custom.patch_namespaced_custom_object_status(
            G, V, NS, REQUESTS, "r1", {"status": {"approvedDataSlots": [{"slot": "logs"}]}}
        )
    assert caught.value.status == 422
    causes = status_of(caught.value)["details"]["causes"]
    assert [c["field"] for c in causes] == ["status.approvedDataSlots[0].tagID"]


# ---------------------------------------------------------------------------------- versions


def test_resource_versions_come_from_one_global_increasing_counter(
    custom: client.CustomObjectsApi, coordination: client.CoordinationV1Api
) -> None:
    first = create(custom, "r1")["metadata"]["resourceVersion"]
    session = {"apiVersion": f"{G}/{V}", "kind": "AgentSession", "metadata": {"name": "s1"}}
    second = custom.create_namespaced_custom_object(G, V, NS, SESSIONS, session)
    lease = coordination.create_namespaced_lease(
        NS, client.V1Lease(metadata=client.V1ObjectMeta(name="leader"))
    )
    third = custom.patch_namespaced_custom_object(
        G, V, NS, REQUESTS, "r1", {"metadata": {"labels": {"a": "b"}}}
    )
    versions = [
        int(first),
        int(second["metadata"]["resourceVersion"]),
        int(lease.metadata.resource_version),
        int(third["metadata"]["resourceVersion"]),
    ]
    assert versions == sorted(set(versions))
    assert list_rv(custom) == str(versions[-1])


def test_a_fresh_server_never_lists_resource_version_zero(tmp_path: Any) -> None:
    # "0" means "any version" to a watch: etcd revisions, hence resourceVersions, start at 1.
    with KubeApiServer() as fresh:
        api = config.new_client_from_config(
            config_file=str(fresh.write_kubeconfig(tmp_path / "fresh.yaml"))
        )
        try:
            listing = client.CustomObjectsApi(api).list_namespaced_custom_object(G, V, NS, REQUESTS)
        finally:
            api.close()
    assert int(listing["metadata"]["resourceVersion"]) >= 1


# ---------------------------------------------------------------------------------- get


def test_getting_a_missing_object_is_a_404_not_found_status(
    custom: client.CustomObjectsApi,
) -> None:
    with pytest.raises(ApiException) as caught:
        get(custom, "nobody")
    assert caught.value.status == 404
    assert status_of(caught.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'subagentrequests.{G} "nobody" not found',
        "reason": "NotFound",
        "details": {"name": "nobody", "group": G, "kind": REQUESTS},
        "code": 404,
    }


def test_an_unknown_resource_is_a_404_status(custom: client.CustomObjectsApi) -> None:
    with pytest.raises(ApiException) as caught:
        custom.list_namespaced_custom_object(G, V, NS, "agentclasses")
    status = status_of(caught.value)
    assert (caught.value.status, status["kind"], status["reason"]) == (404, "Status", "NotFound")


# ---------------------------------------------------------------------------------- list


def test_a_list_returns_the_items_and_the_lists_resource_version(
    custom: client.CustomObjectsApi,
) -> None:
    create(custom, "r2")
    last = create(custom, "r1")
    custom.create_namespaced_custom_object(
        G, V, "elsewhere", REQUESTS, request_body("r3", namespace="elsewhere")
    )
    listing = custom.list_namespaced_custom_object(G, V, NS, REQUESTS)
    assert listing["kind"] == "SubagentRequestList"
    assert [i["metadata"]["name"] for i in listing["items"]] == ["r1", "r2"]
    assert int(listing["metadata"]["resourceVersion"]) > int(last["metadata"]["resourceVersion"])


def test_a_list_across_all_namespaces_returns_every_namespace(
    custom: client.CustomObjectsApi,
) -> None:
    create(custom, "r1")
    custom.create_namespaced_custom_object(
        G, V, "elsewhere", REQUESTS, request_body("r2", namespace="elsewhere")
    )
    listing = custom.list_custom_object_for_all_namespaces(G, V, REQUESTS)
    found = [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in listing["items"]]
    assert found == [("elsewhere", "r2"), (NS, "r1")]
    assert listing["metadata"]["resourceVersion"]


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("team=a", ["a1", "a2"]),
        ("team==a,tier=gold", ["a1"]),
        ("team!=a", ["b1", "none"]),
        ("tier", ["a1", "b1"]),
        ("!tier", ["a2", "none"]),
        ("team in (a,b),tier", ["a1", "b1"]),
        ("team notin (a)", ["b1", "none"]),
    ],
)
def test_label_selectors_filter_lists(
    custom: client.CustomObjectsApi, selector: str, expected: list[str]
) -> None:
    create(custom, "a1", labels={"team": "a", "tier": "gold"})
    create(custom, "a2", labels={"team": "a"})
    create(custom, "b1", labels={"team": "b", "tier": "silver"})
    create(custom, "none")
    listing = custom.list_namespaced_custom_object(G, V, NS, REQUESTS, label_selector=selector)
    assert [i["metadata"]["name"] for i in listing["items"]] == expected


def test_a_malformed_label_selector_is_400(custom: client.CustomObjectsApi) -> None:
    with pytest.raises(ApiException) as caught:
        custom.list_namespaced_custom_object(G, V, NS, REQUESTS, label_selector="a=b=c d")
    assert caught.value.status == 400


def test_a_field_selector_on_the_name_filters_lists(custom: client.CustomObjectsApi) -> None:
    create(custom, "r1")
    create(custom, "r2")
    listing = custom.list_namespaced_custom_object(
        G, V, NS, REQUESTS, field_selector="metadata.name=r2"
    )
    assert [i["metadata"]["name"] for i in listing["items"]] == ["r2"]


def test_limit_and_continue_page_through_one_consistent_list(
    custom: client.CustomObjectsApi,
) -> None:
    for name in ("r1", "r2", "r3"):
        create(custom, name)
    first = custom.list_namespaced_custom_object(G, V, NS, REQUESTS, limit=2)
    create(custom, "r0")  # after the first page: not part of this list
    rest = custom.list_namespaced_custom_object(
        G, V, NS, REQUESTS, limit=2, _continue=first["metadata"]["continue"]
    )
    names = [i["metadata"]["name"] for i in first["items"] + rest["items"]]
    assert names == ["r1", "r2", "r3"]
    assert first["metadata"]["remainingItemCount"] == 1
    assert "continue" not in rest["metadata"]
    assert rest["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]


# ---------------------------------------------------------------------------------- PUT


def test_put_changes_labels_annotations_and_spec_but_not_status(
    custom: client.CustomObjectsApi,
) -> None:
    create(custom, "r1")
    custom.patch_namespaced_custom_object_status(
        G, V, NS, REQUESTS, "r1", {"status": {"phase": "Pending"}}
    )
    current = get(custom, "r1")
    current["metadata"]["labels"] = {"team": "a"}
    current["metadata"]["annotations"] = {"note": "hi"}
    current["spec"]["task"] = "a new task"
    current["status"] = {"phase": "Succeeded"}
    replaced = custom.replace_namespaced_custom_object(G, V, NS, REQUESTS, "r1", current)
    assert replaced["metadata"]["labels"] == {"team": "a"}
    assert replaced["metadata"]["annotations"] == {"note": "hi"}
    assert replaced["spec"]["task"] == "a new task"
    assert replaced["status"] == {"phase": "Pending"}
    assert get(custom, "r1") == replaced


def test_a_spec_change_bumps_generation_and_a_metadata_change_does_not(
    custom: client.CustomObjectsApi,
) -> None:
    created = create(custom, "r1")
    created["metadata"]["labels"] = {"team": "a"}
    relabelled = custom.replace_namespaced_custom_object(G, V, NS, REQUESTS, "r1", created)
    assert relabelled["metadata"]["generation"] == 1
    relabelled["spec"]["task"] = "changed"
    respecced = custom.replace_namespaced_custom_object(G, V, NS, REQUESTS, "r1", relabelled)
    assert respecced["metadata"]["generation"] == 2
    status = custom.patch_namespaced_custom_object_status(
        G, V, NS, REQUESTS, "r1", {"status": {"phase": "Running"}}
    )
    assert status["metadata"]["generation"] == 2


def test_put_with_a_stale_resource_version_is_409_conflict(
    custom: client.CustomObjectsApi,
) -> None:
    stale = create(custom, "r1")
    custom.patch_namespaced_custom_object(G, V, NS, REQUESTS, "r1", {"spec": {"task": "newer"}})
    stale["spec"]["task"] = "lost update"
    with pytest.raises(ApiException) as caught:
        custom.replace_namespaced_custom_object(G, V, NS, REQUESTS, "r1", stale)
    status = status_of(caught.value)
    assert (caught.value.status, status["reason"]) == (409, "Conflict")
    assert "the object has been modified" in status["message"]
    assert get(custom, "r1")["spec"]["task"] == "newer"


def test_put_without_a_resource_version_is_refused_as_for_every_custom_resource(
    custom: client.CustomObjectsApi,
) -> None:
    # The CRD strategy's AllowUnconditionalUpdate() is false: the API server requires it.
    body = create(custom, "r1")
    del body["metadata"]["resourceVersion"]
    body["spec"]["task"] = "blind write"
    with pytest.raises(ApiException) as caught:
        custom.replace_namespaced_custom_object(G, V, NS, REQUESTS, "r1", body)
    status = status_of(caught.value)
    assert (caught.value.status, status["reason"]) == (422, "Invalid")
    assert "metadata.resourceVersion" in status["message"]
    assert "must be specified for an update" in status["message"]


def test_put_to_a_missing_custom_resource_is_404_not_a_create(
    custom: client.CustomObjectsApi,
) -> None:
    body = request_body("r1")
    body["metadata"]["resourceVersion"] = "1"
    with pytest.raises(ApiException) as caught:
        custom.replace_namespaced_custom_object(G, V, NS, REQUESTS, "r1", body)
    assert caught.value.status == 404


# ---------------------------------------------------------------------------------- PUT /status


def test_put_on_status_changes_only_the_status(custom: client.CustomObjectsApi) -> None:
    current = create(custom, "r1")
    current["spec"]["task"] = "ignored"
    current["metadata"]["labels"] = {"ignored": "yes"}
    current["status"] = {"phase": "AwaitingDisclosure"}
    written = custom.replace_namespaced_custom_object_status(G, V, NS, REQUESTS, "r1", current)
    assert written["status"] == {"phase": "AwaitingDisclosure"}
    assert written["spec"]["task"] == "summarise the logs"
    assert "labels" not in written["metadata"]
    assert written["metadata"]["generation"] == 1
    assert get(custom, "r1") == written


def test_put_on_status_with_a_stale_resource_version_is_409_conflict(
    custom: client.CustomObjectsApi,
) -> None:
    stale = create(custom, "r1")
    custom.patch_namespaced_custom_object_status(
        G, V, NS, REQUESTS, "r1", {"status": {"phase": "Pending"}}
    )
    stale["status"] = {"approvedDataSlots": [{"slot": "logs", "tagID": "tag-logs"}]}
    with pytest.raises(ApiException) as caught:
        custom.replace_namespaced_custom_object_status(G, V, NS, REQUESTS, "r1", stale)
    assert (caught.value.status, status_of(caught.value)["reason"]) == (409, "Conflict")
    assert get(custom, "r1")["status"] == {"phase": "Pending"}


# ---------------------------------------------------------------------------------- PATCH


def test_the_client_sends_merge_patch_by_default_to_both_endpoints(
    kube: KubeApiServer, custom: client.CustomObjectsApi
) -> None:
    create(custom, "r1")
    custom.patch_namespaced_custom_object(G, V, NS, REQUESTS, "r1", {"spec": {"task": "t2"}})
    custom.patch_namespaced_custom_object_status(
        G, V, NS, REQUESTS, "r1", {"status": {"phase": "Pending"}}
    )
    patches = kube.requests(method="PATCH")
    assert [(p.path, p.content_type) for p in patches] == [
        (f"{ITEM_PATH}/r1", "application/merge-patch+json"),
        (f"{ITEM_PATH}/r1/status", "application/merge-patch+json"),
    ]


def test_a_merge_patch_merges_objects_and_null_removes_a_field(
    custom: client.CustomObjectsApi,
) -> None:
    create(custom, "r1", mode="task", labels={"a": "1", "b": "2"})
    patched = custom.patch_namespaced_custom_object(
        G,
        V,
        NS,
        REQUESTS,
        "r1",
        {"metadata": {"labels": {"a": None, "c": "3"}}, "spec": {"mode": None, "task": "t2"}},
    )
    assert patched["metadata"]["labels"] == {"b": "2", "c": "3"}
    assert "mode" not in patched["spec"]
    assert patched["spec"]["task"] == "t2"
    assert patched["spec"]["class"] == "researcher"


def test_a_json_patch_applies_to_the_main_and_status_endpoints(
    custom: client.CustomObjectsApi,
) -> None:
    create(custom, "r1")
    patched = custom.patch_namespaced_custom_object(
        G,
        V,
        NS,
        REQUESTS,
        "r1",
        [{"op": "replace", "path": "/spec/task", "value": "t2"}],
        _content_type="application/json-patch+json",
    )
    assert patched["spec"]["task"] == "t2"
    status = custom.patch_namespaced_custom_object_status(
        G,
        V,
        NS,
        REQUESTS,
        "r1",
        [
            {"op": "add", "path": "/status", "value": {"approvedDataSlots": []}},
            {
                "op": "add",
                "path": "/status/approvedDataSlots/-",
                "value": {"slot": "logs", "tagID": "tag-logs"},
            },
        ],
        _content_type="application/json-patch+json",
    )
    assert status["status"] == {"approvedDataSlots": [{"slot": "logs", "tagID": "tag-logs"}]}


def test_a_failing_json_patch_test_operation_is_422_and_changes_nothing(
    custom: client.CustomObjectsApi,
) -> None:
    created = create(custom, "r1")
    with pytest.raises(ApiException) as caught:
        custom.patch_namespaced_custom_object(
            G,
            V,
            NS,
            REQUESTS,
            "r1",
            [
                {"op": "test", "path": "/spec/task", "value": "something else"},
                {"op": "replace", "path": "/spec/task", "value": "t2"},
            ],
            _content_type="application/json-patch+json",
        )
    assert caught.value.status == 422
    assert get(custom, "r1") == created


def test_a_resource_version_in_a_merge_patch_is_a_precondition(
    custom: client.CustomObjectsApi,
) -> None:
    rv = create(custom, "r1")["metadata"]["resourceVersion"]
    approve = {"status": {"approvedDataSlots": [{"slot": "logs", "tagID": "tag-logs"}]}}
    written = custom.patch_namespaced_custom_object_status(
        G, V, NS, REQUESTS, "r1", {"metadata": {"resourceVersion": rv}, **approve}
    )
    assert written["status"] == approve["status"]
    deny = {"status": {"deniedDataSlots": [{"slot": "logs", "tagID": "tag-logs"}]}}
    with pytest.raises(ApiException) as caught:
        custom.patch_namespaced_custom_object_status(
            G, V, NS, REQUESTS, "r1", {"metadata": {"resourceVersion": rv}, **deny}
        )
    assert (caught.value.status, status_of(caught.value)["reason"]) == (409, "Conflict")
    assert get(custom, "r1")["status"] == approve["status"]


def test_a_strategic_merge_patch_on_a_custom_resource_is_415(
    custom: client.CustomObjectsApi,
) -> None:
    create(custom, "r1")
    with pytest.raises(ApiException) as caught:
        custom.patch_namespaced_custom_object(
            G,
            V,
            NS,
            REQUESTS,
            "r1",
            {"spec": {"task": "t2"}},
            _content_type="application/strategic-merge-patch+json",
        )
    status = status_of(caught.value)
    assert (caught.value.status, status["reason"]) == (415, "UnsupportedMediaType")
    assert get(custom, "r1")["spec"]["task"] == "summarise the logs"


# ---------------------------------------------------------------------------------- no-op


def test_a_no_op_write_keeps_the_resource_version_and_emits_no_event(
    kube: KubeApiServer,
    custom: client.CustomObjectsApi,
) -> None:
    created = create(custom, "r1")
    rv = created["metadata"]["resourceVersion"]
    same = custom.replace_namespaced_custom_object(G, V, NS, REQUESTS, "r1", created)
    assert same["metadata"]["resourceVersion"] == rv
    patched = custom.patch_namespaced_custom_object(
        G, V, NS, REQUESTS, "r1", {"spec": {"task": "summarise the logs"}}
    )
    assert patched["metadata"]["resourceVersion"] == rv
    # Status written through the main endpoint is ignored: nothing changes.
    ignored = custom.patch_namespaced_custom_object(
        G, V, NS, REQUESTS, "r1", {"status": {"phase": "Failed"}}
    )
    assert ignored["metadata"]["resourceVersion"] == rv
    real = custom.patch_namespaced_custom_object(G, V, NS, REQUESTS, "r1", {"spec": {"task": "t2"}})
    assert real["metadata"]["resourceVersion"] == str(int(rv) + 1)
    events = caught_up(
        kube,
        custom.list_namespaced_custom_object,
        G,
        V,
        NS,
        REQUESTS,
        resource_version=rv,
    )
    assert [(e["type"], e["raw_object"]["metadata"]["resourceVersion"]) for e in events] == [
        ("MODIFIED", real["metadata"]["resourceVersion"])
    ]


# ---------------------------------------------------------------------------------- DELETE


def test_delete_answers_the_object_and_emits_a_deleted_event(
    kube: KubeApiServer,
    custom: client.CustomObjectsApi,
) -> None:
    created = create(custom, "r1")
    data, code, _ = custom.delete_namespaced_custom_object_with_http_info(G, V, NS, REQUESTS, "r1")
    assert code == 200
    assert data["metadata"]["uid"] == created["metadata"]["uid"]
    with pytest.raises(ApiException) as caught:
        get(custom, "r1")
    assert caught.value.status == 404
    events = caught_up(
        kube,
        custom.list_namespaced_custom_object,
        G,
        V,
        NS,
        REQUESTS,
        resource_version=created["metadata"]["resourceVersion"],
    )
    assert summary(events) == [("DELETED", "r1")]
    assert int(events[0]["raw_object"]["metadata"]["resourceVersion"]) > int(
        created["metadata"]["resourceVersion"]
    )


def test_deleting_a_missing_object_is_404(custom: client.CustomObjectsApi) -> None:
    with pytest.raises(ApiException) as caught:
        custom.delete_namespaced_custom_object(G, V, NS, REQUESTS, "nobody")
    assert (caught.value.status, status_of(caught.value)["reason"]) == (404, "NotFound")


def test_a_delete_with_a_stale_resource_version_precondition_is_409(
    custom: client.CustomObjectsApi,
) -> None:
    rv = create(custom, "r1")["metadata"]["resourceVersion"]
    custom.patch_namespaced_custom_object(G, V, NS, REQUESTS, "r1", {"spec": {"task": "t2"}})
    options = client.V1DeleteOptions(preconditions=client.V1Preconditions(resource_version=rv))
    with pytest.raises(ApiException) as caught:
        custom.delete_namespaced_custom_object(G, V, NS, REQUESTS, "r1", body=options)
    assert caught.value.status == 409
    assert get(custom, "r1")


def test_an_object_with_finalizers_is_deleted_once_they_are_removed(
    custom: client.CustomObjectsApi,
) -> None:
    body = request_body("r1")
    body["metadata"]["finalizers"] = ["agentprimitives.authzed.com/cleanup"]
    custom.create_namespaced_custom_object(G, V, NS, REQUESTS, body)
    pending = custom.delete_namespaced_custom_object(G, V, NS, REQUESTS, "r1")
    assert pending["metadata"]["deletionTimestamp"]
    assert get(custom, "r1")["metadata"]["deletionTimestamp"]
    custom.patch_namespaced_custom_object(
        G, V, NS, REQUESTS, "r1", {"metadata": {"finalizers": None}}
    )
    with pytest.raises(ApiException) as caught:
        get(custom, "r1")
    assert caught.value.status == 404


# ---------------------------------------------------------------------------------- watch


def test_watch_events_are_newline_delimited_json_in_a_chunked_stream(
    kube: KubeApiServer, kube_api_client: client.ApiClient, custom: client.CustomObjectsApi
) -> None:
    create(custom, "r1")
    # watch=1 is as good as watch=true (the API server parses it as a Go bool).
    response = kube_api_client.rest_client.request(
        "GET", f"{kube.url}{ITEM_PATH}?watch=1&timeoutSeconds=1", _request_timeout=30
    )
    assert response.getheader("Transfer-Encoding") == "chunked"
    assert response.getheader("Content-Length") is None
    events = [json.loads(line) for line in response.read().decode().splitlines()]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "r1")]


def test_a_watch_from_a_resource_version_replays_exactly_the_later_events(
    kube: KubeApiServer,
    custom: client.CustomObjectsApi,
) -> None:
    create(custom, "r1")
    start = create(custom, "r2")["metadata"]["resourceVersion"]
    custom.patch_namespaced_custom_object(G, V, NS, REQUESTS, "r1", {"spec": {"task": "t2"}})
    create(custom, "r3")
    custom.delete_namespaced_custom_object(G, V, NS, REQUESTS, "r2")
    events = caught_up(
        kube,
        custom.list_namespaced_custom_object,
        G,
        V,
        NS,
        REQUESTS,
        resource_version=start,
    )
    assert summary(events) == [("MODIFIED", "r1"), ("ADDED", "r3"), ("DELETED", "r2")]
    versions = [int(e["raw_object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions == list(range(int(start) + 1, int(start) + 4))


@pytest.mark.parametrize("resource_version", [None, "0"], ids=["absent", "zero"])
def test_a_watch_without_a_resource_version_starts_with_the_current_objects_then_goes_live(
    kube: KubeApiServer, custom: client.CustomObjectsApi, resource_version: str | None
) -> None:
    create(custom, "r2")
    create(custom, "r1")
    extra = {"resource_version": resource_version} if resource_version else {}

    def until(events: list[dict[str, Any]]) -> bool:
        if len(events) == 2:  # the initial state is in: now change something
            kube.store.update_status(REQUESTS, NS, "r2", lambda s: {"phase": "Pending"})
        return len(events) == 3

    events = watch(custom.list_namespaced_custom_object, G, V, NS, REQUESTS, until=until, **extra)
    assert summary(events) == [("ADDED", "r1"), ("ADDED", "r2"), ("MODIFIED", "r2")]
    assert events[2]["raw_object"]["status"] == {"phase": "Pending"}


def test_a_watch_from_a_forgotten_resource_version_gets_one_410_expired_error_event(
    kube: KubeApiServer, custom: client.CustomObjectsApi
) -> None:
    old = create(custom, "r1")["metadata"]["resourceVersion"]
    create(custom, "r2")
    kube.forget_history()
    response = custom.list_namespaced_custom_object(
        G,
        V,
        NS,
        REQUESTS,
        watch=True,
        resource_version=old,
        timeout_seconds=5,
        _preload_content=False,
    )
    try:
        events = [json.loads(line) for line in response.read().decode().splitlines()]
    finally:
        response.release_conn()
    assert len(events) == 1
    event = events[0]
    assert event["type"] == "ERROR"
    assert {k: event["object"][k] for k in ("kind", "apiVersion", "status", "reason", "code")} == {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "reason": "Expired",
        "code": 410,
    }
    assert event["object"]["message"].startswith(f"too old resource version: {old}")
    with pytest.raises(ApiException) as caught:
        watch(custom.list_namespaced_custom_object, G, V, NS, REQUESTS, resource_version=old)
    assert caught.value.status == 410
    # The current resourceVersion is still good.
    assert (
        caught_up(
            kube,
            custom.list_namespaced_custom_object,
            G,
            V,
            NS,
            REQUESTS,
            resource_version=list_rv(custom),
        )
        == []
    )


def test_a_watch_from_a_resource_version_the_server_has_not_reached_is_504(
    custom: client.CustomObjectsApi,
) -> None:
    future = str(int(list_rv(custom)) + 100)
    with pytest.raises(ApiException) as caught:
        watch(custom.list_namespaced_custom_object, G, V, NS, REQUESTS, resource_version=future)
    status = status_of(caught.value)
    assert (caught.value.status, status["reason"]) == (504, "Timeout")
    assert status["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"


def test_the_kept_history_is_bounded_so_old_resource_versions_expire(
    kube: KubeApiServer, custom: client.CustomObjectsApi
) -> None:
    kube.history_limit = 3
    versions = [create(custom, "r1")["metadata"]["resourceVersion"]]
    for task in ("t2", "t3", "t4", "t5"):
        patched = custom.patch_namespaced_custom_object(
            G, V, NS, REQUESTS, "r1", {"spec": {"task": task}}
        )
        versions.append(patched["metadata"]["resourceVersion"])
    with pytest.raises(ApiException) as caught:
        watch(
            custom.list_namespaced_custom_object, G, V, NS, REQUESTS, resource_version=versions[0]
        )
    assert caught.value.status == 410
    kept = caught_up(
        kube,
        custom.list_namespaced_custom_object,
        G,
        V,
        NS,
        REQUESTS,
        resource_version=versions[1],
    )
    assert [e["raw_object"]["metadata"]["resourceVersion"] for e in kept] == versions[2:]


def test_timeout_seconds_ends_the_stream_cleanly(custom: client.CustomObjectsApi) -> None:
    create(custom, "r1")
    events = watch(
        custom.list_namespaced_custom_object,
        G,
        V,
        NS,
        REQUESTS,
        resource_version=list_rv(custom),
        timeout_seconds=1,
    )
    assert events == []


def test_bookmarks_arrive_while_idle_and_carry_only_a_resource_version(
    kube: KubeApiServer, custom: client.CustomObjectsApi
) -> None:
    kube.bookmark_interval = 0.1
    create(custom, "r1")
    rv = list_rv(custom)
    events = watch(
        custom.list_namespaced_custom_object,
        G,
        V,
        NS,
        REQUESTS,
        resource_version=rv,
        allow_watch_bookmarks=True,
        until=lambda events: len(events) == 2,
    )
    assert [e["type"] for e in events] == ["BOOKMARK", "BOOKMARK"]
    for event in events:
        assert event["raw_object"] == {
            "apiVersion": f"{G}/{V}",
            "kind": "SubagentRequest",
            "metadata": {"resourceVersion": rv},
        }


def test_a_bookmark_is_sent_right_before_a_watch_times_out(
    kube: KubeApiServer, custom: client.CustomObjectsApi
) -> None:
    kube.bookmark_interval = 600  # only the closing bookmark can arrive
    create(custom, "r1")
    rv = list_rv(custom)
    events = watch(
        custom.list_namespaced_custom_object,
        G,
        V,
        NS,
        REQUESTS,
        resource_version=rv,
        allow_watch_bookmarks=True,
        timeout_seconds=1,
    )
    assert [(e["type"], e["raw_object"]["metadata"]["resourceVersion"]) for e in events] == [
        ("BOOKMARK", rv)
    ]


def test_a_watch_filters_by_namespace_and_label_selector_as_objects_enter_and_leave_it(
    kube: KubeApiServer, custom: client.CustomObjectsApi
) -> None:
    def writes() -> None:
        assert kube.wait_for_watches(1)
        create(custom, "a1", labels={"team": "a"})
        create(custom, "b1", labels={"team": "b"})
        custom.create_namespaced_custom_object(
            G,
            V,
            "elsewhere",
            REQUESTS,
            request_body("a2", namespace="elsewhere", labels={"team": "a"}),
        )
        custom.patch_namespaced_custom_object(
            G, V, NS, REQUESTS, "b1", {"metadata": {"labels": {"team": "a"}}}
        )
        custom.patch_namespaced_custom_object(
            G, V, NS, REQUESTS, "a1", {"metadata": {"labels": {"team": "b"}}}
        )

    writer = threading.Thread(target=writes)
    writer.start()
    try:
        events = watch(
            custom.list_namespaced_custom_object,
            G,
            V,
            NS,
            REQUESTS,
            resource_version=list_rv(custom),
            label_selector="team=a",
            until=lambda events: len(events) == 3,
        )
    finally:
        writer.join(timeout=10)
    assert summary(events) == [("ADDED", "a1"), ("ADDED", "b1"), ("DELETED", "a1")]
    # The object that left the selection is sent as it was, with the new resourceVersion.
    assert events[2]["raw_object"]["metadata"]["labels"] == {"team": "a"}


def test_a_watch_across_all_namespaces_sees_every_namespace(
    kube: KubeApiServer,
    custom: client.CustomObjectsApi,
) -> None:
    start = list_rv(custom)
    create(custom, "r1")
    custom.create_namespaced_custom_object(
        G, V, "elsewhere", REQUESTS, request_body("r2", namespace="elsewhere")
    )
    events = caught_up(
        kube,
        custom.list_custom_object_for_all_namespaces,
        G,
        V,
        REQUESTS,
        resource_version=start,
    )
    found = [
        (e["raw_object"]["metadata"]["namespace"], e["raw_object"]["metadata"]["name"])
        for e in events
    ]
    assert found == [(NS, "r1"), ("elsewhere", "r2")]


def _watch_in_background(
    custom: client.CustomObjectsApi,
) -> tuple[threading.Thread, dict[str, Any]]:
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["events"] = watch(
                custom.list_namespaced_custom_object,
                G,
                V,
                NS,
                REQUESTS,
                resource_version=list_rv(custom),
                timeout_seconds=30,
            )
        except Exception as error:
            outcome["error"] = error

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def test_drop_watches_cuts_every_open_watch_connection(
    kube: KubeApiServer, custom: client.CustomObjectsApi
) -> None:
    thread, outcome = _watch_in_background(custom)
    assert kube.wait_for_watches(1)
    assert kube.drop_watches() == 1
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert isinstance(outcome.get("error"), urllib3.exceptions.ProtocolError)
    assert kube.open_watches == 0


# ---------------------------------------------------------------------------------- controls


def test_fail_next_answers_matching_requests_with_the_status_and_retry_after(
    kube: KubeApiServer, custom: client.CustomObjectsApi
) -> None:
    kube.fail_next(1, 429, path_contains=f"/{REQUESTS}", method="POST", retry_after=7)
    with pytest.raises(ApiException) as caught:
        create(custom, "r1")
    assert caught.value.status == 429
    assert caught.value.headers["Retry-After"] == "7"
    status = status_of(caught.value)
    assert (status["reason"], status["code"], status["details"]) == (
        "TooManyRequests",
        429,
        {"retryAfterSeconds": 7},
    )
    assert create(custom, "r1")["metadata"]["name"] == "r1"


def test_fail_next_counts_only_requests_matching_its_method_and_path(
    kube: KubeApiServer, custom: client.CustomObjectsApi
) -> None:
    create(custom, "r1")
    kube.fail_next(2, 500, path_contains=f"{ITEM_PATH}/r1/status", method="PATCH")
    assert get(custom, "r1")
    for _ in range(2):
        with pytest.raises(ApiException) as caught:
            custom.patch_namespaced_custom_object_status(
                G, V, NS, REQUESTS, "r1", {"status": {"phase": "Pending"}}
            )
        assert (caught.value.status, status_of(caught.value)["reason"]) == (500, "InternalError")
    custom.patch_namespaced_custom_object_status(
        G, V, NS, REQUESTS, "r1", {"status": {"phase": "Pending"}}
    )
    assert [r.status for r in kube.requests(method="PATCH")] == [500, 500, 200]


def test_the_client_itself_retries_a_get_answered_503_with_retry_after(
    kube: KubeApiServer, custom: client.CustomObjectsApi
) -> None:
    # urllib3 (under the kubernetes client) retries GET/PUT/DELETE answered 413/429/503 with a
    # Retry-After header, up to 3 times, sleeping Retry-After seconds: callers never see those.
    create(custom, "r1")
    kube.fail_next(1, 503, path_contains=f"{ITEM_PATH}/r1", method="GET", retry_after=0)
    assert get(custom, "r1")["metadata"]["name"] == "r1"
    assert [r.status for r in kube.requests(method="GET", path=f"{ITEM_PATH}/r1")] == [503, 200]


def test_require_token_answers_401_to_requests_without_the_bearer_token(
    kube: KubeApiServer, custom: client.CustomObjectsApi, tmp_path: Any
) -> None:
    kube.require_token("s3cret")
    with pytest.raises(ApiException) as caught:
        custom.list_namespaced_custom_object(G, V, NS, REQUESTS)
    status = status_of(caught.value)
    assert (caught.value.status, status["reason"], status["code"]) == (401, "Unauthorized", 401)
    path = kube.write_kubeconfig(tmp_path / "with-token.yaml", token="s3cret")
    authorised = config.new_client_from_config(config_file=str(path))
    try:
        listing = client.CustomObjectsApi(authorised).list_namespaced_custom_object(
            G, V, NS, REQUESTS
        )
    finally:
        authorised.close()
    assert listing["items"] == []


def test_a_stopped_server_keeps_its_objects_and_restarts_on_the_same_port(
    kube: KubeApiServer, custom: client.CustomObjectsApi
) -> None:
    create(custom, "r1")
    port = kube.port
    kube.stop()
    with pytest.raises(urllib3.exceptions.MaxRetryError):
        get(custom, "r1")
    kube.start()
    assert kube.port == port
    assert get(custom, "r1")["metadata"]["name"] == "r1"


def test_stopping_the_server_ends_open_watches(
    kube: KubeApiServer, custom: client.CustomObjectsApi
) -> None:
    thread, outcome = _watch_in_background(custom)
    assert kube.wait_for_watches(1)
    kube.stop()
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert "error" in outcome
    kube.start()


def test_an_in_process_status_write_behaves_like_a_client_write(
    kube: KubeApiServer, custom: client.CustomObjectsApi
) -> None:
    rv = create(custom, "r1")["metadata"]["resourceVersion"]

    def mark_pending(status: dict[str, Any]) -> None:
        status["phase"] = "AwaitingDisclosure"
        status["pendingDataSlots"] = [{"slot": "logs", "tagID": "tag-logs"}]

    written = kube.store.update_status(REQUESTS, NS, "r1", mark_pending)
    assert written["status"]["phase"] == "AwaitingDisclosure"
    assert get(custom, "r1") == written
    assert kube.store.update_status(REQUESTS, NS, "r1", mark_pending) == written  # no-op
    events = caught_up(
        kube,
        custom.list_namespaced_custom_object,
        G,
        V,
        NS,
        REQUESTS,
        resource_version=rv,
    )
    assert [(e["type"], e["raw_object"]["metadata"]["resourceVersion"]) for e in events] == [
        ("MODIFIED", str(int(rv) + 1))
    ]


def test_the_request_log_counts_puts_to_a_path(
    kube: KubeApiServer, custom: client.CustomObjectsApi
) -> None:
    current = create(custom, "r1")
    for phase in ("Pending", "Running"):
        current["status"] = {"phase": phase}
        current = custom.replace_namespaced_custom_object_status(G, V, NS, REQUESTS, "r1", current)
    assert kube.count("PUT", path=f"{ITEM_PATH}/r1/status") == 2
    assert kube.count("PUT", path=f"{ITEM_PATH}/r1") == 0
    assert kube.count("POST", path_contains=REQUESTS) == 1


# ---------------------------------------------------------------------------------- transport


def test_keep_alive_serves_many_requests_on_one_connection(
    kube: KubeApiServer, custom: client.CustomObjectsApi
) -> None:
    create(custom, "r1")
    for _ in range(10):
        _, _, headers = custom.get_namespaced_custom_object_with_http_info(G, V, NS, REQUESTS, "r1")
        assert int(headers["Content-Length"]) > 0
    assert kube.accepted_connections == 1
    # The server checks every accepted socket for TCP_NODELAY and reports it otherwise.
    assert kube.internal_errors == []


# ---------------------------------------------------------------------------------- leases


def _lease(name: str, holder: str) -> client.V1Lease:
    return client.V1Lease(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1LeaseSpec(
            holder_identity=holder,
            lease_duration_seconds=15,
            acquire_time=datetime.now(UTC),
            renew_time=datetime.now(UTC),
            lease_transitions=0,
        ),
    )


def test_leases_can_be_created_read_renewed_and_deleted(
    kube: KubeApiServer, coordination: client.CoordinationV1Api
) -> None:
    _, code, _ = coordination.create_namespaced_lease_with_http_info(NS, _lease("leader", "pod-a"))
    assert code == 201
    lease = coordination.read_namespaced_lease("leader", NS)
    assert lease.spec.holder_identity == "pod-a"
    assert lease.spec.lease_duration_seconds == 15
    stale = coordination.read_namespaced_lease("leader", NS)
    lease.spec.renew_time = datetime.now(UTC)
    lease.spec.holder_identity = "pod-b"
    renewed = coordination.replace_namespaced_lease("leader", NS, lease)
    assert renewed.spec.holder_identity == "pod-b"
    assert int(renewed.metadata.resource_version) > int(stale.metadata.resource_version)
    with pytest.raises(ApiException) as caught:
        coordination.replace_namespaced_lease("leader", NS, stale)
    assert caught.value.status == 409
    patched = coordination.patch_namespaced_lease("leader", NS, {"spec": {"leaseTransitions": 1}})
    assert (patched.spec.lease_transitions, patched.spec.holder_identity) == (1, "pod-b")
    assert (
        kube.requests(method="PATCH")[-1].content_type == "application/strategic-merge-patch+json"
    )
    deleted = coordination.delete_namespaced_lease("leader", NS)  # a dict in this client
    assert (deleted["kind"], deleted["status"]) == ("Status", "Success")
    assert deleted["details"]["name"] == "leader"
    with pytest.raises(ApiException) as caught:
        coordination.read_namespaced_lease("leader", NS)
    assert caught.value.status == 404


def test_leases_are_listed_and_watched(
    kube: KubeApiServer, coordination: client.CoordinationV1Api
) -> None:
    start = coordination.list_namespaced_lease(NS).metadata.resource_version
    coordination.create_namespaced_lease(NS, _lease("leader", "pod-a"))
    listing = coordination.list_namespaced_lease(NS)
    assert [item.metadata.name for item in listing.items] == ["leader"]
    events = caught_up(kube, coordination.list_namespaced_lease, NS, resource_version=start)
    assert [(e["type"], e["object"].spec.holder_identity) for e in events] == [("ADDED", "pod-a")]
    assert events[0]["object"].metadata.resource_version == listing.metadata.resource_version
