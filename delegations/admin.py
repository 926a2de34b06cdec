"""Operators' read-only view of the mirrored platform objects (writes go through services)."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html

from delegations.models import AgentSession, Channel, SubagentRequest


class ReadOnlyObjectAdmin(admin.ModelAdmin):
    readonly_fields = ("object_json",)
    fields = ("object_json",)
    search_fields = ("namespace", "name")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="object")
    def object_json(self, obj: Any) -> str:
        return format_html("<pre>{}</pre>", json.dumps(obj.as_kubernetes_object(), indent=2))


@admin.register(SubagentRequest)
class SubagentRequestAdmin(ReadOnlyObjectAdmin):
    list_display = ("namespace", "name", "phase", "parent_namespace", "parent_name", "origin")
    list_filter = ("phase", "namespace", "origin")


@admin.register(AgentSession)
class AgentSessionAdmin(ReadOnlyObjectAdmin):
    list_display = ("namespace", "name", "parent_namespace", "parent_name", "origin")
    list_filter = ("namespace", "origin")


@admin.register(Channel)
class ChannelAdmin(ReadOnlyObjectAdmin):
    list_display = ("namespace", "name", "kind", "role", "origin")
    list_filter = ("kind", "namespace")
