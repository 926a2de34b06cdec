from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from api import views

app_name = "api"

urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api:schema"), name="docs"),
    path("v1/cards", views.CardList.as_view(), name="cards"),
    path("v1/cards/<uuid:card_id>", views.CardDetail.as_view(), name="card"),
    path(
        "v1/interactions/requests",
        views.InteractionRequestCreate.as_view(),
        name="interaction-requests",
    ),
    path(
        "v1/interactions/decisions",
        views.InteractionDecisionCreate.as_view(),
        name="interaction-decisions",
    ),
    path(
        "v1/sessions/<str:namespace>/<str:name>/lineage",
        views.SessionLineage.as_view(),
        name="session-lineage",
    ),
    path(
        "v1/subagentrequests/<str:namespace>/<str:name>",
        views.SubagentRequestDetail.as_view(),
        name="subagentrequest-detail",
    ),
]
