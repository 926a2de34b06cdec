from django.urls import path

from delegations.acs.views import acs_endpoint

urlpatterns = [path("acs", acs_endpoint, name="acs")]
