"""Who a reviewer is: their verified email, and its canonical subject."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.http import HttpRequest


def canonical_subject(email: str) -> str:
    """base64url of the lower-cased email, without padding (the platform's subject form)."""
    return base64.urlsafe_b64encode(email.strip().lower().encode()).decode().rstrip("=")


@dataclass(frozen=True)
class Identity:
    """A person as a decision surface verified them. ``email`` is "" when none was verified."""

    email: str
    display: str = ""

    @property
    def subject(self) -> str:
        return canonical_subject(self.email) if self.email else ""

    @classmethod
    def of_user(cls, user: Any) -> Identity:
        """Accounts are provisioned by an administrator, who vouches for the email on them."""
        if not getattr(user, "is_authenticated", False) or not getattr(user, "is_active", False):
            return cls(email="")
        email = (user.email or "").strip().lower()
        return cls(email=email, display=user.get_full_name() or email)


class EmailBackend(ModelBackend):
    """Sign in with email and password; the email is the reviewer's identity."""

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> Any:
        if not username or not password:
            return None
        user_model = get_user_model()
        users = list(user_model.objects.filter(email__iexact=username.strip())[:2])
        if len(users) != 1:
            # Unknown or ambiguous email: run the hasher anyway so timing does not tell which.
            user_model().set_password(password)
            return None
        user = users[0]
        if user.check_password(password) and self.user_can_authenticate(user):
            return user
        return None
