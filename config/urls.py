from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import path, register_converter
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView
from rest_framework.decorators import api_view, authentication_classes, permission_classes
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

import config.schema  # noqa: F401  (registers the OpenAPI extensions)
from config.api import IdConverter
from history.apis import MessageIngestApi
from memory.apis import (
    LedgerApi,
    MyGrantRevokeApi,
    MySharingDecisionApi,
    MySharingRequestsApi,
    ReplyCreateApi,
    RoundCreateApi,
    SessionCreateApi,
    SessionDetailApi,
    TraceDetailApi,
    TurnCreateApi,
    TurnDetailApi,
)
from memory.apis.data import MemoryDetailApi, MemoryIdConverter, MemoryListApi
from memory.apis.tools import ToolsApi, TurnToolsApi
from pages.about import about_you, about_you_reject, about_you_revoke
from pages.views import (
    home,
    message_detail,
    my_data_export,
    rejection_create,
    turn_detail,
    turn_list,
    written_rejection_create,
)


@extend_schema(exclude=True)
@api_view(["GET"])
@authentication_classes([])
@permission_classes([AllowAny])
def api_root(request: Request) -> Response:
    """The API's front door: where the schema and its documentation live."""
    return Response(
        {
            "service": "engram",
            "version": "v1",
            "schema": request.build_absolute_uri("/api/schema/"),
            "docs": request.build_absolute_uri("/api/docs/"),
            "redoc": request.build_absolute_uri("/api/redoc/"),
        }
    )


# Every id in a path is a bigint row id: out of range, it matches no route and answers 404.
register_converter(IdConverter, "id")
# A memory, as people name it: ``m:`` and a revision's hex id, or the entry id.
register_converter(MemoryIdConverter, "memory")

public = {"authentication_classes": [], "permission_classes": [AllowAny]}

# API paths answer a JSON error body even for URLs no route matches (say, a negative id).
handler404 = "config.views.not_found"
# ... and a request refused before routing (no or a disallowed Host header) answers one too.
handler400 = "config.views.bad_request"
# ... as do a PermissionDenied outside DRF and an unhandled exception; other paths get the site's pages.
handler403 = "config.views.permission_denied"
handler500 = "config.views.server_failure"

urlpatterns = [
    path("", home, name="engram-home"),
    path("admin/", admin.site.urls),
    path("api/", api_root, name="api-root"),
    path("api/schema/", SpectacularAPIView.as_view(**public), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema", **public), name="api-docs"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="api-schema", **public), name="api-redoc"),
    path("api/v1/messages", MessageIngestApi.as_view(), name="messages-ingest"),
    path("api/v1/sessions", SessionCreateApi.as_view(), name="sessions-create"),
    path("api/v1/sessions/<id:session_id>", SessionDetailApi.as_view(), name="sessions-detail"),
    path("api/v1/sessions/<id:session_id>/turns", TurnCreateApi.as_view(), name="turns-create"),
    path("api/v1/turns/<id:turn_id>", TurnDetailApi.as_view(), name="turns-detail"),
    path("api/v1/turns/<id:turn_id>/rounds", RoundCreateApi.as_view(), name="turns-rounds"),
    path("api/v1/turns/<id:turn_id>/ledger", LedgerApi.as_view(), name="turns-ledger"),
    path("api/v1/turns/<id:turn_id>/reply", ReplyCreateApi.as_view(), name="turns-reply"),
    path("api/v1/traces/<id:trace_id>", TraceDetailApi.as_view(), name="traces-detail"),
    path("api/v1/me/sharing-requests", MySharingRequestsApi.as_view(), name="me-sharing-requests"),
    path(
        "api/v1/me/sharing-requests/<id:request_id>/decision",
        MySharingDecisionApi.as_view(),
        name="me-sharing-decision",
    ),
    path("api/v1/me/grants/<id:grant_id>/revoke", MyGrantRevokeApi.as_view(), name="me-grants-revoke"),
    # -- tool definitions for models (the Python client's tools(); memory/apis/tools.py) --
    path("api/v1/tools", ToolsApi.as_view(), name="tools-list"),
    path("api/v1/turns/<id:turn_id>/tools", TurnToolsApi.as_view(), name="turns-tools"),
    # -- end of tool definitions --
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("turns/", turn_list, name="engram-turns"),
    path("turns/<id:turn_id>/", turn_detail, name="engram-turn"),
    path("turns/<id:turn_id>/items/<id:item_id>/reject/", rejection_create, name="engram-reject"),
    path(
        "turns/<id:turn_id>/memories/<id:revision_id>/reject/", written_rejection_create, name="engram-reject-written"
    ),
    path("messages/<id:message_id>/", message_detail, name="engram-message"),
]

# --- data rights: the management API (an agent's own memories) and the person's own export ---------
urlpatterns += [
    path("api/v1/memories", MemoryListApi.as_view(), name="memories-list"),
    path("api/v1/memories/<memory:memory_id>", MemoryDetailApi.as_view(), name="memories-detail"),
    path("my-data/export.json", my_data_export, name="engram-my-data"),
]

# --- what the agent knows about the signed-in person (pages/about.py) ----------------------------------
urlpatterns += [
    path("about-you/", about_you, name="engram-about"),
    path("about-you/memories/<id:revision_id>/reject/", about_you_reject, name="engram-about-reject"),
    path("about-you/grants/<id:grant_id>/revoke/", about_you_revoke, name="engram-about-revoke"),
]
