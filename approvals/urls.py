from django.urls import path

from approvals import acs_views, views

app_name = "approvals"

urlpatterns = [
    path("inbox/", views.inbox, name="inbox"),
    path("cards/<int:pk>/", views.card_detail, name="card"),
    path("cards/<int:pk>/decide", views.card_decide_view, name="decide"),
    path("audit/", views.audit_log, name="audit"),
    path("acs/sessions/", acs_views.acs_sessions, name="acs-sessions"),
]
