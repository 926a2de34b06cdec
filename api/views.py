"""The machine API, one view per use case. Views check access and shape, then call the same
services as the reviewer pages and Slack."""

from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, status
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api import serializers as s
from api.access import CanDecide, CanRead, check_namespace, token_of
from api.idempotency import idempotent
from approvals.decisions import card_decide
from approvals.identity import Identity
from approvals.interaction_requests import (
    InteractionRequest,
    InteractionRequestInvalid,
    as_resource_names,
    interaction_request_raise,
)
from approvals.models import AuditEntry, Card, CardState, Category, DecisionChannel, SlackUser
from approvals.selectors import cards_routed_to
from delegations.lineage import (
    DatabaseSessionReader,
    RoutingError,
    SessionRef,
    route_prompt,
    session_view,
)
from delegations.models import AgentSession, SubagentRequest
from delegations.platform import LINEAGE_MAX_HOPS

ERRORS = {
    400: OpenApiResponse(s.ErrorOut, description="Bad input; `field` names the part at fault."),
    401: OpenApiResponse(s.ErrorOut, description="No valid token or session."),
    403: OpenApiResponse(s.ErrorOut, description="Wrong scope or namespace."),
    404: OpenApiResponse(s.ErrorOut, description="Not known here (or not visible to you)."),
    429: OpenApiResponse(s.ErrorOut, description="Rate limit; see Retry-After."),
}
POST_ERRORS = {
    **ERRORS,
    409: OpenApiResponse(s.ErrorOut, description="Conflict (requestRef, Idempotency-Key)."),
    413: OpenApiResponse(s.ErrorOut, description="Body over the size limit."),
    415: OpenApiResponse(s.ErrorOut, description="Not JSON."),
    422: OpenApiResponse(s.ErrorOut, description="Idempotency-Key reused for another body."),
}
IDEMPOTENCY_HEADER = OpenApiParameter(
    "Idempotency-Key",
    str,
    OpenApiParameter.HEADER,
    description="A repeat with the same key returns the first answer (24 h).",
)


class ApiView(APIView):
    def visible_cards(self, request: Request) -> QuerySet[Card]:
        """Tokens see their namespaces' cards; reviewers what is routed to them; staff all."""
        token = token_of(request)
        if token is not None:
            cards = Card.objects.all()
            if token.namespaces:
                cards = cards.filter(session_namespace__in=token.namespaces)
            return cards.select_related("decision")
        if request.user.is_staff:
            return Card.objects.select_related("decision")
        email = (request.user.email or "").strip().lower()
        return cards_routed_to(email) if email else Card.objects.none()


class CardCursor(CursorPagination):
    ordering = "-id"
    page_size = 50
    page_size_query_param = "limit"
    max_page_size = 200


def _ref(value: str) -> tuple[str, str]:
    namespace, _, name = value.partition("/")
    return namespace, name


class CardList(ApiView):
    permission_classes = [CanRead]

    @extend_schema(
        operation_id="cards_list",
        parameters=[s.CardFilterIn],
        responses={200: s.CardPageOut, **ERRORS},
        description="Cards, newest first, with cursor pagination (`next`/`previous` links).",
    )
    def get(self, request: Request) -> Response:
        filters = s.CardFilterIn(data=request.query_params)
        filters.is_valid(raise_exception=True)
        wanted: dict[str, Any] = filters.validated_data
        cards = self.visible_cards(request)
        if "namespace" in wanted:
            check_namespace(request, wanted["namespace"], "namespace")
            cards = cards.filter(session_namespace=wanted["namespace"])
        if "category" in wanted:
            cards = cards.filter(category=wanted["category"])
        if "session" in wanted:
            namespace, name = _ref(wanted["session"])
            cards = cards.filter(session_namespace=namespace, session_name=name)
        if "channel" in wanted:
            namespace, name = _ref(wanted["channel"])
            cards = cards.filter(route_channel_namespace=namespace, route_channel_name=name)
        state = wanted.get("state")
        now = timezone.now()
        if state == "open":
            cards = cards.filter(state=CardState.OPEN, expires_at__gt=now)
        elif state == "expired":
            cards = cards.filter(
                Q(state=CardState.EXPIRED) | Q(state=CardState.OPEN, expires_at__lte=now)
            )
        elif state == "decided":
            cards = cards.filter(state__in=[CardState.APPROVED, CardState.DENIED])
        elif state:
            cards = cards.filter(state=state)
        paginator = CardCursor()
        page = paginator.paginate_queryset(cards, request, view=self)
        return paginator.get_paginated_response([s.card_out(card) for card in page or []])


class CardDetail(ApiView):
    permission_classes = [CanRead]

    @extend_schema(
        operation_id="cards_retrieve",
        responses={200: s.CardDetailOut, **ERRORS},
        description="One card with its asking chain and its decision history.",
    )
    def get(self, request: Request, card_id: Any) -> Response:
        card = Card.objects.filter(interaction_id=card_id).first()
        if card is not None:
            check_namespace(request, card.session_namespace)
            card = self.visible_cards(request).filter(pk=card.pk).first()
        if card is None:
            raise exceptions.NotFound(f"No card {card_id} is visible to you.")
        history = list(AuditEntry.objects.filter(card_id=card.pk).order_by("at", "id"))
        return Response({**s.card_out(card), "history": s.history_out(history)})


class InteractionRequestCreate(ApiView):
    permission_classes = [CanDecide]

    @extend_schema(
        operation_id="interaction_requests_create",
        request=s.InteractionRequestIn,
        parameters=[IDEMPOTENCY_HEADER],
        responses={
            201: OpenApiResponse(s.CardOut, description="Raised now."),
            200: OpenApiResponse(s.CardOut, description="Raised before with this requestRef."),
            **POST_ERRORS,
        },
        description=(
            "Raise a prompt (`interaction_request`) for a runtime outside Kubernetes. "
            "Idempotent on requestRef; routed up the session's lineage like any card."
        ),
    )
    @idempotent
    def post(self, request: Request) -> Response:
        body = s.InteractionRequestIn(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        session = data["session"]
        check_namespace(request, session["namespace"], "session.namespace")
        try:
            card, created = interaction_request_raise(
                request=InteractionRequest(
                    category=data["category"],
                    request_ref=data["requestRef"],
                    session_namespace=session["namespace"],
                    session_name=session["name"],
                    lead=data["lead"],
                    fields=[dict(f) for f in data["fields"]],
                    actions=[dict(a) for a in data["actions"]],
                    resources=as_resource_names(data["resources"]),
                    expires_at=data["expiresAt"],
                )
            )
        except InteractionRequestInvalid as exc:
            raise _invalid(exc) from exc
        return Response(
            s.card_out(card), status=status.HTTP_201_CREATED if created else status.HTTP_200_OK
        )


class _Refused(exceptions.APIException):
    pass


def _invalid(exc: InteractionRequestInvalid) -> exceptions.APIException:
    if exc.status == 400:
        return exceptions.ValidationError({exc.field: str(exc)} if exc.field else str(exc))
    error = _Refused({exc.field: str(exc)} if exc.field else str(exc))
    error.status_code = exc.status
    return error


def _decider_identity(decider: dict[str, Any]) -> Identity:
    """The person the surface vouches for: their email, or a mapped Slack account. An identity
    without an email is refused by the decision service's first gate."""
    email = (decider.get("email") or "").strip().lower()
    if email:
        return Identity(email=email)
    external = decider.get("externalId") or ""
    if decider["kind"] == "slack" and external:
        team, _, user = external.rpartition("/")
        mapped = SlackUser.objects.filter(user_id=user)
        if team:
            mapped = mapped.filter(team_id=team)
        emails = set(mapped.values_list("email", flat=True))
        if len(emails) == 1:
            return Identity(email=emails.pop())
    return Identity(email="")


class InteractionDecisionCreate(ApiView):
    permission_classes = [CanDecide]

    @extend_schema(
        operation_id="interaction_decisions_create",
        request=s.InteractionDecisionIn,
        parameters=[IDEMPOTENCY_HEADER],
        responses={200: s.DecisionAnswerOut, **POST_ERRORS},
        description=(
            "Submit a decision (`interaction_decision`) a surface collected itself. The same "
            "gates as the web apply: the answer is `applied` with the outcome, or `rejected` "
            "with the reason class."
        ),
    )
    @idempotent
    def post(self, request: Request) -> Response:
        body = s.InteractionDecisionIn(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        session = data["agentSessionRef"]
        check_namespace(request, session["namespace"], "agentSessionRef.namespace")
        cards = Card.objects.filter(
            session_namespace=session["namespace"],
            session_name=session["name"],
            request_ref=data["requestRef"],
        )
        # Several cards share a disclosure's requestRef when a slot was asked again; the open
        # one is the one to decide.
        card = cards.filter(state=CardState.OPEN).first() or cards.order_by("-id").first()
        if card is None:
            raise exceptions.NotFound(
                {
                    "requestRef": f"No prompt {data['requestRef']} of session "
                    f"{session['namespace']}/{session['name']} is known here."
                }
            )
        action_ids = [action.get("id") for action in card.actions]
        if card.category != Category.DATA_SLOT_DISCLOSURE and data["actionId"] not in action_ids:
            raise exceptions.ValidationError(
                {"actionId": f"This prompt offers the actions {', '.join(action_ids)}."}
            )
        result = card_decide(
            card_id=card.pk,
            identity=_decider_identity(data["decider"]),
            action_id=data["actionId"],
            channel=DecisionChannel.API,
            category=data["category"],
            reason=data["reason"],
        )
        card.refresh_from_db()
        if result.applied:
            answer = {"result": "applied", "outcome": result.outcome, "message": result.message}
        else:
            answer = {
                "result": "rejected",
                "reason": str(result.refusal),
                "message": result.message,
            }
        return Response({**answer, "card": s.card_out(card)})


class SessionLineage(ApiView):
    permission_classes = [CanRead]

    @extend_schema(
        operation_id="sessions_lineage",
        responses={200: s.LineageOut, **ERRORS},
        description="The session's lineage up to the root, and its nearest human channel.",
    )
    def get(self, request: Request, namespace: str, name: str) -> Response:
        check_namespace(request, namespace)
        reader = DatabaseSessionReader()
        start = SessionRef(namespace, name)
        if reader.read_session(start) is None:
            raise exceptions.NotFound(f"No AgentSession {namespace}/{name} is known here.")
        nearest, error = None, None
        try:
            route = route_prompt(start, reader)
            if route.owner is not None and route.binding is not None:
                nearest = {
                    "namespace": route.owner.namespace,
                    "name": str(route.binding.get("name", "")),
                    "kind": str(route.binding.get("kind", "")),
                    "session": {"namespace": route.owner.namespace, "name": route.owner.name},
                }
        except RoutingError as exc:
            error = {"reason": exc.reason, "message": str(exc)}
        return Response(
            {
                "session": {"namespace": namespace, "name": name},
                "chain": _lineage(start),
                "nearestHumanChannel": nearest,
                "routingError": error,
            }
        )


def _lineage(start: SessionRef) -> list[dict[str, Any]]:
    """Every readable session from ``start`` towards the root (bounded, cycle-safe)."""
    seen: set[SessionRef] = set()
    chain: list[dict[str, Any]] = []
    current: SessionRef | None = start
    while current is not None and current not in seen and len(chain) <= LINEAGE_MAX_HOPS:
        row = AgentSession.objects.filter(namespace=current.namespace, name=current.name).first()
        if row is None:
            break
        seen.add(current)
        outbound = row.outbound_binding
        chain.append(
            {
                "namespace": row.namespace,
                "name": row.name,
                "origin": row.origin,
                "outbound": (
                    {
                        "namespace": row.namespace,
                        "name": str(outbound.get("name", "")),
                        "kind": str(outbound.get("kind", "")),
                    }
                    if outbound
                    else None
                ),
            }
        )
        current = session_view(row).parent
    return chain


class SubagentRequestDetail(ApiView):
    permission_classes = [CanRead]

    @extend_schema(
        operation_id="subagentrequests_retrieve",
        responses={
            200: OpenApiResponse(description="The object as Kubernetes holds it."),
            **ERRORS,
        },
    )
    def get(self, request: Request, namespace: str, name: str) -> Response:
        check_namespace(request, namespace)
        row = SubagentRequest.objects.filter(namespace=namespace, name=name).first()
        if row is None:
            raise exceptions.NotFound(f"No SubagentRequest {namespace}/{name} is known here.")
        return Response(row.as_kubernetes_object())
