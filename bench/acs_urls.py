"""The project's URLs plus ``POST /bench/echo``, a bare JSON-RPC echo on the same stack (same
middleware, same server), mounted only in the benchmark's server."""

from __future__ import annotations

import json

from django.http import HttpRequest, HttpResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from config.urls import urlpatterns as project_urlpatterns


@csrf_exempt
def echo(request: HttpRequest) -> HttpResponse:
    envelope = json.loads(request.body)
    answer = {"jsonrpc": "2.0", "id": envelope.get("id"), "result": envelope.get("params")}
    return HttpResponse(json.dumps(answer), content_type="application/json")


urlpatterns = [path("bench/echo", echo), *project_urlpatterns]
