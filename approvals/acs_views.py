"""The operators' page of ACS sessions: chain state (open, sealed, verified, broken), lineage and
anomalies. Staff only; reads come from delegations.acs.selectors."""

from __future__ import annotations

from django.contrib.admin.views.decorators import staff_member_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from delegations.acs.selectors import chain_status, sessions_for_operators


@require_GET
@staff_member_required
def acs_sessions(request: HttpRequest) -> HttpResponse:
    page = Paginator(sessions_for_operators(), 50).get_page(request.GET.get("page"))
    rows = [(session, chain_status(session)) for session in page.object_list]
    return render(request, "approvals/acs_sessions.html", {"page": page, "rows": rows})
