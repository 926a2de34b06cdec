from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth.forms import AuthenticationForm

from approvals.decisions import REASON_MAX_LENGTH
from approvals.models import Category
from approvals.selectors import STATE_FILTERS


class ReviewerLoginForm(AuthenticationForm):
    username = forms.EmailField(
        label="Email",
        widget=forms.EmailInput(attrs={"autofocus": True, "autocomplete": "email"}),
    )

    error_messages = {
        **AuthenticationForm.error_messages,
        "invalid_login": "That email and password do not match a reviewer account.",
    }


class DecisionForm(forms.Form):
    """The card's own buttons: a disclosure's Share it / Don't share, or the actions a runtime
    raised its prompt with."""

    action = forms.ChoiceField(choices=[])
    category = forms.ChoiceField(choices=Category.choices, widget=forms.HiddenInput)
    reason = forms.CharField(
        label="Reason (optional)",
        required=False,
        max_length=REASON_MAX_LENGTH,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Recorded with your decision and shown in the history.",
    )

    def __init__(self, *args: Any, actions: list[dict[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["action"].choices = [(a["id"], a["label"]) for a in actions]


class InboxFilterForm(forms.Form):
    state = forms.ChoiceField(choices=list(STATE_FILTERS.items()), required=False)
    namespace = forms.RegexField(
        regex=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        max_length=63,
        required=False,
        error_messages={"invalid": "A namespace is lowercase letters, digits and '-'."},
    )
