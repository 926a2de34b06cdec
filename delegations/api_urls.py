from django.urls import path

from delegations.api import SubagentRequestDetail

urlpatterns = [
    path(
        "subagentrequests/<str:namespace>/<str:name>",
        SubagentRequestDetail.as_view(),
        name="subagentrequest-detail",
    ),
]
