"""Read-only API over the mirrored platform objects."""

from __future__ import annotations

from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from delegations.api_errors import error_body
from delegations.models import SubagentRequest


class SubagentRequestDetail(APIView):
    """``GET /api/v1/subagentrequests/<namespace>/<name>``: the object as Kubernetes holds it."""

    def get(self, request: Request, namespace: str, name: str) -> Response:
        row = SubagentRequest.objects.filter(namespace=namespace, name=name).first()
        if row is None:
            return Response(
                error_body(f"No SubagentRequest {namespace}/{name} is known here."), status=404
            )
        return Response(row.as_kubernetes_object())
