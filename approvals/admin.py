from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from approvals.models import (
    AuditEntry,
    Card,
    ChannelWatcher,
    DataTag,
    Decision,
    Notification,
    NotificationAttempt,
    ResourceOwner,
    SlackUser,
    SourceResource,
    Subscriber,
)


class ResourceOwnerInline(admin.TabularInline):
    model = ResourceOwner
    extra = 1


@admin.register(SourceResource)
class SourceResourceAdmin(admin.ModelAdmin):
    list_display = ("kind", "name")
    search_fields = ("kind", "name", "owners__email")
    inlines = [ResourceOwnerInline]


@admin.register(DataTag)
class DataTagAdmin(admin.ModelAdmin):
    list_display = ("tag_id", "label")
    search_fields = ("tag_id", "label")
    filter_horizontal = ("sources",)


@admin.register(ChannelWatcher)
class ChannelWatcherAdmin(admin.ModelAdmin):
    list_display = ("email", "channel_namespace", "channel_name")
    search_fields = ("email", "channel_name")


class UndeliverableFilter(admin.SimpleListFilter):
    title = "delivery"
    parameter_name = "delivery"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("undeliverable", "Not delivered to anyone"), ("delivered", "Delivered")]

    def queryset(self, request: HttpRequest, queryset: Any) -> Any:
        if self.value() == "undeliverable":
            return queryset.exclude(undeliverable="")
        if self.value() == "delivered":
            return queryset.filter(undeliverable="")
        return queryset


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Card)
class CardAdmin(ReadOnlyAdmin):
    list_display = (
        "request_ref",
        "request_namespace",
        "state",
        "expires_at",
        "route_channel_name",
        "undeliverable",
    )
    list_filter = (UndeliverableFilter, "undeliverable", "state", "category", "request_namespace")
    search_fields = ("request_ref", "request_name", "session_name")
    exclude = ("tag_id",)


@admin.register(Decision)
class DecisionAdmin(ReadOnlyAdmin):
    list_display = ("card", "outcome", "decided_by_email", "channel", "decided_at", "delivery")
    list_filter = ("outcome", "channel", "delivery")


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    list_display = ("at", "action", "actor_email", "channel", "request_ref", "outcome")
    list_filter = ("action", "channel", "outcome")
    search_fields = ("request_ref", "actor_email")


@admin.register(SlackUser)
class SlackUserAdmin(admin.ModelAdmin):
    list_display = ("email", "team_id", "user_id")
    search_fields = ("email", "user_id")


@admin.register(Subscriber)
class SubscriberAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "kind",
        "enabled",
        "channel_namespace",
        "channel_name",
        "disabled_reason",
    )
    list_filter = ("kind", "enabled")
    search_fields = ("name", "channel_name")
    readonly_fields = ("disabled_reason",)


class NotificationAttemptInline(admin.TabularInline):
    model = NotificationAttempt
    extra = 0
    can_delete = False
    readonly_fields = ("at", "status", "error")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Notification)
class NotificationAdmin(ReadOnlyAdmin):
    list_display = (
        "event",
        "subscriber",
        "card_id",
        "state",
        "attempts",
        "last_error",
        "created_at",
    )
    list_filter = ("state", "event", "subscriber")
    inlines = [NotificationAttemptInline]
