"""Routing a human-directed prompt up the lineage (domain.md section 5), on trees built here."""

from __future__ import annotations

import pytest

from delegations.lineage import (
    DatabaseSessionReader,
    LineageCycle,
    ParentUnreadable,
    SessionRef,
    SessionView,
    UnknownKind,
    route_prompt,
)
from tests.factories import binding, session


class Tree:
    """An in-memory SessionReader: name -> (parent, outbound binding)."""

    def __init__(self, **sessions: tuple[str | None, dict | None]) -> None:
        self.sessions = sessions

    def read_session(self, ref: SessionRef) -> SessionView | None:
        if ref.name not in self.sessions:
            return None
        parent, outbound = self.sessions[ref.name]
        return SessionView(
            ref=ref,
            parent=SessionRef(ref.namespace, parent) if parent else None,
            outbound=outbound,
        )


def ref(name: str) -> SessionRef:
    return SessionRef("team", name)


def chain_names(route) -> list[str]:
    return [r.name for r in route.chain]


def test_a_session_bound_to_a_human_channel_receives_its_own_prompt_without_a_chain():
    route = route_prompt(ref("root"), Tree(root=(None, binding("web", "browser"))))
    assert route.binding == {"name": "web", "kind": "browser"}
    assert route.owner == ref("root")
    assert route.asking_chain == []


@pytest.mark.parametrize("kind", ["slack", "browser", "local", "fake"])
def test_every_human_kind_stops_the_walk(kind):
    tree = Tree(root=(None, binding("h", kind)), child=("root", binding("c", "agent")))
    assert route_prompt(ref("child"), tree).binding["kind"] == kind


@pytest.mark.parametrize("kind", ["agent", "bento", "github"])
def test_machine_kinds_are_climbed_past(kind):
    tree = Tree(root=(None, binding("web", "browser")), child=("root", binding("m", kind)))
    route = route_prompt(ref("child"), tree)
    assert route.owner == ref("root")
    assert route.asking_chain == [{"ns": "team", "name": "child"}, {"ns": "team", "name": "root"}]


def test_a_grandchild_prompt_reaches_the_root_with_the_whole_asking_chain():
    tree = Tree(
        root=(None, binding("web", "browser")),
        child=("root", binding("c", "agent")),
        grandchild=("child", binding("g", "agent")),
    )
    route = route_prompt(ref("grandchild"), tree)
    assert route.binding["name"] == "web"
    assert chain_names(route) == ["grandchild", "child", "root"]


def test_the_nearest_human_channel_wins_over_one_further_up():
    tree = Tree(
        root=(None, binding("web", "browser")),
        middle=("root", binding("team-slack", "slack")),
        leaf=("middle", binding("a", "agent")),
    )
    route = route_prompt(ref("leaf"), tree)
    assert (route.binding["name"], route.owner) == ("team-slack", ref("middle"))


def test_the_output_channel_is_the_outbound_binding_when_both_are_set(db):
    session(
        "root",
        input_channel=binding("agent-in", "agent"),
        output_channel=binding("web", "browser"),
    )
    route = route_prompt(ref("root"), DatabaseSessionReader())
    assert route.binding["name"] == "web"


def test_an_input_channel_read_by_a_person_is_not_used_when_the_output_channel_is_an_agents(db):
    session("root", input_channel=binding("web", "browser"))
    session(
        "mid",
        parent="root",
        input_channel=binding("slack-in", "slack"),
        output_channel=binding("agent-out", "agent"),
    )
    route = route_prompt(ref("mid"), DatabaseSessionReader())
    assert route.owner == ref("root")


def test_a_session_without_bindings_is_climbed_past():
    tree = Tree(root=(None, binding("web", "browser")), kubectl_started=("root", None))
    assert route_prompt(ref("kubectl_started"), tree).owner == ref("root")


def test_with_no_human_channel_anywhere_the_prompt_is_undeliverable_never_sent_to_an_agent():
    tree = Tree(root=(None, binding("ci", "github")), child=("root", binding("a", "agent")))
    route = route_prompt(ref("child"), tree)
    assert route.binding is None
    assert route.owner is None
    assert not route.deliverable
    assert chain_names(route) == ["child", "root"]


def test_a_parent_that_cannot_be_read_is_an_error_never_a_root():
    tree = Tree(child=("vanished", binding("a", "agent")))
    with pytest.raises(ParentUnreadable, match="parent of team/child, team/vanished"):
        route_prompt(ref("child"), tree)


def test_an_asking_session_that_cannot_be_read_is_an_error():
    with pytest.raises(ParentUnreadable, match="asking session"):
        route_prompt(ref("ghost"), Tree())


def test_an_unknown_channel_kind_on_the_way_is_an_error():
    tree = Tree(root=(None, binding("web", "browser")), child=("root", binding("x", "pigeon")))
    with pytest.raises(UnknownKind, match="pigeon"):
        route_prompt(ref("child"), tree)


def test_a_binding_without_a_kind_is_an_error():
    tree = Tree(root=(None, {"name": "web"}))
    with pytest.raises(UnknownKind):
        route_prompt(ref("root"), tree)


def test_a_cycle_in_the_lineage_is_an_error():
    tree = Tree(a=("b", binding("x", "agent")), b=("a", binding("y", "agent")))
    with pytest.raises(LineageCycle):
        route_prompt(ref("a"), tree)


def linear_tree(depth: int) -> Tree:
    """s0 is the root (browser); s<depth> is the deepest; each climbs one hop."""
    sessions: dict[str, tuple[str | None, dict | None]] = {"s0": (None, binding("web", "browser"))}
    for i in range(1, depth + 1):
        sessions[f"s{i}"] = (f"s{i - 1}", binding(f"a{i}", "agent"))
    return Tree(**sessions)


def test_a_walk_of_exactly_16_hops_reaches_the_root():
    route = route_prompt(ref("s16"), linear_tree(16))
    assert route.owner == ref("s0")
    assert len(route.chain) == 17


def test_a_walk_that_needs_17_hops_is_a_cycle_error():
    with pytest.raises(LineageCycle, match="16 hops"):
        route_prompt(ref("s17"), linear_tree(17))


def test_parents_in_another_namespace_are_followed(db):
    session("root", ns="platform", input_channel=binding("web", "browser"))
    session(
        "child", ns="team", parent="root", parent_ns="platform", input_channel=binding("a", "agent")
    )
    route = route_prompt(ref("child"), DatabaseSessionReader())
    assert route.owner == SessionRef("platform", "root")
    assert route.asking_chain == [
        {"ns": "team", "name": "child"},
        {"ns": "platform", "name": "root"},
    ]
