"""Reviewer pages. Thin: reads come from selectors, the decision from approvals.decisions."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import LoginView
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from approvals.decisions import card_decide, may_decide
from approvals.forms import DecisionForm, InboxFilterForm, ReviewerLoginForm
from approvals.identity import Identity
from approvals.models import AuditEntry, Card
from approvals.selectors import (
    STATE_FILTERS,
    card_visible_to,
    delegation_prompts,
    delegation_prompts_routed_to,
    inbox_cards,
    inbox_namespaces,
)


class ReviewerLoginView(LoginView):
    form_class = ReviewerLoginForm
    redirect_authenticated_user = True


@require_GET
@login_required
def inbox(request: HttpRequest) -> HttpResponse:
    form = InboxFilterForm(request.GET or None)
    state, namespace = "open", ""
    status = 200
    if form.is_bound:
        if form.is_valid():
            state = form.cleaned_data["state"] or "open"
            namespace = form.cleaned_data["namespace"]
        else:
            status = 400
    email = Identity.of_user(request.user).email
    cards = inbox_cards(email, state=state, namespace=namespace) if email else Card.objects.none()
    page = Paginator(cards, 50).get_page(request.GET.get("page"))
    context = {
        "form": form,
        "state": state,
        "state_label": STATE_FILTERS[state],
        "namespace": namespace,
        "namespaces": inbox_namespaces(email) if email else [],
        "states": STATE_FILTERS,
        "page": page,
        "prompts": delegation_prompts_routed_to(email) if email and state == "open" else [],
        "now": timezone.now(),
        "has_email": bool(email),
    }
    return render(request, "approvals/inbox.html", context, status=status)


def _card_page(
    request: HttpRequest, card: Card, form: DecisionForm | None = None, status: int = 200
) -> HttpResponse:
    question = input_slot = input_why = ""
    if card.request is not None:
        question, input_slot, input_why = delegation_prompts(card.request)
    now = timezone.now()
    decidable = card.is_open and now < card.expires_at
    email = Identity.of_user(request.user).email
    context = {
        "may_decide": decidable and may_decide(card, email),
        "card": card,
        "decision": getattr(card, "decision", None),
        "form": form or DecisionForm(initial={"category": card.category}, actions=card.actions),
        "decidable": decidable,
        "timed_out": card.is_open and not decidable,
        "question": question,
        "input_slot": input_slot,
        "input_why": input_why,
        "now": now,
    }
    return render(request, "approvals/card.html", context, status=status)


@require_GET
@login_required
def card_detail(request: HttpRequest, pk: int) -> HttpResponse:
    card = card_visible_to(pk, request.user)
    if card is None:
        raise Http404("No such request is routed to you.")
    return _card_page(request, card)


@require_POST
@login_required
def card_decide_view(request: HttpRequest, pk: int) -> HttpResponse:
    card = card_visible_to(pk, request.user)
    if card is None:
        raise Http404("No such request is routed to you.")
    form = DecisionForm(request.POST, actions=card.actions)
    if not form.is_valid():
        return _card_page(request, card, form=form, status=400)
    result = card_decide(
        card_id=card.pk,
        identity=Identity.of_user(request.user),
        action_id=form.cleaned_data["action"],
        category=form.cleaned_data["category"],
        reason=form.cleaned_data["reason"],
        channel="web",
    )
    if result.applied:
        messages.success(request, result.message)
    else:
        messages.error(request, f"Not recorded ({result.refusal}): {result.message}")
    return redirect("approvals:card", pk=card.pk)


@require_GET
@staff_member_required
def audit_log(request: HttpRequest) -> HttpResponse:
    page = Paginator(AuditEntry.objects.all(), 100).get_page(request.GET.get("page"))
    return render(request, "approvals/audit.html", {"page": page})
