from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from api.models import ApiToken
from api.tokens import NAMESPACE_PATTERN, token_create


class ApiTokenForm(forms.ModelForm):
    class Meta:
        model = ApiToken
        fields = ["name", "scope", "namespaces"]

    def clean_namespaces(self) -> list[str]:
        namespaces = self.cleaned_data.get("namespaces") or []
        if not isinstance(namespaces, list) or not all(isinstance(n, str) for n in namespaces):
            raise forms.ValidationError('A JSON list of namespace names, e.g. ["team-a"].')
        for namespace in namespaces:
            if not NAMESPACE_PATTERN.match(namespace):
                raise forms.ValidationError(f"{namespace!r} is not a Kubernetes namespace name.")
        return sorted(set(namespaces))


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens are created here or by `manage.py create_api_token`; the secret is shown once."""

    list_display = [
        "name",
        "key",
        "scope",
        "namespace_list",
        "created_at",
        "last_used_at",
        "revoked_at",
    ]
    list_filter = ["scope", ("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["name", "key"]
    readonly_fields = ["key", "created_at", "last_used_at", "revoked_at"]
    fields = ["name", "scope", "namespaces", "key", "created_at", "last_used_at", "revoked_at"]
    actions = ["revoke"]
    form = ApiTokenForm

    @admin.display(description="namespaces")
    def namespace_list(self, token: ApiToken) -> str:
        return ", ".join(token.namespaces) or "all"

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # revoke instead: the row says who had access, and until when

    def save_model(self, request: HttpRequest, obj: ApiToken, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        created, text = token_create(name=obj.name, scope=obj.scope, namespaces=obj.namespaces)
        obj.pk, obj.key = created.pk, created.key
        self.message_user(
            request,
            f"Token for {created.name}; copy it now, it is not stored and is never shown again: "
            f"{text}",
            messages.WARNING,
        )

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        for token in queryset:
            token.revoke()
        self.message_user(request, f"Revoked {queryset.count()} token(s).")
