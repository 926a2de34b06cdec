from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

from approvals import slack_views
from approvals.views import ReviewerLoginView

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="approvals:inbox", permanent=False)),
    path("accounts/login/", ReviewerLoginView.as_view(), name="login"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("admin/", admin.site.urls),
    path("api/", include("api.urls")),
    path("", include("delegations.acs.urls")),
    path("slack/interactions", slack_views.interactions, name="slack-interactions"),
    path("", include("approvals.urls")),
]

handler404 = "api.errors.not_found"
handler500 = "api.errors.server_error"
